"""Fault scenario 2: a rolling deploy, every worker stopped by SIGTERM in turn, under load.

Four ``runworker`` processes serve a queue that a producer thread keeps filling with
quick jobs and slow ones (0.5-2 s). One at a time, each worker gets a replacement and
then SIGTERM, with a 0.5 s shutdown grace: the jobs it cannot finish in time are handed
back (an ``interrupted`` attempt that does not count) and completed by another worker.

What a clean stop promises (docs/architecture.rst, "Graceful shutdown"): every worker
exits 0, nothing is left ``leased`` (so nothing is left for the rescuer: no ``lost``
attempt), and every handed-back job completes later.
"""

from __future__ import annotations

import random
import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from durable_jobs.models import Attempt, Job, Node, Outcome
from durable_jobs.states import State
from durable_jobs.worker import Worker
from tests.conftest import logs_of, wait_for, wait_until
from tests.faults.conftest import (
    FaultSummary,
    FaultWorkers,
    account_executions,
    fault_seed,
    unfinished_count,
)
from tests.testapp import crash_jobs
from tests.testapp.models import SideEffect

pytestmark = [
    pytest.mark.faults,
    pytest.mark.subprocess,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(240),
]

GRACE = 0.5
# A 5 s lease: a job a stopping worker wrongly left leased would be rescued (a ``lost``
# attempt, which the test refuses) within seconds rather than stall the test.
WORKER_ARGS = (
    "--queues",
    "default:4",
    "--lease-seconds",
    "5",
    "--shutdown-grace",
    str(GRACE),
    "--poll-interval",
    "0.1",
    "--no-scheduler",
)
WORKERS = 4


class Producer(threading.Thread):
    """Enqueues a job every ``period`` seconds until stopped: 60 % slow (0.5-2 s), the
    rest quick. Runs on its own database connection, closed when it stops."""

    def __init__(self, seed: int, period: float = 0.1) -> None:
        super().__init__(name="fault-producer", daemon=True)
        self.rng = random.Random(seed)
        self.period = period
        self.ids: list[int] = []
        self.seconds: dict[int, float] = {}
        self.error: BaseException | None = None
        self._stop_event = threading.Event()

    def run(self) -> None:
        try:
            n = 0
            while not self._stop_event.is_set():
                if self.rng.random() < 0.6:
                    seconds = round(self.rng.uniform(0.5, 2.0), 2)
                    job = crash_jobs.fault_slow.delay(n=n, seconds=seconds)
                    self.seconds[job.pk] = seconds
                else:
                    job = crash_jobs.fault_record.delay(n=n)
                self.ids.append(job.pk)
                n += 1
                self._stop_event.wait(self.period)
        except BaseException as exc:
            self.error = exc
        finally:
            connection.close()

    def stop(self) -> list[int]:
        self._stop_event.set()
        self.join(timeout=30)
        assert not self.is_alive(), "the producer did not stop"
        if self.error is not None:
            raise self.error
        return list(self.ids)


