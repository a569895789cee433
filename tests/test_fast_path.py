"""The fast path: batched claims and acknowledgements, one wake-up per enqueue transaction,
prepared statements on PostgreSQL, and SQLite's change-counter wake-ups."""

from __future__ import annotations

import time
from collections import Counter

import pytest
from django.db import connection, transaction
from django.test import override_settings

import durable_jobs
from durable_jobs import wakeup
from durable_jobs.conf import get_settings
from durable_jobs.db import engine_for
from durable_jobs.db import postgresql as pg_backend
from durable_jobs.lifecycle import recording
from durable_jobs.lifecycle.outcomes import decide
from durable_jobs.models import Attempt, Job, Outcome
from durable_jobs.states import State, claim
from durable_jobs.worker import Worker
from durable_jobs.worker.execute import execute
from tests.conftest import wait_for
from tests.testapp import jobs

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_worker_claims_and_acknowledges_in_batches() -> None:
    """500 jobs at concurrency 10: each claim leases several jobs and each write of
    outcomes records several, and every job is run and recorded exactly once."""
    durable_jobs.enqueue_many([jobs.add.prepare(a=i) for i in range(500)])
    worker = Worker({"default": 10}, burst=True, scheduler=False)
    worker.run()
    assert worker.stats.finished == 500
    assert worker.stats.outcomes == {"completed": 500}
    # At most 10 per claim and per write; far fewer statements than jobs when batched.
    assert 50 <= worker.stats.claims < 250, worker.stats
    assert 50 <= worker.stats.flushes < 250, worker.stats
    assert Job.objects.filter(state=State.COMPLETED).count() == 500
    per_job = Counter(Attempt.objects.values_list("job_id", flat=True))
    assert len(per_job) == 500
    assert set(per_job.values()) == {1}
    assert sorted(Job.objects.values_list("result", flat=True)) == list(range(500))


def test_racing_workers_in_threads_run_each_job_once() -> None:
    """Four workers in threads drain one queue: no job is leased twice, none is lost."""
    durable_jobs.enqueue_many([jobs.record.prepare(label=str(i)) for i in range(400)])
    workers = [Worker({"default": 5}, burst=True, scheduler=False) for _ in range(4)]
    # start(): each in its own thread, which closes its connections when it ends.
    threads = [worker.start() for worker in workers]
    for thread in threads:
        thread.join(timeout=120)
    from tests.testapp.models import SideEffect

    runs = Counter(SideEffect.objects.values_list("job_id", flat=True))
    assert len(runs) == 400
    assert set(runs.values()) == {1}
    assert sum(w.stats.outcomes["completed"] for w in workers) == 400
    assert Attempt.objects.count() == 400


def test_an_outcome_is_written_while_other_jobs_still_run(durable_worker) -> None:
    """A finished job's outcome waits a few milliseconds for company, not for the jobs
    still running beside it."""
    long = jobs.sleepy.delay(seconds=3)
    durable_worker({"default": 2}, poll_interval=0.05)
    wait_for(lambda: Job.objects.get(pk=long.pk).state == State.LEASED, timeout=10)
    short = jobs.add.delay(a=1)
    wait_for(lambda: Job.objects.get(pk=short.pk).state == State.COMPLETED, timeout=2)
    assert Job.objects.get(pk=long.pk).state == State.LEASED


def test_a_stopping_worker_writes_every_outcome_it_holds() -> None:
    durable_jobs.enqueue_many([jobs.add.prepare(a=i) for i in range(30)])
    worker = Worker({"default": 10}, scheduler=False, poll_interval=0.05)
    thread = worker.start()
    wait_for(lambda: worker.stats.finished >= 10, timeout=30)
    worker.stop()
    thread.join(timeout=30)
    finished = worker.stats.finished
    assert sum(worker.stats.outcomes.values()) == finished
    assert Attempt.objects.count() == finished
    assert not Job.objects.filter(state=State.LEASED).exists()


