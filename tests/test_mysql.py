"""What only MySQL and MariaDB do: their checks, the claim's index, named locks, and the
deadlocks and lock wait timeouts InnoDB reports under contention, run again where safe.

Run with ``DATABASE_URL=mysql://...`` (``make test-mysql``); on the other databases the
module is skipped as a whole, and the same guarantees are tested by the rest of the
suite on every database.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import OperationalError, connection, connections, transaction
from django.utils import timezone

from durable_jobs import enqueue_many
from durable_jobs.db import engine_for, mysql, mysql_checks, named_locks
from durable_jobs.db.engine import ClaimRequest
from durable_jobs.models import Attempt, Job, Outcome
from durable_jobs.states import State
from durable_jobs.worker import Worker
from tests.conftest import wait_for
from tests.testapp import jobs

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "mysql", reason="MySQL and MariaDB only"),
]

RERUN_MESSAGE = "running it again"


def check_ids(messages: list[Any]) -> list[str]:
    return [message.id for message in messages]


@pytest.fixture
def options(monkeypatch) -> dict[str, Any]:
    """The connection's OPTIONS, shared by every thread's connection, restored after."""
    found = connection.settings_dict.setdefault("OPTIONS", {})
    original = dict(found)
    yield found
    found.clear()
    found.update(original)


# -- checks -----------------------------------------------------------------------------------


def test_the_test_server_passes_the_server_checks() -> None:
    assert engine_for().check(server=True) == []
    assert engine_for().check() == []


def test_an_unsupported_server_version_is_refused_with_its_version() -> None:
    # No MariaDB 10.5 here to connect to: the connection's cached server version is set
    # to one, on a wrapper of its own so that nothing else sees it.
    wrapper = connections.create_connection("default")
    try:
        wrapper.__dict__["mysql_version"] = (10, 5, 24)
        wrapper.__dict__["mysql_is_mariadb"] = True
        (message,) = mysql_checks.check_server(wrapper)
    finally:
        wrapper.close()
    assert message.id == "durable_jobs.E007"
    assert "MariaDB 10.5.24" in message.msg
    assert "10.6 or newer" in message.msg


def test_a_charset_other_than_utf8mb4_is_an_error(options) -> None:
    options["charset"] = "utf8"
    (message,) = engine_for().check()
    assert message.id == "durable_jobs.E022"
    assert "'utf8'" in message.msg
    assert "'charset'] = 'utf8mb4'" in message.hint


def test_a_database_whose_tables_would_not_be_utf8mb4_is_an_error() -> None:
    name = f"dj_latin1_{uuid.uuid4().hex[:8]}"
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE DATABASE {name} CHARACTER SET latin1")
    wrapper = connections.create_connection("default")
    wrapper.settings_dict = {**wrapper.settings_dict, "NAME": name}
    try:
        messages = mysql_checks.check_server(wrapper)
    finally:
        wrapper.close()
        with connection.cursor() as cursor:
            cursor.execute(f"DROP DATABASE {name}")
    assert check_ids(messages) == ["durable_jobs.E022"]
    assert "latin1" in messages[0].msg
    assert "CONVERT TO CHARACTER SET utf8mb4" in messages[0].hint


@pytest.mark.parametrize("level", ["repeatable read", "serializable"])
def test_repeatable_read_and_serializable_are_warned(options, level: str) -> None:
    options["isolation_level"] = level
    (message,) = engine_for().check()
    assert message.id == "durable_jobs.W006"
    assert level.upper() in message.msg
    assert "'read committed'" in message.hint


def test_a_value_longer_than_its_column_is_refused_not_cut_short() -> None:
    """INSERT IGNORE would cut it short with a warning; the engine refuses it first (the
    enqueue API checks keys and names itself: this is the engine's own guard)."""
    from django.db import DataError

    from durable_jobs.db.rows import new_instance

    long_queue = new_instance(Job, name="tests.add", queue="q" * 101, idempotency_key="k")
    with pytest.raises(DataError, match=r"Job.queue is 101 characters long.*at most 100"):
        engine_for().insert_jobs([long_queue])
    assert not Job.objects.exists()


def test_keys_and_queues_compare_byte_for_byte_as_on_the_other_databases() -> None:
    upper = jobs.add.using(idempotency_key="Order-1").delay(a=1)
    lower = jobs.add.using(idempotency_key="order-1").delay(a=1)
    accented = jobs.add.using(idempotency_key="ordér-1").delay(a=1)
    assert len({upper.pk, lower.pk, accented.pk}) == 3
    jobs.add.using(queue="Reports").delay(a=1)
    request = ClaimRequest(queue="reports", limit=5, node_id=None, lease_seconds=30)
    with transaction.atomic():
        assert engine_for().claim(request, guarded=True, choose_keyed=lambda keyed: []) == []


# -- the claim's index --------------------------------------------------------------------------


def test_the_claim_reads_the_claim_index_in_order_past_finished_jobs() -> None:
    now = timezone.now()
    Job.objects.bulk_create(
        Job(name="tests.add", payload={"a": i}, state=State.COMPLETED, finished_at=now)
        for i in range(2000)
    )
    for i in range(20):
        jobs.add.using(priority=i % 3).delay(a=i)
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE TABLE {Job._meta.db_table}")
        cursor.fetchall()
    engine = engine_for()
    request = ClaimRequest(queue="default", limit=5, node_id=None, lease_seconds=30)
    statement = mysql.PICK_SQL.format(**engine.claim_parts(request, guarded=True))
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN {statement}", engine.claim_params(request))
        names = [column[0] for column in cursor.description]
        plans = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
    job_plan = next(p for p in plans if p["table"] == "job")
    assert job_plan["key"] == "durable_job_claim_my", plans
    assert "filesort" not in (job_plan["Extra"] or ""), plans
    # Best first: highest priority, then oldest.
    with transaction.atomic():
        claimed = engine.claim(request, guarded=True, choose_keyed=lambda keyed: [])
    assert [job.priority for job in claimed] == [2] * 5


# -- named locks ---------------------------------------------------------------------------------


def lock_is_free(key: str) -> bool:
    with connections.create_connection("default").cursor() as cursor:
        name = named_locks._name(key, connection.settings_dict["NAME"])
        cursor.execute("SELECT IS_FREE_LOCK(%s)", [name])
        return cursor.fetchone()[0] == 1


def test_a_key_lock_lasts_until_the_engines_transaction_ends() -> None:
    engine = engine_for()
    with engine.write_transaction():
        engine.lock_keys(["k1"])
        assert not lock_is_free("k1")
    assert lock_is_free("k1")

    def fails_holding_k2() -> None:
        with engine.write_transaction():
            engine.lock_keys(["k2"])
            raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        fails_holding_k2()
    assert lock_is_free("k2")


def test_a_key_lock_in_the_projects_transaction_lasts_until_it_commits() -> None:
    engine = engine_for()
    with transaction.atomic():
        with engine.write_transaction():
            engine.lock_keys(["k3"])
        assert not lock_is_free("k3")  # the savepoint ended, the transaction has not
    assert lock_is_free("k3")

    def fails_holding_k4() -> None:
        with transaction.atomic():
            engine.lock_keys(["k4"])
            raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        fails_holding_k4()
    # Rolled back: no commit hook ran; the next transaction of the engine releases it.
    with engine.write_transaction():
        pass
    assert lock_is_free("k4")


# -- deadlocks and lock wait timeouts ------------------------------------------------------------


@pytest.fixture
def short_lock_waits(options) -> Iterator[None]:
    """This thread's connection, and every new one, gives up a lock wait after one second
    (error 1205); the connection is closed after, taking the setting with it."""
    options["init_command"] = "SET SESSION innodb_lock_wait_timeout = 1"
    with connection.cursor() as cursor:
        cursor.execute("SET SESSION innodb_lock_wait_timeout = 1")
    yield
    connection.close()


@contextlib.contextmanager
def key_held(key: str) -> Iterator[threading.Event]:
    """Another connection inserts a job with ``key`` and holds it, uncommitted, until the
    yielded event is set (or 30 s), then rolls back: an enqueue of the key meanwhile
    waits for its lock."""
    ready, release = threading.Event(), threading.Event()

    def hold() -> None:
        try:
            with transaction.atomic():
                jobs.add.using(idempotency_key=key).delay(a=0)
                ready.set()
                release.wait(30)
                transaction.set_rollback(True)
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold)
    holder.start()
    assert ready.wait(10)
    try:
        yield release
    finally:
        release.set()
        holder.join(30)


