"""Fault scenario 3: the database drops every worker connection, several times, mid-run.

The test terminates every connection to the test database except its own
(``pg_terminate_backend`` on PostgreSQL, ``KILL CONNECTION`` on MySQL and MariaDB),
three times while workers drain a batch: for the workers
this is what a server restart looks like (every connection fails at its next use),
without restarting a server other databases on the machine share. Each worker's
loop logs the error, backs off (0.25 s doubling) and reconnects; its listener
(PostgreSQL's) reconnects; a pool thread whose connection died fails that one job, which is retried.
No worker exits, and nothing is lost.
"""

from __future__ import annotations

import contextlib
import datetime
import time
from collections import Counter
from collections.abc import Callable

import pytest
from django.db import DatabaseError, connection
from django.utils import timezone

from durable_jobs import enqueue_many
from durable_jobs.models import Attempt, Job, Node, Outcome
from durable_jobs.states import State
from tests.conftest import wait_until
from tests.faults.conftest import (
    FaultSummary,
    FaultWorkers,
    account_executions,
    unfinished_count,
)
from tests.testapp import crash_jobs

pytestmark = [
    pytest.mark.faults,
    pytest.mark.subprocess,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(180),
]

SLOTS = 4
WORKER_ARGS = (
    "--queues",
    f"default:{SLOTS}",
    "--lease-seconds",
    "5",
    "--poll-interval",
    "0.2",
    "--no-scheduler",
)
WORKERS = 3
TOTAL = 4_000
TERMINATIONS = 3


def terminate_other_backends() -> int:
    """Terminate every connection to the test database but this one; return how many."""
    if connection.vendor == "mysql":
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT id FROM information_schema.processlist "
                "WHERE db = DATABASE() AND id <> CONNECTION_ID()"
            )
            ids = [row[0] for row in cursor.fetchall()]
            for pid in ids:
                with contextlib.suppress(DatabaseError):  # it may have closed meanwhile
                    cursor.execute(f"KILL CONNECTION {int(pid)}")
        return len(ids)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return int(cursor.fetchone()[0])


def failed_attempts(ids: list[int]) -> Counter[str]:
    """The error classes of the failed attempts of ``ids`` (one contiguous block)."""
    return Counter(
        Attempt.objects.filter(
            job__pk__range=(ids[0], ids[-1]), outcome=Outcome.FAILED
        ).values_list("error_class", flat=True)
    )


def test_workers_ride_out_terminated_connections_and_lose_nothing(
    fault_workers: FaultWorkers,
) -> None:
    if connection.vendor == "sqlite":
        pytest.skip(
            "SQLite has no server and no connections another process can terminate (the "
            "database is a file each worker opens in-process), so there is no restart to "
            "survive; lock contention is covered by test_sqlite_contention.py"
        )
    wall = time.monotonic()
    procs = [fault_workers.start(*WORKER_ARGS) for _ in range(WORKERS)]
    names = fault_workers.wait_registered(procs)
    nodes = list(Node.objects.filter(name__in=names).values_list("pk", flat=True))
    ids = [
        job.pk
        for job in enqueue_many(
            crash_jobs.fault_record.prepare(n=n, after=0.01) for n in range(TOTAL)
        )
    ]

    def final() -> int:
        return TOTAL - unfinished_count(ids)

    def reached(count: int) -> Callable[[], bool]:
        return lambda: final() >= count

    def heartbeats_since(cut: datetime.datetime) -> Callable[[], bool]:
        """Every worker's loop reconnected (not just its pool threads): each node's
        heartbeat has been written since ``cut``."""
        return lambda: (
            Node.objects.filter(pk__in=nodes, last_heartbeat_at__gt=cut).count() == WORKERS
        )

    terminated = []
    for round_ in range(1, TERMINATIONS + 1):
        # Cut in while jobs are running (once 10 %, 20 %, 30 % are done), then wait until
        # jobs complete again and every worker's loop is back before the next cut.
        wait_until(
            reached(round_ * TOTAL // 10),
            fault_workers,
            timeout=60,
            alive=procs,
            what=f"progress before termination {round_}",
            interval=0.1,
        )
        before, cut = final(), timezone.now()
        terminated.append(terminate_other_backends())
        wait_until(
            reached(min(before + 100, TOTAL)),
            fault_workers,
            timeout=60,
            alive=procs,
            what=f"jobs completing again after termination {round_}",
            interval=0.1,
        )
        wait_until(
            heartbeats_since(cut),
            fault_workers,
            timeout=30,
            alive=procs,
            what=f"a heartbeat from every worker after termination {round_}",
            interval=0.1,
        )
    wait_until(
        lambda: unfinished_count(ids) == 0,
        fault_workers,
        timeout=90,
        alive=procs,
        what=f"all {TOTAL} jobs final",
        interval=0.2,
    )
    # No worker exited; each one still stops cleanly.
    codes = [fault_workers.terminate(proc, timeout=30) for proc in procs]
    wall = time.monotonic() - wall

    # A handler whose connection died at its side effect fails (no row, or, if the
    # server committed just before it cut the connection, a row): a failed attempt may
    # explain a second run here, as may a lease lost while a worker was reconnecting.
    account = account_executions(ids, explains={Outcome.LOST, Outcome.INTERRUPTED, Outcome.FAILED})
    failures = failed_attempts(ids)
    FaultSummary.of(
        "database restart",
        account,
        faults=TERMINATIONS,
        wall_seconds=wall,
        connections_terminated=terminated,
        failed_attempts=dict(failures),
    ).emit()

    assert codes == [0] * WORKERS
    assert not account.problems, account.report()
    assert account.lost == 0
    assert account.states == {State.COMPLETED: TOTAL}
    assert account.duplicates == account.explained
    # The first cut took at least every worker's loop connection and its listener; the
    # later ones at least the loops (they had reconnected: each wrote a heartbeat).
    assert terminated[0] >= 2 * WORKERS, terminated
    assert all(n >= WORKERS for n in terminated), terminated
    # The only failures are jobs running at the moment of a cut, at most one per pool
    # thread per cut: once the worker has seen the database fail, an idle thread checks
    # its connection before its next job (db/upkeep.py) instead of failing that job on it
    # (see "Database outages" in docs/howto/workers.rst).
    assert set(failures) <= {"django.db.utils.OperationalError", "django.db.utils.InterfaceError"}
    assert failures.total() <= TERMINATIONS * WORKERS * SLOTS, failures
    assert (
        not Job.objects.filter(pk__range=(ids[0], ids[-1])).exclude(lease_expires_at=None).exists()
    )

    for proc, name in zip(procs, names, strict=True):
        log = fault_workers.log(proc)
        # Each loop: "database error in worker <name> (...); retrying in 0.25s".
        assert f"database error in worker {name}" in log, log[-4000:]
        assert "retrying in" in log, log[-4000:]
        if connection.vendor == "postgresql":
            # Each listener: "listener lost its connection (...); reconnecting" (MySQL
            # has none: its idle workers poll).
            assert "listener lost its connection" in log, log[-4000:]
