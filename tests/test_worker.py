"""The worker runtime with real threads: wake-ups, leases, timeouts, shutdown, limits."""

from __future__ import annotations

import datetime
import socket
import time

import pytest
from django.db import transaction
from django.utils import timezone

from durable_jobs import wakeup
from durable_jobs.exceptions import ImproperlyConfiguredQueue
from durable_jobs.models import Attempt, Job, Node, Outcome
from durable_jobs.states import State
from durable_jobs.worker import Worker, parse_queues
from tests.conftest import wait_for
from tests.testapp import jobs
from tests.testapp.models import SideEffect

pytestmark = pytest.mark.django_db(transaction=True)


def state_of(job: Job) -> str:
    return Job.objects.get(pk=job.pk).state


def test_commit_wakes_a_waiting_worker(durable_worker) -> None:
    # Polling every 60 s: only a wake-up can explain a prompt start.
    durable_worker(poll_interval=60)
    time.sleep(0.2)  # the worker is idle, waiting
    with transaction.atomic():
        job = jobs.add.delay(a=1)
        time.sleep(0.3)
        assert state_of(job) == State.QUEUED  # not visible, and no wake-up, before commit
    start = time.monotonic()
    wait_for(lambda: state_of(job) == State.COMPLETED, timeout=10)
    assert time.monotonic() - start < 5


def test_the_database_wakes_a_worker_in_another_process(durable_worker, vendor) -> None:
    """PostgreSQL's NOTIFY, or the change counter of SQLite and MySQL: long before the
    worker's poll interval."""
    worker = durable_worker(poll_interval=60)
    # Stop the in-process shortcut: only the database can wake it now.
    wakeup.unsubscribe(worker.wake)
    time.sleep(0.5)  # the listener is connected; the counter's checks have backed off
    job = jobs.add.delay(a=1)
    start = time.monotonic()
    wait_for(lambda: state_of(job) == State.COMPLETED, timeout=10)
    assert time.monotonic() - start < 5


def test_rolled_back_enqueue_never_runs(durable_worker) -> None:
    durable_worker(poll_interval=0.1)

    class Boom(Exception):
        pass

    def enqueue_then_fail() -> None:
        with transaction.atomic():
            jobs.record.delay(label="never")
            raise Boom

    with pytest.raises(Boom):
        enqueue_then_fail()
    time.sleep(0.5)
    assert not Job.objects.exists()
    assert not SideEffect.objects.exists()


def test_heartbeat_renews_leases_of_long_jobs(durable_worker) -> None:
    job = jobs.sleepy.delay(seconds=3)
    worker = durable_worker(lease_seconds=1.0, heartbeat_seconds=0.2)
    wait_for(lambda: state_of(job) == State.COMPLETED, timeout=20)
    assert [a.outcome for a in Attempt.objects.filter(job=job)] == [Outcome.COMPLETED]
    # Counted just after the outcome's commit, which the test may see first.
    wait_for(lambda: worker.stats.outcomes == {"completed": 1}, timeout=5)


def test_a_sync_job_over_its_timeout_fails_and_its_thread_is_freed(durable_worker) -> None:
    slow = jobs.slow_timeout.delay()  # timeout=0.5, max_retries=0
    durable_worker("default:1")
    wait_for(lambda: state_of(slow) == State.DEAD, timeout=10)
    (attempt,) = Attempt.objects.filter(job=slow)
    assert attempt.outcome == Outcome.TIMED_OUT
    assert attempt.error_class == "durable_jobs.exceptions.JobTimeout"
    # The only slot comes back: the interrupted handler stopped instead of running 30 s.
    after = jobs.add.delay(a=1)
    wait_for(lambda: state_of(after) == State.COMPLETED, timeout=10)


def test_graceful_stop_hands_unfinished_jobs_back(durable_worker) -> None:
    long_job = jobs.sleepy.delay(seconds=30)
    worker = durable_worker(shutdown_grace=0.5)
    wait_for(lambda: state_of(long_job) == State.LEASED)
    started = time.monotonic()
    worker.stop()
    wait_for(lambda: state_of(long_job) == State.QUEUED, timeout=10)
    assert time.monotonic() - started < 5
    long_job.refresh_from_db()
    assert long_job.attempts == 0  # an interruption is not a failure
    assert long_job.leased_by_id is None
    (attempt,) = Attempt.objects.filter(job=long_job)
    assert attempt.outcome == Outcome.INTERRUPTED
    assert not SideEffect.objects.exists()


def test_graceful_stop_waits_for_jobs_that_finish_within_the_grace(durable_worker) -> None:
    job = jobs.sleepy.delay(seconds=0.5)
    worker = durable_worker(shutdown_grace=10)
    wait_for(lambda: state_of(job) == State.LEASED)
    worker.stop()
    wait_for(lambda: not Node.objects.exists(), timeout=15)
    assert state_of(job) == State.COMPLETED