class ReleaseOnRerun(logging.Handler):
    """Sets ``release`` when an enqueue is run again: the holder lets go only after the
    first attempt has timed out, however slowly the machine runs."""

    def __init__(self, release: threading.Event) -> None:
        super().__init__()
        self.rerun_seen = release  # not "release": Handler.release() is its lock's

    def emit(self, record: logging.LogRecord) -> None:
        if RERUN_MESSAGE in record.getMessage():
            self.rerun_seen.set()


@contextlib.contextmanager
def released_on_rerun(release: threading.Event) -> Iterator[None]:
    handler = ReleaseOnRerun(release)
    logger = logging.getLogger("durable_jobs")
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)


def reruns(caplog) -> int:
    return sum(RERUN_MESSAGE in record.getMessage() for record in caplog.records)


def test_an_enqueue_that_times_out_waiting_for_a_key_runs_again(short_lock_waits, caplog) -> None:
    caplog.set_level(logging.INFO, logger="durable_jobs")
    with key_held("held") as release, released_on_rerun(release):
        job = jobs.add.using(idempotency_key="held").delay(a=1)  # autocommit
    assert reruns(caplog) == 1  # timed out once after 1 s, got in after the rollback
    assert list(Job.objects.values_list("pk", "idempotency_key")) == [(job.pk, "held")]