def test_one_statement_settles_every_kind_of_outcome() -> None:
    """Completed, retried, dead, snoozed and cancelled outcomes in one batch, with a stale
    lease among them that must change nothing."""
    made = [
        jobs.add.delay(a=2, b=3),
        jobs.flaky.delay(fail_times=5),
        jobs.discarder.delay(),
        jobs.snoozer.delay(seconds=60),
        jobs.canceller.delay(),
        jobs.add.delay(a=7),
    ]
    leased = {j.pk: j for j in claim(queue="default", limit=10, node_id=None, lease_seconds=60)}
    assert set(leased) == {j.pk for j in made}
    stale = leased[made[-1].pk]
    # Another node rescued the last job and leased it again: its old token is stale.
    Job.objects.filter(pk=stale.pk).update(state=State.QUEUED)
    claim(queue="default", limit=1, node_id=None, lease_seconds=60)
    batch = [decide(execute(leased[j.pk]), node="n") for j in made]
    assert recording.write_now(batch) == [True, True, True, True, True, False]
    rows = {j.pk: j for j in Job.objects.all()}
    added, flaky, discarded, snoozed, cancelled, rescued = (rows[j.pk] for j in made)
    assert (added.state, added.result, added.finished_at is not None) == ("completed", 5, True)
    assert flaky.state == State.RETRYING
    assert flaky.available_at > flaky.attempted_at
    assert "RuntimeError: failure 1" in flaky.last_error
    assert discarded.state == State.DEAD
    assert discarded.finished_at is not None
    assert snoozed.state == State.QUEUED
    assert snoozed.attempts == 0
    assert cancelled.state == State.CANCELLED
    assert rescued.state == State.LEASED
    assert rescued.lease_token != stale.lease_token
    for job in (added, flaky, discarded, snoozed, cancelled):
        assert job.leased_by_id is None
        assert job.lease_expires_at is None
    outcomes = dict(Attempt.objects.values_list("job_id", "outcome"))
    assert outcomes == {
        added.pk: Outcome.COMPLETED,
        flaky.pk: Outcome.FAILED,
        discarded.pk: Outcome.DISCARDED,
        snoozed.pk: Outcome.SNOOZED,
        cancelled.pk: Outcome.CANCELLED,
    }
    # Each written attempt got its primary key back; the stale one has none.
    assert [ack.attempt.pk is not None for ack in batch] == [True] * 5 + [False]
    assert {ack.attempt.pk for ack in batch[:5]} == set(
        Attempt.objects.values_list("pk", flat=True)
    )


def test_a_unique_job_keeps_its_key_while_unfinished_and_frees_it_when_done() -> None:
    first = jobs.unique_sync.delay(account_id=1)
    key = Job.objects.get(pk=first.pk).idempotency_key
    (leased,) = claim(queue="default", limit=1, node_id=None, lease_seconds=60)
    snoozed = decide(execute(leased), node="n")
    snoozed.target = State.QUEUED  # given back: still unique
    snoozed.gives_back = True
    assert recording.write_now([snoozed]) == [True]
    assert Job.objects.get(pk=first.pk).idempotency_key == key
    assert jobs.unique_sync.delay(account_id=1).pk == first.pk
    (leased,) = claim(queue="default", limit=1, node_id=None, lease_seconds=60)
    assert recording.write_now([decide(execute(leased), node="n")]) == [True]
    assert Job.objects.get(pk=first.pk).idempotency_key is None
    assert jobs.unique_sync.delay(account_id=1).pk != first.pk


# -- one wake-up per transaction ------------------------------------------------------------


def _local_wakes(action) -> int:
    """How many times ``action`` wakes the workers of this process."""
    woken = Counter()

    class Waiter:
        def set(self) -> None:
            woken["set"] += 1

    waiter = Waiter()
    wakeup.subscribe(waiter)
    try:
        action()
    finally:
        wakeup.unsubscribe(waiter)
    return woken["set"]