def wait_for_a_job_to_interrupt(node: str, producer: Producer, timeout: float = 10.0) -> bool:
    """Wait until ``node`` runs a slow job that will outlast the grace period (so the
    SIGTERM catches it mid-run); False if none turns up in time (the test goes on)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        soon = timezone.now() + timedelta(seconds=GRACE + 0.7)
        running = Job.objects.filter(state=State.LEASED, leased_by__name=node).values_list(
            "pk", "attempted_at"
        )
        for pk, attempted_at in running:
            seconds = producer.seconds.get(pk)
            if seconds and attempted_at and attempted_at + timedelta(seconds=seconds) > soon:
                return True
        time.sleep(0.05)
    return False


def test_rolling_sigterm_hands_jobs_back_and_every_worker_exits_0(
    fault_workers: FaultWorkers,
) -> None:
    seed = fault_seed(20_240_602)
    wall = time.monotonic()
    old = [fault_workers.start(*WORKER_ARGS) for _ in range(WORKERS)]
    old_names = fault_workers.wait_registered(old)

    codes: list[int] = []
    caught: dict[str, bool] = {}
    producer = Producer(seed)
    producer.start()
    try:
        time.sleep(2)  # let every worker get busy first
        deploy_started = timezone.now()
        for proc, name in zip(old, old_names, strict=True):
            replacement = fault_workers.start(*WORKER_ARGS)
            fault_workers.wait_registered([replacement])
            caught[name] = wait_for_a_job_to_interrupt(name, producer)
            codes.append(fault_workers.terminate(proc, timeout=30))
            # Clean means nothing left behind: the node row is gone and no job is leased
            # without a live node (a deleted node's jobs would show leased_by NULL).
            assert not Node.objects.filter(name=name).exists()
            stranded = Job.objects.filter(state=State.LEASED, leased_by__isnull=True)
            assert not stranded.exists(), list(stranded.values("pk", "name", "attempts"))
        deploy_ended = timezone.now()
        time.sleep(1)  # a little more load for the new workers
    finally:
        ids = producer.stop()

    new = fault_workers.alive()
    assert len(new) == WORKERS
    new_names = fault_workers.wait_registered(new)
    wait_until(
        lambda: unfinished_count(ids) == 0,
        fault_workers,
        timeout=90,
        alive=new,
        what=f"all {len(ids)} produced jobs final",
        interval=0.2,
    )
    for proc in new:
        codes.append(fault_workers.terminate(proc, timeout=30))
    wall = time.monotonic() - wall

    account = account_executions(ids)
    interrupted = list(
        Attempt.objects.filter(job_id__in=ids, outcome=Outcome.INTERRUPTED).values_list(
            "job_id", "number", "node", "finished_at"
        )
    )
    summary = FaultSummary.of(
        "graceful deploy",
        account,
        faults=WORKERS,
        wall_seconds=wall,
        seed=seed,
        handed_back=len(interrupted),
        workers_caught_mid_job=sum(caught.values()),
        produced_during_deploy=Job.objects.filter(
            pk__in=ids, created_at__range=(deploy_started, deploy_ended)
        ).count(),
    ).emit()

    # Every worker, old and new, stopped cleanly.
    assert codes == [0] * (2 * WORKERS), logs_of(fault_workers, fault_workers.procs)
    assert not Node.objects.filter(name__in=old_names + new_names).exists()
    assert not account.problems, account.report()
    assert account.lost == 0
    assert account.states == {State.COMPLETED: len(ids)}
    # Nothing needed rescuing and nothing failed: only hand-backs and completions.
    assert account.outcomes.keys() <= {Outcome.COMPLETED, Outcome.INTERRUPTED}, summary.line()
    assert account.duplicates == account.explained
    assert not Job.objects.filter(pk__in=ids).exclude(lease_expires_at=None).exists()

    # Some jobs were caught mid-run and handed back, by the old workers only...
    assert interrupted, summary.line()
    assert {node for _, _, node, _ in interrupted} <= set(old_names)
    # ... each one then completed by another worker, under the same attempt number (a
    # hand-back gives the attempt back), after the hand-back.
    for job_id, number, node, handed_back_at in interrupted:
        done = Attempt.objects.get(job_id=job_id, outcome=Outcome.COMPLETED)
        assert done.number == number, (job_id, number, done.number)
        assert done.node != node
        assert done.started_at >= handed_back_at
    assert summary.extra["produced_during_deploy"] > 0


def test_a_job_whose_handler_returned_is_not_handed_back_at_shutdown() -> None:
    """Regression: the rolling deploy above showed, now and then, a duplicate run explained
    by an ``interrupted`` attempt whose handler had already returned. The loop handed back
    every job still in its running table, including those whose result was reported but
    not yet collected (a handler that returned during the grace period's last pass).

    Driven step by step in-process, so the order is certain: the handler returns and
    reports, then the worker stops with no grace period left, before collecting it.
    """
    job = crash_jobs.fault_record.delay(n=1)
    worker = Worker({"default": 1}, scheduler=False, plugins=[], shutdown_grace=0)
    worker._start()
    try:
        assert worker._write_and_claim() == 1
        # The handler ran to its end and reported; the loop has not collected it.
        wait_for(worker.running.has_reports, timeout=10)
        worker.stop()
    finally:
        worker._shutdown()

    job.refresh_from_db()
    assert job.state == State.COMPLETED
    assert list(Attempt.objects.filter(job=job).values_list("outcome", flat=True)) == [
        Outcome.COMPLETED
    ]
    assert SideEffect.objects.filter(job_id=job.pk).count() == 1
