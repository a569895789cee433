"""Flow control under real concurrency: rate limits, concurrency keys, pause, unique, batches.

The process tests start real ``python -m django runworker`` subprocesses on the test
database (through the ``worker_processes`` fixture, which SIGKILLs leftovers by pid);
the thread tests race several database connections at a barrier. All of them need
committed data, hence ``transaction=True``. Waits are bounded and generous (a shared,
noisy machine); the assertions about outcomes are strict.
"""

from __future__ import annotations

import datetime
import itertools
import signal
import subprocess
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from typing import Any
from unittest import mock

import pytest
from django.db import connection
from django.db.models import Count
from django.utils import timezone

from durable_jobs import Batch, enqueue_many
from durable_jobs.flow import queues
from durable_jobs.flow.batches import finish_ready
from durable_jobs.models import Attempt, Job, Node, Outcome, Queue
from durable_jobs.models import Batch as BatchRow
from durable_jobs.states import State, claim
from durable_jobs.worker import Worker
from tests.conftest import WorkerProcesses, logs_of, wait_for, wait_until
from tests.testapp import jobs
from tests.testapp.models import SideEffect

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(240)]

#: Generous bound for worker processes to start (Django setup) on a loaded machine.
START_TIMEOUT = 60.0
#: Seconds between heartbeats in tests/settings.py.
HEARTBEAT_SECONDS = 5.0


# -- helpers --------------------------------------------------------------------------------


def start_workers(workers: WorkerProcesses, count: int, *args: str) -> list[str]:
    """Start ``count`` runworker processes; return their node names once all registered."""
    procs = [workers.start(*args) for _ in range(count)]
    pids = [p.pid for p in procs]
    wait_until(
        lambda: Node.objects.filter(pid__in=pids).count() == count,
        workers,
        alive=workers.procs,
        timeout=START_TIMEOUT,
        what=f"{count} workers registered",
    )
    return list(Node.objects.filter(pid__in=pids).values_list("name", flat=True))


def stop_workers(workers: WorkerProcesses) -> None:
    """SIGTERM every worker; each must exit 0 (a clean, graceful stop)."""
    for proc in workers.procs:
        proc.send_signal(signal.SIGTERM)
    codes = []
    for proc in workers.procs:
        try:
            codes.append(proc.wait(timeout=30))
        except subprocess.TimeoutExpired:
            codes.append(None)
    assert codes == [0] * len(workers.procs), logs_of(workers, workers.procs)


def count_state(ids: Iterable[int], state: str) -> int:
    return Job.objects.filter(pk__in=list(ids), state=state).count()


def rows_per_job(model: type[Attempt] | type[SideEffect], ids: Iterable[int]) -> Counter[int]:
    """How many ``model`` rows (attempts, side effects) each job has."""
    rows = (
        model.objects.filter(job_id__in=list(ids))
        .values("job_id")
        .annotate(n=Count("id"))
        .values_list("job_id", "n")
    )
    return Counter(dict(rows))


def busiest_window(times: Iterable[float], period: float) -> tuple[int, float]:
    """The most starts in any window ``[t, t + period)`` that opens at a start ``t``
    (the busiest window always opens at one), and that window's opening time."""
    ordered = sorted(times)
    best, at = 0, ordered[0] if ordered else 0.0
    for i, t in enumerate(ordered):
        n = sum(1 for u in ordered[i:] if u < t + period)
        if n > best:
            best, at = n, t
    return best, at


def race(threads: int, action: Callable[[int], Any]) -> list[Any]:
    """Run ``action(i)`` in ``threads`` threads released together by a barrier; each thread
    uses (and closes) its own database connection. Re-raises the first error."""
    barrier = threading.Barrier(threads)
    results: list[Any] = [None] * threads
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait(timeout=30)
            results[i] = action(i)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    pool = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join(timeout=60)
    assert not any(t.is_alive() for t in pool), "a racing thread hung"
    if errors:
        raise errors[0]
    return results


# -- 1. a global rate limit across three nodes ------------------------------------------------