def test_a_transaction_of_many_enqueues_wakes_the_workers_once() -> None:
    def many() -> None:
        with transaction.atomic():
            for i in range(50):
                jobs.add.delay(a=i)

    assert _local_wakes(many) == 1
    # Outside a transaction every enqueue is its own commit, and wakes.
    assert _local_wakes(lambda: [jobs.add.delay(a=i) for i in range(3)]) == 3


def test_a_rolled_back_savepoint_takes_its_wake_up_with_it() -> None:
    class Undo(Exception):
        pass

    def with_savepoint() -> None:
        with transaction.atomic():
            try:
                with transaction.atomic():
                    jobs.add.delay(a=1)  # its wake-up is rolled back with it
                    raise Undo
            except Undo:
                pass
            jobs.add.delay(a=2)  # so this one must wake again
            jobs.add.delay(a=3)

    assert _local_wakes(with_savepoint) == 1
    assert Job.objects.count() == 2


def _notifications(action, seconds: float = 1.0) -> list[str]:
    """The NOTIFY payloads a separate listening connection receives during ``action``."""
    listener = engine_for().listener(get_settings().notify_channel)
    listener.connect()
    try:
        action()
        received: list[str] = []
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            received += listener.wait(timeout=max(deadline - time.monotonic(), 0.01))
        return received
    finally:
        listener.close()


def test_postgresql_sends_one_notify_per_enqueue_transaction(vendor) -> None:
    if vendor != "postgresql":
        pytest.skip("NOTIFY is PostgreSQL's")

    def enqueue() -> None:
        with transaction.atomic():
            for i in range(100):
                jobs.add.delay(a=i)
            jobs.add.using(queue="emails").delay(a=0)
            durable_jobs.enqueue_many([jobs.add.prepare(a=i) for i in range(100)])
        jobs.add.delay(a=1)  # autocommit: its own transaction, its own notification
        durable_jobs.enqueue_many([jobs.add.prepare(a=i) for i in range(10)])

    assert sorted(_notifications(enqueue)) == ["default", "default", "default", "emails"]
    assert Job.objects.count() == 212


# -- prepared statements (PostgreSQL) --------------------------------------------------------


def test_postgresql_claims_and_settles_with_prepared_statements(vendor) -> None:
    if vendor != "postgresql":
        pytest.skip("prepared statements are used on PostgreSQL")
    durable_jobs.enqueue_many([jobs.add.prepare(a=i) for i in range(20)])
    for _ in range(3):
        leased = claim(queue="default", limit=2, node_id=None, lease_seconds=60)
        recording.write_now([decide(execute(job), node="n") for job in leased])
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        statements = [row[0] for row in cursor.fetchall()]
    assert any("FOR UPDATE SKIP LOCKED" in s for s in statements), statements
    assert any("jsonb_array_elements" in s for s in statements), statements


def test_postgresql_stops_preparing_when_the_server_forgets_statements(vendor, caplog) -> None:
    """What a pooler without prepared-statement support does (PgBouncer in transaction
    mode before 1.21): the next server session does not know the statement. Simulated
    by deallocating the statements behind psycopg's back."""
    if vendor != "postgresql":
        pytest.skip("prepared statements are used on PostgreSQL")
    durable_jobs.enqueue_many([jobs.add.prepare(a=i) for i in range(10)])
    pg_backend._unprepared.discard(connection.alias)
    try:
        assert claim(queue="default", limit=1, node_id=None, lease_seconds=60)
        with connection.cursor() as cursor:
            cursor.execute("SELECT name FROM pg_prepared_statements")
            for (name,) in cursor.fetchall():
                cursor.execute(f'DEALLOCATE "{name}"')
        from django.db import DatabaseError

        with pytest.raises(DatabaseError):
            claim(queue="default", limit=1, node_id=None, lease_seconds=60)
        assert "stops preparing statements" in caplog.text
        # From then on this process runs the statements unprepared, and they work.
        assert claim(queue="default", limit=1, node_id=None, lease_seconds=60)
    finally:
        pg_backend._unprepared.discard(connection.alias)