def test_a_bulk_enqueue_that_times_out_waiting_for_a_key_runs_again(
    short_lock_waits, caplog
) -> None:
    caplog.set_level(logging.INFO, logger="durable_jobs")
    with key_held("held") as release, released_on_rerun(release):
        made = enqueue_many(
            [jobs.add.using(idempotency_key="held").prepare(a=1)]
            + [jobs.add.prepare(a=n) for n in range(10)]
        )
    assert reruns(caplog) == 1
    assert Job.objects.count() == 11
    assert {job.pk for job in made} == set(Job.objects.values_list("pk", flat=True))


def test_inside_the_projects_transaction_the_timeout_is_the_projects(
    short_lock_waits, caplog
) -> None:
    """InnoDB ends the statement; what else the transaction did is the project's to redo,
    so nothing is run again behind its back."""
    caplog.set_level(logging.INFO, logger="durable_jobs")

    def enqueue_two() -> None:
        with transaction.atomic():
            jobs.add.delay(a=2)
            jobs.add.using(idempotency_key="held").delay(a=1)

    with key_held("held"), pytest.raises(OperationalError, match="Lock wait"):
        enqueue_two()  # the holder lets go only when this is over
    assert reruns(caplog) == 0
    assert not Job.objects.exists()


def test_a_worker_pass_that_times_out_on_a_locked_job_runs_again(short_lock_waits) -> None:
    """An operator's transaction holds the running job's row while its outcome is due: the
    worker's pass times out, is rolled back whole and runs again; the job completes once."""
    job = jobs.sleepy.delay(seconds=0.3)
    worker = Worker({"default": 2}, poll_interval=0.05, scheduler=False)
    locked, release = threading.Event(), threading.Event()

    def hold_the_row() -> None:
        try:
            with transaction.atomic():
                list(Job.objects.select_for_update().filter(pk=job.pk))
                locked.set()
                release.wait(30)
        finally:
            connections.close_all()

    thread = worker.start()
    holder = threading.Thread(target=hold_the_row)
    try:
        wait_for(lambda: Job.objects.get(pk=job.pk).state == State.LEASED, timeout=10)
        holder.start()
        assert locked.wait(10)
        # Let go once a pass has timed out on the lock and been run again.
        wait_for(lambda: worker.stats.transient >= 1, timeout=20)
        release.set()
        wait_for(lambda: Job.objects.get(pk=job.pk).state == State.COMPLETED, timeout=20)
    finally:
        release.set()
        holder.join(10)
        worker.stop()
        thread.join(timeout=30)
    assert worker.stats.transient >= 1
    assert worker.stats.outcomes[Outcome.COMPLETED] == 1
    assert Attempt.objects.filter(job_id=job.pk).count() == 1


def test_contended_bulk_enqueues_of_shared_keys_create_each_key_once(caplog) -> None:
    """Eight threads enqueue 100 jobs each over 150 shared keys, in different orders, in
    autocommit: every call succeeds, each key has one job, and every job that a call
    returned for a key is that job. InnoDB may end some of them with a deadlock while
    they wait on each other's keys; those run again (counted, and reported)."""
    import random

    caplog.set_level(logging.INFO, logger="durable_jobs")
    keys = [f"key-{n}" for n in range(150)]
    start = threading.Barrier(8)
    results: list[list[tuple[str, int]]] = []
    errors: list[BaseException] = []

    def enqueue(seed: int) -> None:
        try:
            mine = random.Random(seed).sample(keys, 100)
            start.wait(30)
            made = enqueue_many(jobs.add.using(idempotency_key=k).prepare(a=1) for k in mine)
            results.append([(job.idempotency_key, job.pk) for job in made])
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=enqueue, args=(seed,)) for seed in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    stored = dict(Job.objects.values_list("idempotency_key", "pk"))
    assert len(stored) == Job.objects.count() == len({k for r in results for k, _ in r})
    assert all(stored[key] == pk for result in results for key, pk in result)
    print(f"[contended bulk enqueues] deadlocks or lock waits run again: {reruns(caplog)}")


def test_a_job_request_that_times_out_waiting_for_its_key_runs_again(
    short_lock_waits, caplog
) -> None:
    """The HTTP endpoint's transaction (under the user's lock) is ended by InnoDB while its
    job's key is held elsewhere: it wrote nothing, runs again once, and the client gets
    its 202, never a 500; one job and one request row."""
    from django.contrib.auth.models import User
    from django.test import Client
    from django.urls import reverse

    from durable_jobs.http import requesting
    from durable_jobs.models import JobRequest

    caplog.set_level(logging.INFO, logger="durable_jobs")
    alice = User.objects.create_user("alice", password="pw")
    client = Client()
    client.force_login(alice)
    name = "tests.http.throttled"
    key = requesting.job_key(str(alice.pk), name, "k")
    with key_held(key) as release, released_on_rerun(release):
        response = client.post(
            reverse("durable_jobs:request", kwargs={"name": name}),
            data='{"n": 1}',
            content_type="application/json",
            headers={"Idempotency-Key": "k"},
        )
    assert response.status_code == 202, response.content
    assert reruns(caplog) == 1
    assert list(Job.objects.values_list("name", "idempotency_key")) == [(name, key)]
    assert JobRequest.objects.filter(user=str(alice.pk), job__isnull=False).count() == 1