@pytest.mark.subprocess
def test_rate_limit_holds_across_three_worker_processes(
    worker_processes: WorkerProcesses,
) -> None:
    limit, period, total = 5, 2.0, 40
    nodes = start_workers(worker_processes, 3, "--queues", "webhooks:3:5/2s", "--no-scheduler")
    control = Queue.objects.get(name="webhooks")
    assert (control.rate_limit, control.rate_period) == (limit, period)
    assert control.global_concurrency is None

    started = time.monotonic()
    ids = [
        j.pk for j in enqueue_many(jobs.webhook.prepare(n=i, seconds=0.02) for i in range(total))
    ]
    wait_until(
        lambda: count_state(ids, State.COMPLETED) == total,
        worker_processes,
        alive=worker_processes.procs,
        timeout=120,
        what=f"all {total} webhooks completed",
    )
    elapsed = time.monotonic() - started
    stop_workers(worker_processes)

    # Each job ran exactly once, to completion.
    assert rows_per_job(Attempt, ids) == Counter(dict.fromkeys(ids, 1))
    assert rows_per_job(SideEffect, ids) == Counter(dict.fromkeys(ids, 1))
    assert set(Attempt.objects.filter(job_id__in=ids).values_list("outcome", flat=True)) == {
        Outcome.COMPLETED
    }
    used = set(Attempt.objects.filter(job_id__in=ids).values_list("node", flat=True))
    assert used <= set(nodes)
    assert len(used) >= 2, f"only {used} ran jobs: the limit was not shared by several nodes"

    # The limiter governs claims: Job.attempted_at is the claim time of each job's (only)
    # attempt. No sliding window of the period may hold more than the limit.
    claims = [
        t.timestamp() for t in Job.objects.filter(pk__in=ids).values_list("attempted_at", flat=True)
    ]
    busiest, at = busiest_window(claims, period)
    assert busiest <= limit, (
        f"{busiest} claims within {period}s from {at}: {sorted(c - min(claims) for c in claims)}"
    )
    # Not vacuous: the limit was reached, and 40 starts at 5 per 2 s need >= 7 full periods.
    assert busiest == limit, f"the busiest window held only {busiest} starts"
    span = max(claims) - min(claims)
    assert span >= (total / limit - 1) * period - 0.01, f"all claims within {span:.2f}s"
    assert elapsed >= (total / limit - 1) * period
    # ... and the limiter does not starve the queue either (ideal: ~14 s).
    assert span < 45, f"claims took {span:.1f}s"

    # The handler starts (Attempt.started_at) come after their claims, in the same order.
    attempts = dict(Attempt.objects.filter(job_id__in=ids).values_list("job_id", "started_at"))
    claimed = dict(Job.objects.filter(pk__in=ids).values_list("pk", "attempted_at"))
    assert all(attempts[pk] >= claimed[pk] for pk in ids)


# -- 2. concurrency keys ----------------------------------------------------------------------


