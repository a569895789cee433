"""``DURABLE_JOBS["SYNCHRONOUS_COMMIT"] = False``: the worker's own transactions commit
without waiting for PostgreSQL's WAL flush; everything else stays durable."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connection, transaction
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

import durable_jobs
from durable_jobs.db import engine_for
from durable_jobs.lifecycle.transitions import settle_and_claim
from durable_jobs.models import Job
from durable_jobs.states import State, claim
from durable_jobs.worker import Worker
from tests.testapp import jobs

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="synchronous_commit is PostgreSQL's"
    ),
]

RELAX = "SET LOCAL synchronous_commit = off"


@contextmanager
def statements() -> Iterator[list[str]]:
    """The statements this thread's connection runs through Django's cursors."""
    seen: list[str] = []

    def record(execute: Callable[..., Any], sql: str, *args: Any) -> Any:
        seen.append(sql)
        return execute(sql, *args)

    with connection.execute_wrapper(record):
        yield seen


def test_a_claim_in_its_own_transaction_is_relaxed_only_when_configured() -> None:
    durable_jobs.enqueue_many([jobs.add.prepare(a=i) for i in range(3)])
    with statements() as seen:
        assert len(claim(queue="default", limit=1, node_id=None, lease_seconds=30)) == 1
    assert RELAX not in seen  # the default: durable
    with override_settings(DURABLE_JOBS={"SYNCHRONOUS_COMMIT": False}), statements() as seen:
        assert len(claim(queue="default", limit=1, node_id=None, lease_seconds=30)) == 1
    assert seen.count(RELAX) == 1


def test_a_claim_inside_the_callers_transaction_leaves_it_durable() -> None:
    """The caller's transaction may hold its own writes: not the claim's to relax."""
    jobs.add.delay(a=1)
    with override_settings(DURABLE_JOBS={"SYNCHRONOUS_COMMIT": False}), transaction.atomic():
        with statements() as seen:
            claim(queue="default", limit=1, node_id=None, lease_seconds=30)
        with connection.cursor() as cursor:
            cursor.execute("SHOW synchronous_commit")
            assert cursor.fetchone()[0] == "on"
    assert RELAX not in seen


def test_the_relaxed_setting_ends_with_the_transaction() -> None:
    """SET LOCAL: nothing leaks into the session (or, behind a pooler, to other clients)."""
    jobs.add.delay(a=1)
    with override_settings(DURABLE_JOBS={"SYNCHRONOUS_COMMIT": False}):
        claim(queue="default", limit=1, node_id=None, lease_seconds=30)
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        assert cursor.fetchone()[0] == "on"


def test_a_relaxed_pass_is_one_statement_and_ends_its_setting_with_it() -> None:
    """A loop pass of one claim commits on its own: relaxed, it carries the setting in its
    statement (set_config, local to that statement's transaction) instead of a BEGIN,
    SET LOCAL and COMMIT around it, and the session is durable again after it."""
    durable_jobs.enqueue_many([jobs.add.prepare(a=i) for i in range(3)])
    engine = engine_for(connection.alias)
    with (
        override_settings(DURABLE_JOBS={"SYNCHRONOUS_COMMIT": False}),
        CaptureQueriesContext(connection) as seen,
        engine.pass_transaction(one_claim=True),
    ):
        assert connection.get_autocommit()  # no transaction around the statement
        writes = settle_and_claim([], queue="default", limit=2, node_id=None, lease_seconds=30)
    assert len(writes.leased) == 2
    assert [q["sql"] for q in seen.captured_queries if "set_config" in q["sql"]], seen
    assert not [q for q in seen.captured_queries if RELAX in q["sql"]]
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        assert cursor.fetchone()[0] == "on"
    # Durable (the default), the same pass carries no setting at all.
    with CaptureQueriesContext(connection) as seen:
        settle_and_claim([], queue="default", limit=1, node_id=None, lease_seconds=30)
    assert seen.captured_queries
    assert not [q for q in seen.captured_queries if "set_config" in q["sql"]]
    assert Job.objects.filter(state=State.LEASED).count() == 3


def wal_syncs() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute("SELECT wal_sync FROM pg_stat_wal")
        return int(cursor.fetchone()[0])


def drain(count: int, settings: dict[str, Any]) -> int:
    """WAL flushes while one worker (concurrency 1: one pass per job) drains ``count``
    jobs; the worker's backend reports its counts when it disconnects."""
    durable_jobs.enqueue_many([jobs.add.prepare(a=i) for i in range(count)])
    before = wal_syncs()
    with override_settings(DURABLE_JOBS=settings):
        worker = Worker({"default": 1}, burst=True, scheduler=False)
        worker.start().join(120)
    assert worker.stats.outcomes == {"completed": count}
    time.sleep(1.0)  # stats of a backend that just exited
    return wal_syncs() - before


def test_a_relaxed_worker_waits_for_far_fewer_wal_flushes() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SHOW fsync")
        if cursor.fetchone()[0] != "on":
            pytest.skip("this server does not flush its WAL at all (fsync = off)")
    durable = drain(200, {})
    Job.objects.all().delete()
    relaxed = drain(200, {"SYNCHRONOUS_COMMIT": False})
    assert Job.objects.filter(state=State.COMPLETED).count() == 200
    # Durable: about one flush per pass; relaxed: the WAL writer's, a few per second.
    assert durable >= 150, durable
    assert relaxed < durable / 3, (durable, relaxed)