def test_the_rescuer_of_a_live_worker_takes_over_expired_leases(durable_worker) -> None:
    job = jobs.add.delay(a=1)
    dead = Node.objects.create(name="crashed-node", pid=1)
    Job.objects.filter(pk=job.pk).update(
        state=State.LEASED,
        attempts=1,
        leased_by=dead,
        lease_token="00000000-0000-0000-0000-000000000001",
        lease_expires_at=timezone.now() - datetime.timedelta(seconds=1),
        attempted_at=timezone.now() - datetime.timedelta(seconds=40),
    )
    durable_worker(lease_seconds=2)
    wait_for(lambda: state_of(job) == State.RETRYING, timeout=10)
    Job.objects.filter(pk=job.pk).update(available_at=timezone.now())
    wait_for(lambda: state_of(job) == State.COMPLETED, timeout=10)
    assert [a.outcome for a in Attempt.objects.filter(job=job).order_by("id")] == [
        Outcome.LOST,
        Outcome.COMPLETED,
    ]


def test_burst_processes_what_is_available_then_returns() -> None:
    for i in range(25):
        jobs.record.delay(label=str(i))
    later = jobs.record.using(run_in=datetime.timedelta(hours=1)).delay(label="later")
    worker = Worker("default:4", burst=True)
    assert worker.run() == 0
    assert SideEffect.objects.count() == 25
    assert state_of(later) == State.QUEUED
    assert worker.stats.outcomes == {"completed": 25}


def test_max_jobs_stops_after_that_many() -> None:
    for i in range(10):
        jobs.record.delay(label=str(i))
    worker = Worker("default:4", max_jobs=3)
    assert worker.run() == 0
    assert SideEffect.objects.count() == 3
    assert Job.objects.filter(state=State.COMPLETED).count() == 3
    assert Job.objects.filter(state=State.QUEUED).count() == 7


def test_concurrency_bounds_running_jobs(durable_worker) -> None:
    for _ in range(6):
        jobs.sleepy.delay(seconds=0.5)
    durable_worker("default:2")
    peak = 0
    deadline = time.monotonic() + 15
    while Job.objects.exclude(state=State.COMPLETED).exists() and time.monotonic() < deadline:
        peak = max(peak, Job.objects.filter(state=State.LEASED).count())
        time.sleep(0.02)
    assert Job.objects.filter(state=State.COMPLETED).count() == 6
    assert 1 <= peak <= 2


def test_node_row_lifecycle(durable_worker) -> None:
    worker = durable_worker()
    node = Node.objects.get()
    assert node.name == worker.node.name
    assert socket.gethostname() not in node.name
    assert node.queues == {"default": 4, "emails": 2, "webhooks": 3}
    assert node.concurrency == 9
    worker.stop()
    wait_for(lambda: not Node.objects.exists(), timeout=15)


def test_parse_queues() -> None:
    assert parse_queues("default,emails:5") == {"default": 4, "emails": 5}
    assert parse_queues("other") == {"other": 10}
    assert parse_queues("default,other", default_concurrency=3) == {"default": 3, "other": 3}
    assert parse_queues(None) == {"default": 4, "emails": 2, "webhooks": 3}
    with pytest.raises(ImproperlyConfiguredQueue, match="whole number"):
        parse_queues("default:x")
    with pytest.raises(ImproperlyConfiguredQueue, match="at least 1"):
        parse_queues("default:0")


def test_a_handler_raising_system_exit_fails_its_job_not_the_worker(durable_worker) -> None:
    job = jobs.exits.delay()  # max_retries=0
    durable_worker("default:1")
    wait_for(lambda: state_of(job) == State.DEAD, timeout=10)
    assert Attempt.objects.get(job=job).error_class == "builtins.SystemExit"
    after = jobs.add.delay(a=1)  # the slot and the worker survive
    wait_for(lambda: state_of(after) == State.COMPLETED, timeout=10)


def test_a_chosen_node_name_takes_over_a_crashed_predecessor_only() -> None:
    from durable_jobs.worker.node import NodeNameTaken, register_node

    Node.objects.create(
        name="web-1", pid=1, last_heartbeat_at=timezone.now() - datetime.timedelta(minutes=5)
    )
    node = register_node({"default": 1}, name="web-1", using="default", stale_after=60)
    assert Node.objects.get(name="web-1").pk == node.pk
    with pytest.raises(NodeNameTaken, match="already named 'web-1'"):
        register_node({"default": 1}, name="web-1", using="default", stale_after=60)


def test_an_outcome_the_database_refuses_is_recorded_without_its_data(durable_worker) -> None:
    odd = jobs.nul_result.delay()
    after = jobs.add.delay(a=1)
    durable_worker("default:1")
    wait_for(lambda: state_of(after) == State.COMPLETED, timeout=15)
    odd.refresh_from_db()
    assert odd.state == State.COMPLETED  # recorded, not left to expire and run again
    assert Attempt.objects.filter(job=odd).count() == 1


def test_start_raises_when_the_worker_cannot_start() -> None:
    from durable_jobs.worker.node import NodeNameTaken

    Node.objects.create(name="taken", pid=1)  # alive: its heartbeat is now
    with pytest.raises(NodeNameTaken):
        Worker("default:1", name="taken").start()