@pytest.mark.subprocess
def test_concurrency_key_never_overlaps_across_two_worker_processes(
    worker_processes: WorkerProcesses,
) -> None:
    accounts, total = 4, 20
    start_workers(worker_processes, 2, "--queues", "default:4", "--no-scheduler")
    # Grouped by account, so one claim's candidates share keys: the claim must lease only
    # as many of them as the key's limit allows, not just skip keys already held.
    created = enqueue_many(
        jobs.per_account.prepare(account=i * accounts // total, n=i, seconds=0.1)
        for i in range(total)
    )
    ids = [j.pk for j in created]
    assert {j.concurrency_key for j in created} == {f"account:{a}" for a in range(accounts)}
    wait_until(
        lambda: count_state(ids, State.COMPLETED) == total,
        worker_processes,
        alive=worker_processes.procs,
        timeout=90,
        what=f"all {total} keyed jobs completed",
    )
    stop_workers(worker_processes)
    assert rows_per_job(Attempt, ids) == Counter(dict.fromkeys(ids, 1))

    key_of = dict(Job.objects.filter(pk__in=ids).values_list("pk", "concurrency_key"))
    runs = defaultdict(list)  # key -> [(started, finished, job id)] of the handler runs
    for job_id, started, finished in Attempt.objects.filter(job_id__in=ids).values_list(
        "job_id", "started_at", "finished_at"
    ):
        runs[key_of[job_id]].append((started, finished, job_id))
    leases = defaultdict(list)  # key -> [(claimed, handler finished, job id)]
    for pk, key, claimed, finished in Job.objects.filter(pk__in=ids).values_list(
        "pk", "concurrency_key", "attempted_at", "finished_at"
    ):
        leases[key].append((claimed, finished, pk))

    for key in runs:
        assert len(runs[key]) == total // accounts
        ordered = sorted(runs[key])
        for before, after in itertools.pairwise(ordered):
            assert after[0] >= before[1], f"{key}: job {after[2]} started while {before[2]} ran"
        # Stricter: a job is claimed only once the previous holder of its key finished
        # (its lease ends with the acknowledgement, after the handler returned).
        ordered = sorted(leases[key])
        for before, after in itertools.pairwise(ordered):
            assert after[0] >= before[1], (
                f"{key}: job {after[2]} claimed at {after[0]} while {before[2]} held the key "
                f"until at least {before[1]}"
            )

    # Not a global lock: runs of different keys did overlap.
    everything = [(s, f, key) for key, spans in runs.items() for s, f, _ in spans]
    overlapping = {
        frozenset((k1, k2))
        for s1, f1, k1 in everything
        for s2, f2, k2 in everything
        if k1 != k2 and s1 < f2 and s2 < f1
    }
    assert overlapping, "jobs of different keys never ran at the same time"


# -- 3. pause every queue in the middle of a drain ---------------------------------------------


@pytest.mark.subprocess
def test_pause_all_stops_new_starts_on_every_node_and_resume_finishes_the_rest(
    worker_processes: WorkerProcesses,
) -> None:
    total, seconds = 80, 0.3
    start_workers(worker_processes, 2, "--queues", "default:4", "--no-scheduler")
    ids = [j.pk for j in enqueue_many(jobs.sleepy.prepare(seconds=seconds) for _ in range(total))]
    wait_until(
        lambda: count_state(ids, State.COMPLETED) >= 8,
        worker_processes,
        alive=worker_processes.procs,
        timeout=60,
        what="the drain under way",
        interval=0.02,
    )

    paused = queues.pause_all()
    paused_at = timezone.now()
    assert "default" in paused
    assert Queue.objects.get(name="default").paused

    # Running jobs finish; then wait out a heartbeat, so a node that learned of the pause
    # only from its heartbeat would have had time to show it.
    wait_until(
        lambda: count_state(ids, State.LEASED) == 0,
        worker_processes,
        alive=worker_processes.procs,
        timeout=30,
        what="the running jobs finished",
    )
    quiet_until = time.monotonic() + HEARTBEAT_SECONDS + seconds + 1.0
    snapshot = Counter(Job.objects.filter(pk__in=ids).values_list("state", flat=True))
    while time.monotonic() < quiet_until:
        assert all(p.poll() is None for p in worker_processes.procs)
        time.sleep(0.2)
    after = Counter(Job.objects.filter(pk__in=ids).values_list("state", flat=True))

    # The pause is checked in the claim itself: no claim after it committed.
    late = Job.objects.filter(pk__in=ids, attempted_at__gt=paused_at)
    assert not late.exists(), list(late.values_list("pk", "attempted_at"))
    late_runs = Attempt.objects.filter(
        job_id__in=ids, started_at__gt=paused_at + datetime.timedelta(seconds=0.5)
    )
    assert not late_runs.exists(), list(late_runs.values_list("job_id", "started_at"))
    assert after == snapshot, f"jobs moved while paused: {snapshot} -> {after}"
    assert set(after) <= {State.COMPLETED, State.QUEUED}, after
    assert after[State.QUEUED] > 0, "the drain ended before the pause: nothing was tested"
    assert after[State.COMPLETED] + after[State.QUEUED] == total
    # Every queued job is untouched: never attempted.
    assert not Job.objects.filter(pk__in=ids, state=State.QUEUED, attempts__gt=0).exists()

    resumed = queues.resume_all()
    assert "default" in resumed
    assert not Queue.objects.filter(paused=True).exists()
    wait_until(
        lambda: count_state(ids, State.COMPLETED) == total,
        worker_processes,
        alive=worker_processes.procs,
        timeout=90,
        what="every job completed after resume",
    )
    stop_workers(worker_processes)

    # Nothing lost, nothing run twice.
    assert rows_per_job(Attempt, ids) == Counter(dict.fromkeys(ids, 1))
    assert rows_per_job(SideEffect, ids) == Counter(dict.fromkeys(ids, 1))
    assert set(Job.objects.filter(pk__in=ids).values_list("attempts", flat=True)) == {1}
    resumed_runs = Job.objects.filter(pk__in=ids, attempted_at__gt=paused_at).count()
    assert resumed_runs == after[State.QUEUED]


# -- 4. unique jobs ---------------------------------------------------------------------------


def test_concurrent_unique_enqueues_create_exactly_one_job() -> None:
    accounts = [7, 8, 9, 10, 11]
    for account in accounts:
        rows = race(8, lambda i, a=account: jobs.unique_sync.delay(account_id=a, reason=f"t{i}"))
        assert len({row.pk for row in rows}) == 1, [row.pk for row in rows]
        mine = Job.objects.filter(name="tests.unique_sync", payload__account_id=account)
        assert mine.count() == 1
        assert mine.get().pk == rows[0].pk
    assert Job.objects.filter(name="tests.unique_sync").count() == len(accounts)
    first = {j.payload["account_id"]: j.pk for j in Job.objects.filter(name="tests.unique_sync")}

    # While the job waits (or runs), the key holds.
    assert jobs.unique_sync.delay(account_id=7, reason="later").pk == first[7]

    Worker({"default": 2}, burst=True, scheduler=False).run()
    done = Job.objects.filter(name="tests.unique_sync")
    assert Counter(done.values_list("state", flat=True)) == {State.COMPLETED: len(accounts)}
    assert not done.filter(idempotency_key__isnull=False).exists()  # keys released

    # Completed: the same arguments make a new job, which holds the key in turn (again
    # under a race).
    rows = race(8, lambda i: jobs.unique_sync.delay(account_id=7, reason=f"again{i}"))
    assert len({row.pk for row in rows}) == 1
    assert rows[0].pk != first[7]
    assert Job.objects.filter(name="tests.unique_sync", payload__account_id=7).count() == 2
    assert Job.objects.get(pk=rows[0].pk).state == State.QUEUED


def test_unique_key_is_held_while_leased_by_default_but_not_when_unique_only_while_queued() -> None:
    held = jobs.unique_sync.delay(account_id=1)
    leased = claim(queue="default", limit=10, node_id=None, lease_seconds=30)
    assert [j.pk for j in leased] == [held.pk]
    assert jobs.unique_sync.delay(account_id=1).pk == held.pk  # leased still holds the key

    Job.objects.filter(pk=held.pk).update(state=State.COMPLETED)  # (tidy; not under test)

    first = jobs.unique_while_queued.delay(account_id=1)
    assert jobs.unique_while_queued.delay(account_id=1).pk == first.pk  # queued: held
    rows = race(8, lambda i: jobs.unique_while_queued.delay(account_id=2))
    assert len({row.pk for row in rows}) == 1

    leased = claim(queue="default", limit=1, node_id=None, lease_seconds=30)
    assert [j.pk for j in leased] == [first.pk]
    assert Job.objects.get(pk=first.pk).idempotency_key is None  # released at the claim
    second = jobs.unique_while_queued.delay(account_id=1)
    assert second.pk != first.pk
    assert jobs.unique_while_queued.delay(account_id=1).pk == second.pk
    assert Job.objects.filter(name="tests.unique_while_queued", payload__account_id=1).count() == 2


def test_unique_per_period_buckets_split_at_the_minute_boundary() -> None:
    def at(*hms: float) -> datetime.datetime:
        h, m, s = hms
        return datetime.datetime(2030, 5, 6, int(h), int(m), tzinfo=datetime.UTC) + (
            datetime.timedelta(seconds=s)
        )

    def enqueue(when: datetime.datetime, account: int = 1) -> Job:
        with mock.patch("django.utils.timezone.now", return_value=when):
            return jobs.unique_per_minute.delay(account_id=account)

    a = enqueue(at(12, 0, 0.0))
    assert enqueue(at(12, 0, 30.5)).pk == a.pk
    assert enqueue(at(12, 0, 59.9)).pk == a.pk
    b = enqueue(at(12, 1, 0.0))
    assert b.pk != a.pk
    assert enqueue(at(12, 1, 59.999)).pk == b.pk
    c = enqueue(at(12, 0, 59.9), account=2)  # other arguments: another job
    assert c.pk not in (a.pk, b.pk)
    assert Job.objects.filter(name="tests.unique_per_minute").count() == 3

    # Concurrent enqueues in one bucket, each thread at its own instant: one job. (One
    # patch around the race: patching in each thread would interleave the restores.)
    clock = threading.local()

    def enqueue_at(i: int) -> Job:
        clock.now = at(12, 2, 0.1 + 7 * i)
        return jobs.unique_per_minute.delay(account_id=1)

    with mock.patch("django.utils.timezone.now", side_effect=lambda: clock.now):
        rows = race(8, enqueue_at)
    assert len({row.pk for row in rows}) == 1
    assert Job.objects.filter(name="tests.unique_per_minute").count() == 4
    assert abs(timezone.now() - datetime.datetime.now(datetime.UTC)) < datetime.timedelta(minutes=1)


# -- 5. batches -------------------------------------------------------------------------------


def expected_counts() -> dict[str, int]:
    return {State.COMPLETED.value: 180, State.DEAD.value: 20}


@pytest.mark.subprocess
def test_batch_of_200_on_four_worker_processes_runs_its_callback_once(
    worker_processes: WorkerProcesses,
) -> None:
    nodes = start_workers(worker_processes, 4, "--queues", "default:4", "--no-scheduler")
    row = Batch("two hundred", on_complete=jobs.batch_done.prepare(label="x")).enqueue(
        [jobs.batch_item.prepare(n=i, fail=(i % 10 == 0), seconds=0.05) for i in range(200)]
    )
    assert row.total == 200
    items = Job.objects.filter(batch_id=row.pk)
    assert items.count() == 200

    def callback_done() -> bool:
        callback = Job.objects.filter(name="tests.batch_done").first()
        return callback is not None and callback.is_final

    wait_until(
        callback_done,
        worker_processes,
        alive=worker_processes.procs,
        timeout=120,
        what="the batch callback ran",
    )
    time.sleep(1.0)  # a duplicate callback, if any, would be enqueued by now
    stop_workers(worker_processes)

    assert Counter(items.values_list("state", flat=True)) == expected_counts()
    assert set(items.filter(state=State.DEAD).values_list("payload__n", flat=True)) == set(
        range(0, 200, 10)
    )
    assert rows_per_job(Attempt, items.values_list("pk", flat=True)) == Counter(
        dict.fromkeys(items.values_list("pk", flat=True), 1)
    )
    assert (
        len(
            set(Attempt.objects.filter(job__batch_id=row.pk).values_list("node", flat=True))
            & set(nodes)
        )
        >= 2
    )

    assert Job.objects.filter(name="tests.batch_done").count() == 1
    callback = Job.objects.get(name="tests.batch_done")
    assert callback.state == State.COMPLETED, callback.last_error
    assert callback.idempotency_key == f"batch:{row.pk}:complete"
    assert callback.result == {
        "label": "x",
        "id": row.pk,
        "total": 200,
        "counts": expected_counts(),
    }
    assert Attempt.objects.filter(job=callback).count() == 1

    row.refresh_from_db()
    assert row.finished_at is not None
    assert row.callback_job_id == callback.pk
    assert row.counts == expected_counts()
    last_item = max(items.values_list("finished_at", flat=True))
    assert row.finished_at >= last_item
    # Finished by the acknowledgement of the last job, not by the 15 s sweep.
    assert row.finished_at - last_item < datetime.timedelta(seconds=5)


def test_four_workers_finishing_a_batch_together_enqueue_one_callback() -> None:
    rounds = 4
    workers = [
        Worker({"default": 1}, burst=False, scheduler=False, poll_interval=0.05) for _ in range(4)
    ]
    threads = [w.start() for w in workers]
    try:
        batches = []
        for r in range(rounds):
            row = Batch(f"round {r}", on_complete=jobs.batch_done.prepare(label=f"r{r}")).enqueue(
                [jobs.batch_item.prepare(n=i, fail=(i == 0), seconds=0.3) for i in range(4)]
            )
            batches.append(row)
            wait_for(
                lambda row=row: BatchRow.objects.get(pk=row.pk).finished_at is not None,
                timeout=60,
            )
        wait_for(
            lambda: (
                Job.objects.filter(name="tests.batch_done", state=State.COMPLETED).count() >= rounds
            ),
            timeout=60,
        )
        time.sleep(0.5)
    finally:
        for worker in workers:
            worker.stop()
        for thread in threads:
            thread.join(timeout=30)
    assert not any(t.is_alive() for t in threads)

    callbacks = Job.objects.filter(name="tests.batch_done")
    assert callbacks.count() == rounds
    by_batch = {c.result["id"]: c for c in callbacks}
    assert set(by_batch) == {b.pk for b in batches}
    parallel_rounds = 0
    for b in batches:
        b.refresh_from_db()
        assert b.counts == {State.COMPLETED.value: 3, State.DEAD.value: 1}
        assert b.callback_job_id == by_batch[b.pk].pk
        assert by_batch[b.pk].result["counts"] == b.counts
        ran_on = set(Attempt.objects.filter(job__batch_id=b.pk).values_list("node", flat=True))
        parallel_rounds += len(ran_on) == 4
    # The race was real: in some round the four items ran on four workers at once.
    assert parallel_rounds >= 1


def test_concurrent_completion_checks_finish_a_batch_once() -> None:
    for r in range(5):
        row = Batch(f"race {r}", on_complete=jobs.batch_done.prepare(label="race")).enqueue(
            [jobs.batch_item.prepare(n=i) for i in range(3)]
        )
        assert finish_ready([row.pk]) == []  # not ready: its jobs are queued
        # Final without an acknowledgement (as when an operator finishes them).
        Job.objects.filter(batch_id=row.pk).update(
            state=State.COMPLETED, finished_at=timezone.now()
        )

        results = race(8, lambda i, pk=row.pk: finish_ready([pk]))
        assert sorted(results) == [[]] * 7 + [[row.pk]], results
        assert Job.objects.filter(name="tests.batch_done").count() == r + 1
        row.refresh_from_db()
        callback = Job.objects.get(idempotency_key=f"batch:{row.pk}:complete")
        assert row.callback_job_id == callback.pk
        assert row.counts == {State.COMPLETED.value: 3}
        assert callback.meta["batch"]["counts"] == row.counts


@pytest.mark.django_db(transaction=True)
def test_concurrent_bulk_enqueues_of_shared_keys_in_opposite_orders_do_not_deadlock() -> None:
    """Two enqueue_many calls sharing 2,000 unique keys, one forward and one reversed: each
    key ends up with exactly one job, and neither call fails (PostgreSQL once deadlocked)."""
    accounts = list(range(2000))
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []
    results: list[list[int]] = []

    def go(order: list[int]) -> None:
        try:
            barrier.wait()
            rows = enqueue_many(jobs.unique_sync.prepare(account_id=a) for a in order)
            results.append([row.payload["account_id"] for row in rows])
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=go, args=(o,)) for o in (accounts, accounts[::-1])]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    assert sorted(results) == sorted([accounts, accounts[::-1]])  # rows in call order
    assert Job.objects.filter(name="tests.unique_sync").count() == 2000
