"""Maintenance services run beside the worker's loop, never in its way, and fail loudly."""

from __future__ import annotations

import threading

import pytest
from django.db import DatabaseError

from durable_jobs import Scheduler
from durable_jobs.maintenance import MaintenanceContext
from durable_jobs.models import Job, Node, Schedule
from durable_jobs.states import State
from durable_jobs.worker import Worker
from tests.conftest import wait_for
from tests.testapp import jobs

pytestmark = pytest.mark.django_db(transaction=True)


class BusyService:
    """Quick on the run before the first claim; then busy until the test releases it."""

    name = "busy"

    def __init__(self) -> None:
        self.runs = 0
        self.busy = threading.Event()
        self.release = threading.Event()
        self.contexts: list[MaintenanceContext] = []

    def interval(self, context: MaintenanceContext) -> float:
        return 0.05

    def run(self, context: MaintenanceContext) -> None:
        self.runs += 1
        self.contexts.append(context)
        if self.runs > 1:
            self.busy.set()
            self.release.wait(30)


def test_a_busy_service_never_delays_a_claim(durable_worker) -> None:
    service = BusyService()
    worker = durable_worker(poll_interval=60, maintenance=[service])
    try:
        assert service.busy.wait(10)  # the service is in the middle of a long run
        job = jobs.add.delay(a=1)
        wait_for(lambda: Job.objects.get(pk=job.pk).state == State.COMPLETED, timeout=10)
        assert not service.release.is_set()  # it finished while the service was still busy
    finally:
        service.release.set()
    # The service saw the worker's node and lease, not the worker.
    assert service.contexts[0].node_name == worker.node.name
    assert service.contexts[0].lease_seconds == worker.timing.lease_seconds


class FailingService:
    name = "failing"

    def __init__(self, error: BaseException, *, times: int | None = None) -> None:
        self.error = error
        self.times = times
        self.runs = 0

    def interval(self, context: MaintenanceContext) -> float:
        return 0.05

    def run(self, context: MaintenanceContext) -> None:
        self.runs += 1
        if self.runs > 1 and (self.times is None or self.runs <= 1 + self.times):
            raise self.error


def test_a_service_that_breaks_stops_the_worker_and_says_why() -> None:
    service = FailingService(RuntimeError("the pruner is broken"))
    worker = Worker({"default": 1}, maintenance=[service], poll_interval=0.05)
    thread = worker.start()
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert isinstance(worker.failure, RuntimeError)
    assert "maintenance failed" in worker.stop_reason
    assert not Node.objects.exists()  # it stopped the ordinary way, node row and all


def test_a_service_database_error_waits_for_its_next_run(durable_worker) -> None:
    service = FailingService(DatabaseError("connection reset"), times=2)
    worker = durable_worker(maintenance=[service], poll_interval=0.05)
    wait_for(lambda: service.runs >= 5, timeout=10)
    assert worker.failure is None
    job = jobs.add.delay(a=2)
    wait_for(lambda: Job.objects.get(pk=job.pk).state == State.COMPLETED, timeout=10)


def test_the_scheduler_ticks_in_the_same_harness(settings) -> None:
    scheduler = Scheduler()
    scheduler.schedule_interval(
        "every-second", "1s", name="tests.scheduled_report", payload={"countries": []}
    )
    Schedule.objects.update(next_run_at=Schedule.objects.get().created_at)  # due now
    scheduler.start(interval=0.05)
    try:
        wait_for(lambda: Job.objects.filter(name="tests.scheduled_report").exists(), timeout=10)
    finally:
        scheduler.stop()
    assert Schedule.objects.get().run_count >= 1


class BrokenAtOnce:
    name = "broken at once"

    def interval(self, context: MaintenanceContext) -> float:
        return 60.0

    def run(self, context: MaintenanceContext) -> None:
        raise RuntimeError("cannot even start")


def test_a_service_that_fails_before_the_first_claim_leaves_nothing_behind() -> None:
    job = jobs.add.delay(a=3)
    worker = Worker({"default": 1}, maintenance=[BrokenAtOnce()])
    with pytest.raises(RuntimeError, match="cannot even start"):
        worker.run()
    assert not Node.objects.exists()
    assert Job.objects.get(pk=job.pk).state == State.QUEUED  # nothing was claimed
