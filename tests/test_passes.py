"""A worker's loop pass: outcomes written and freed slots claimed together, on a thread of
the worker's own (on PostgreSQL, one statement); what happens when it cannot be one
statement (keyed jobs); and the relations no constraint guards any more."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.db import connection
from django.test import override_settings
from django.test.utils import CaptureQueriesContext

import durable_jobs
from durable_jobs import hooks, serializers
from durable_jobs.db import engine_for
from durable_jobs.lifecycle import outcomes
from durable_jobs.lifecycle.transitions import settle_and_claim
from durable_jobs.maintenance.rescuer import rescue_expired
from durable_jobs.models import Attempt, Job, Node, Outcome
from durable_jobs.states import State, claim
from durable_jobs.worker import Worker, outbox
from durable_jobs.worker import passes as worker_passes
from durable_jobs.worker.execute import execute
from durable_jobs.worker.node import register_node
from durable_jobs.worker.passes import PassThread
from durable_jobs.worker.running import Running
from tests.conftest import wait_for
from tests.testapp import jobs

pytestmark = pytest.mark.django_db(transaction=True)


def run_claimed(limit: int, node_id: int | None = None) -> list[outcomes.Settlement]:
    """Claim ``limit`` jobs and run them here: their outcomes, not yet written."""
    leased = claim(queue="default", limit=limit, node_id=node_id, lease_seconds=60)
    return [outcomes.decide(execute(job), node="n") for job in leased]


def one_pass(settlements: list[outcomes.Settlement], limit: int) -> tuple[list[bool], list[Job]]:
    engine = engine_for()
    with engine.pass_transaction(one_claim=True):
        writes = settle_and_claim(
            settlements, queue="default", limit=limit, node_id=None, lease_seconds=60
        )
    return writes.written, writes.leased


def test_a_pass_writes_the_outcomes_and_claims_the_slots_they_freed() -> None:
    made = durable_jobs.enqueue_many([jobs.add.prepare(a=i) for i in range(6)])
    finished = run_claimed(3)
    # Another node took the last one over: its outcome is fenced off.
    stale = finished[-1]
    Job.objects.filter(pk=stale.job_id).update(lease_token="00000000-0000-0000-0000-0000000000ff")
    written, leased = one_pass(finished, 3)
    assert written == [True, True, False]
    assert sorted(j.pk for j in leased) == [j.pk for j in made[3:]]
    assert all(j.state == State.LEASED and j.lease_token for j in leased)
    states = dict(Job.objects.values_list("pk", "state"))
    assert [states[j.pk] for j in made] == ["completed", "completed"] + ["leased"] * 4
    attempts = Attempt.objects.values_list("job_id", flat=True)
    assert sorted(attempts) == [made[0].pk, made[1].pk]
    assert all(s.attempt.pk for s in finished[:2])
    assert finished[2].attempt.pk is None


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's one-statement pass")
def test_on_postgresql_a_pass_is_one_statement_outside_any_transaction() -> None:
    durable_jobs.enqueue_many([jobs.add.prepare(a=i) for i in range(4)])
    finished = run_claimed(2)
    with CaptureQueriesContext(connection) as queries:
        written, leased = one_pass(finished, 2)
    assert (written, len(leased)) == ([True, True], 2)
    assert [q["sql"].lstrip().split()[0] for q in queries.captured_queries] == ["WITH"]
    from psycopg.pq import TransactionStatus

    # It committed on its own: no transaction was opened around it, none is left open.
    assert connection.connection.info.transaction_status == TransactionStatus.IDLE


def test_keyed_jobs_are_leased_only_under_their_keys_locks() -> None:
    """Two jobs of one key (limit 1) and two plain ones: a pass leases the plain ones and
    at most one keyed job; on PostgreSQL, whose pass is one statement outside any
    transaction, the keyed jobs are left for a claim in a transaction, which leases one."""
    keyed = [jobs.per_account.delay(account=7, n=n) for n in range(2)]
    plain = [jobs.add.delay(a=n) for n in range(2)]
    engine = engine_for()
    with engine.pass_transaction(one_claim=True):
        writes = settle_and_claim([], queue="default", limit=4, node_id=None, lease_seconds=60)
    leased = {j.pk for j in writes.leased}
    assert {j.pk for j in plain} <= leased
    assert len(leased & {j.pk for j in keyed}) <= 1
    assert writes.keyed_waiting == (leased.isdisjoint(j.pk for j in keyed))
    if writes.keyed_waiting:
        with engine.pass_transaction(one_claim=False):
            again = settle_and_claim(
                [], queue="default", limit=2, node_id=None, lease_seconds=60, keyed=True
            )
        assert [j.pk for j in again.leased] == [keyed[0].pk]
    assert Job.objects.filter(state=State.LEASED, concurrency_key="account:7").count() == 1


def test_a_worker_runs_keyed_jobs_one_at_a_time_beside_plain_ones() -> None:
    """Through the worker's passes (one statement each on PostgreSQL), keyed jobs still
    never overlap, and every job runs once."""
    keyed = [jobs.per_account.delay(account=1, n=n, seconds=0.02) for n in range(8)]
    plain = durable_jobs.enqueue_many([jobs.add.prepare(a=n) for n in range(40)])
    worker = Worker({"default": 4}, burst=True, scheduler=False)
    worker.run()
    assert worker.stats.outcomes == {"completed": 48}
    ends = sorted(
        Attempt.objects.filter(job_id__in=[j.pk for j in keyed]).values_list(
            "started_at", "finished_at"
        )
    )
    assert len(ends) == 8
    assert all(prev_end <= start for (_, prev_end), (start, _) in itertools.pairwise(ends))
    assert Attempt.objects.filter(job_id__in=[j.pk for j in plain]).count() == 40


def test_a_job_whose_node_row_is_gone_is_held_by_no_node() -> None:
    """No constraint ties a job to its node any more: a node row deleted behind Django's
    back (raw SQL) leaves its id on the jobs. Reading them, rescuing them and showing
    them treats the node as gone."""
    job = jobs.add.delay(a=1)
    node = Node.objects.create(name="vanished", pid=1)
    claim(queue="default", limit=1, node_id=node.pk, lease_seconds=60)
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {Node._meta.db_table} WHERE id = %s", [node.pk])
    job = Job.objects.get(pk=job.pk)
    assert job.leased_by_id == node.pk
    assert job.lease_holder is None
    assert serializers.job_to_dict(job)["node"] is None
    Job.objects.filter(pk=job.pk).update(lease_expires_at=job.attempted_at)
    assert rescue_expired(node="rescuer") == 1
    (attempt,) = Attempt.objects.filter(job_id=job.pk)
    assert (attempt.outcome, attempt.node) == (Outcome.LOST, "")


@pytest.fixture
def finish_hook() -> Iterator[list[tuple[int, str, str | None]]]:
    seen: list[tuple[int, str, str | None]] = []

    def hook(job: Job, attempt: Attempt, error: BaseException | None) -> None:
        seen.append((job.pk, job.state, type(error).__name__ if error else None))

    hooks.add_finish_hook(hook)
    hooks.add_finish_hook(hook)  # once, however often it is added
    yield seen
    hooks.remove_finish_hook(hook)


def test_finish_hooks_see_each_job_end_once_and_a_failing_one_changes_nothing(
    finish_hook, caplog
) -> None:
    def broken(job: Job, attempt: Attempt, error: BaseException | None) -> None:
        raise RuntimeError("broken hook")

    hooks.add_finish_hook(broken)
    try:
        done = jobs.add.delay(a=1)
        dead = jobs.always_fails.using(max_retries=0).delay()
        retried = jobs.fails_once.delay()
        Worker({"default": 2}, burst=True, scheduler=False).run()
    finally:
        hooks.remove_finish_hook(broken)
    assert sorted(finish_hook) == [
        (done.pk, "completed", None),
        (dead.pk, "dead", "ValueError"),
        (retried.pk, "completed", None),
    ]
    assert caplog.text.count("finish hook") == 3
    assert Job.objects.get(pk=dead.pk).state == State.DEAD


def test_the_pass_thread_stops_with_the_worker() -> None:
    durable_jobs.enqueue_many([jobs.add.prepare(a=i) for i in range(20)])
    before = {t.name for t in threading.enumerate()}
    worker = Worker({"default": 3}, burst=True, scheduler=False)
    worker.run()
    assert worker.stats.outcomes == {"completed": 20}
    left = {t.name for t in threading.enumerate()} - before
    assert not [name for name in left if name.endswith("-passes")], left


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's kept cursor")
def test_the_statements_cursor_follows_its_connection_across_a_reconnect() -> None:
    """The engine keeps one psycopg cursor per connection for its statements: a closed
    and reopened connection gets a new one, and timestamps still come back in Django's
    zone."""
    engine = engine_for()
    jobs.add.delay(a=1)
    first = engine.execute_prepared("SELECT now()", [])[1][0][0]
    connection.close()
    jobs.add.delay(a=2)
    second = engine.execute_prepared("SELECT now()", [])[1][0][0]
    assert second >= first
    assert second.utcoffset().total_seconds() == 0
    assert len(one_pass([], 2)[1]) == 2


def test_a_pass_claims_nothing_while_outcomes_beyond_its_batch_still_hold_leases() -> None:
    """A worker whose finished jobs outnumber one pass's outcome batch (the outbox's
    BATCH) writes the rest in a later pass: until then their jobs hold leases, so no pass
    claims their slots, and the node never holds more leases than its concurrency."""
    concurrency = outbox.BATCH + 1
    durable_jobs.enqueue_many([jobs.add.prepare(a=i) for i in range(2 * concurrency)])
    worker = Worker({"default": concurrency}, scheduler=False)
    worker.node = register_node(
        worker.queues, name="many-slots", using=worker.alias, stale_after=30
    )
    worker.passes = PassThread(worker._write_pass, lambda: None, name="many-slots-passes")
    try:
        for settlement in run_claimed(concurrency, node_id=worker.node.pk):
            worker.outbox.add(settlement)
        assert worker._free_slots() == {"default": concurrency}
        held = []
        while worker.outbox or not held:
            assert worker._submit_pass()
            finished = worker.passes.wait(60)
            assert finished is not None
            assert finished.error is None
            held.append(Job.objects.filter(state=State.LEASED, leased_by=worker.node).count())
            for job in finished.leased:
                worker.running.add(Running.dispatched(job))
        assert max(held) <= concurrency, held
        # The last pass wrote the rest and claimed every slot.
        assert held[-1] == concurrency
        assert Job.objects.filter(state=State.COMPLETED).count() == concurrency
    finally:
        worker.passes.stop(10)


def test_a_wake_up_during_a_pass_is_kept_for_the_pass_after_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An enqueue whose wake-up arrives while a pass is in flight is claimed by the next
    pass, not left for the next poll or the next finished job: with two slots and one
    long job running, the second job starts while the first still runs."""
    in_flight, second_enqueued = threading.Event(), threading.Event()
    hold_next = threading.Event()
    real_settle_and_claim = worker_passes.settle_and_claim

    def pass_held_open(*args: Any, **kwargs: Any) -> Any:
        writes = real_settle_and_claim(*args, **kwargs)
        if hold_next.is_set() and writes.leased:
            hold_next.clear()
            in_flight.set()
            second_enqueued.wait(10)  # the pass is still in flight when the wake-up comes
        return writes

    monkeypatch.setattr(worker_passes, "settle_and_claim", pass_held_open)
    settings = {**django_settings.DURABLE_JOBS, "POLL_INTERVAL": 30}
    with override_settings(DURABLE_JOBS=settings):
        worker = Worker({"default": 2}, scheduler=False)
        thread = worker.start()
        try:
            hold_next.set()
            first = jobs.sleepy.delay(seconds=3)
            assert in_flight.wait(10)
            second = jobs.add.delay(a=1)
            second_enqueued.set()
            wait_for(lambda: Job.objects.get(pk=second.pk).state == State.COMPLETED, timeout=10)
            first_row, second_row = Job.objects.get(pk=first.pk), Job.objects.get(pk=second.pk)
            assert first_row.attempted_at is not None
            assert first_row.finished_at is None or second_row.attempted_at < first_row.finished_at
        finally:
            worker.stop()
            thread.join(20)