def test_an_enqueue_outside_a_transaction_survives_a_forgotten_statement(vendor, caplog) -> None:
    """In autocommit nothing is aborted by the refusal: the enqueue runs again unprepared
    and succeeds, so no request fails."""
    if vendor != "postgresql":
        pytest.skip("prepared statements are used on PostgreSQL")
    pg_backend._unprepared.discard(connection.alias)
    try:
        first = jobs.add.delay(a=1)
        with connection.cursor() as cursor:
            cursor.execute("SELECT name FROM pg_prepared_statements")
            for (name,) in cursor.fetchall():
                cursor.execute(f'DEALLOCATE "{name}"')
        second = jobs.add.delay(a=2)
        assert "stops preparing statements" in caplog.text
        assert sorted(Job.objects.values_list("pk", flat=True)) == sorted([first.pk, second.pk])
    finally:
        pg_backend._unprepared.discard(connection.alias)


def test_prepared_statements_can_be_turned_off(vendor) -> None:
    if vendor != "postgresql":
        pytest.skip("prepared statements are used on PostgreSQL")
    durable_jobs.enqueue_many([jobs.add.prepare(a=i) for i in range(10)])
    with connection.cursor() as cursor:
        cursor.execute("DEALLOCATE ALL")  # this session's earlier statements (psycopg sees it)
    with override_settings(DURABLE_JOBS={"PREPARED_STATEMENTS": False}):
        for _ in range(3):
            claim(queue="default", limit=1, node_id=None, lease_seconds=60)
        with connection.cursor() as cursor:
            cursor.execute("SELECT count(*) FROM pg_prepared_statements")
            assert cursor.fetchone()[0] == 0


# -- SQLite: the change counter -------------------------------------------------------------


def test_a_change_counter_wakes_an_idle_worker(vendor) -> None:
    """A worker that no in-process wake-up reaches (as in another process) learns of a new
    job long before its poll interval, from the database's change counter (SQLite's
    data_version; on MySQL and MariaDB, the newest job's id)."""
    if vendor == "postgresql":
        pytest.skip("PostgreSQL wakes workers with NOTIFY (see test_worker.py)")
    worker = Worker({"default": 2}, poll_interval=30, scheduler=False)
    # Only the change counter may wake it: not the in-process shortcut.
    thread = worker.start()
    wakeup.unsubscribe(worker.wake)
    try:
        time.sleep(0.3)  # idle: its checks have backed off
        job = jobs.add.delay(a=1)
        wait_for(lambda: Job.objects.get(pk=job.pk).state == State.COMPLETED, timeout=10)
    finally:
        worker.stop()
        thread.join(timeout=30)


# -- regressions ----------------------------------------------------------------------------


def test_a_stale_and_a_current_lease_of_one_job_in_one_batch() -> None:
    """The job was rescued and leased again while its first run was still going; both
    runs end in the same batch. Only the current lease is written, with its attempt."""
    made = jobs.add.delay(a=1)
    (first,) = claim(queue="default", limit=1, node_id=None, lease_seconds=60)
    Job.objects.filter(pk=made.pk).update(state=State.QUEUED)  # rescued
    (second,) = claim(queue="default", limit=1, node_id=None, lease_seconds=60)
    batch = [
        decide(execute(first), node="first"),
        decide(execute(second), node="second"),
    ]
    assert recording.write_now(batch) == [False, True]
    assert list(Attempt.objects.values_list("node", flat=True)) == ["second"]


def test_a_burst_worker_goes_on_after_writing_a_refused_outcome_alone(vendor, monkeypatch) -> None:
    """PostgreSQL refuses a NUL character in a result: the batch falls back to writing its
    outcomes one at a time, and the burst worker still drains the queue."""
    if vendor != "postgresql":
        pytest.skip("only PostgreSQL refuses a NUL character in text")
    made = durable_jobs.enqueue_many([jobs.add.prepare(a=i) for i in range(40)])
    refused = {made[5].pk, made[17].pk}
    from durable_jobs.lifecycle import outcomes

    def decide_with_unstorable_results(result, *, node):
        settlement = decide(result, node=node)
        if settlement.job.pk in refused:
            settlement.result = "\x00"
        return settlement

    monkeypatch.setattr(outcomes, "decide", decide_with_unstorable_results)
    Worker({"default": 8}, burst=True, scheduler=False).run()
    assert Job.objects.filter(state=State.COMPLETED).count() == 40
    assert Attempt.objects.count() == 40
    for pk in refused:
        assert Job.objects.get(pk=pk).result == {"repr": "the result could not be stored"}


def test_the_pruner_comes_back_at_once_while_it_is_behind(monkeypatch) -> None:
    import datetime

    from django.utils import timezone

    from durable_jobs.maintenance import MaintenanceContext, MaintenanceRunner, pruner

    monkeypatch.setattr(pruner, "BATCH", 2)
    monkeypatch.setattr(pruner, "MAX_BATCHES", 1)
    for i in range(6):
        jobs.add.delay(a=i)
    Job.objects.update(state=State.COMPLETED, finished_at=timezone.now() - datetime.timedelta(30))
    plugin = pruner.Pruner()
    runner = MaintenanceRunner([plugin], MaintenanceContext(connection.alias))
    runner.run_due()
    assert Job.objects.count() == 4
    assert runner.next_due(plugin) - time.monotonic() <= pruner.BEHIND_INTERVAL


def test_an_enqueue_inside_a_transaction_is_not_prepared(vendor) -> None:
    """Inside the project's transaction a forgotten prepared statement would fail the
    transaction, so enqueues there are not prepared."""
    if vendor != "postgresql":
        pytest.skip("prepared statements are used on PostgreSQL")
    jobs.add.delay(a=1)  # autocommit: prepared
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM pg_prepared_statements")
        for (name,) in cursor.fetchall():
            cursor.execute(f'DEALLOCATE "{name}"')
    with transaction.atomic():
        jobs.add.delay(a=2)
    assert Job.objects.count() == 2


def test_the_loop_wake_tells_new_work_from_finished_jobs() -> None:
    from durable_jobs.worker.wakeups import LoopWake

    wake = LoopWake()
    wake.result_ready()
    assert wake.is_set()
    assert wake.take() is False
    assert not wake.is_set()
    wake.set()
    assert wake.take() is True
    assert wake.take() is False


def test_the_listener_connects_with_the_listen_database_alias(vendor) -> None:
    """LISTEN_DATABASE (a direct connection beside a transaction-mode pooler): the worker
    listens through that alias, and its notifications wake the worker."""
    if vendor != "postgresql":
        pytest.skip("LISTEN/NOTIFY is PostgreSQL's")
    from django.db import connections

    connections.settings["direct"] = dict(connections["default"].settings_dict)
    try:
        with override_settings(DURABLE_JOBS={"LISTEN_DATABASE": "direct"}):
            listener = engine_for().listener(get_settings().notify_channel)
            assert listener.alias == "direct"
            worker = Worker({"default": 2}, poll_interval=60, scheduler=False)
            thread = worker.start()
            wakeup.unsubscribe(worker.wake)  # only the notification may wake it
            try:
                time.sleep(0.5)  # listening
                job = jobs.add.delay(a=1)
                wait_for(lambda: Job.objects.get(pk=job.pk).state == State.COMPLETED, timeout=10)
            finally:
                worker.stop()
                thread.join(timeout=30)
    finally:
        connections["direct"].close()
        del connections.settings["direct"]
