"""The lifecycle signals, sent by a real ``runworker`` process and by the enqueuing one.

Receivers in the test app (``tests/testapp/lifecycle_signals.py``) write a SideEffect
row per signal; a receiver that always raises is connected before them, and must change
no outcome. Every attempt in the database must have exactly one ``attempt_started`` and
one ``attempt_finished`` with its outcome, every final job one ``job_finished``, every
dead job one ``job_dead``.
"""

from __future__ import annotations

import collections
import datetime
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.utils import timezone

import durable_jobs
from durable_jobs.backends.compat import task_backends
from durable_jobs.lifecycle.states import FINAL, State
from durable_jobs.lifecycle.transitions import claim
from durable_jobs.models import Attempt, Job, Outcome
from tests.conftest import WorkerProcesses, logs_of, wait_until
from tests.testapp import jobs, lifecycle_signals, tasks
from tests.testapp.models import SideEffect

pytestmark = [
    pytest.mark.subprocess,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(150),
]


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Record the signals here (enqueues) and in the worker processes this test starts."""
    monkeypatch.setenv("DURABLE_JOBS_TEST_LIFECYCLE_SIGNALS", "1")
    monkeypatch.setenv("DURABLE_JOBS_TEST_RAISING", "1")
    lifecycle_signals.connect(raise_first=True)
    try:
        yield
    finally:
        lifecycle_signals.disconnect()


def labels(kind: str) -> collections.Counter[tuple[int, int, str]]:
    """``(job_id, attempt, detail)`` of every recorded ``kind`` signal, counted."""
    rows = SideEffect.objects.filter(label__startswith=f"{kind}:")
    return collections.Counter(
        (row.job_id, row.attempt, row.label.split(":", 1)[1]) for row in rows
    )


def run_burst(workers: WorkerProcesses, *args: str) -> subprocess.Popen[bytes]:
    proc = workers.start("--burst", *args)
    try:
        proc.wait(timeout=90)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"burst worker did not finish\n{logs_of(workers, [proc])}") from None
    assert proc.returncode == 0, logs_of(workers, [proc])
    return proc


def test_every_signal_once_per_event_with_its_arguments(
    recorded: None, worker_processes: WorkerProcesses
) -> None:
    made = [
        jobs.add.delay(a=1, b=2),
        jobs.fails_once.delay(),
        jobs.always_fails.using(max_retries=0).delay(),
        jobs.discarder.delay(),
        jobs.canceller.delay(),
        jobs.snoozer.delay(seconds=600),
        jobs.slow_timeout.delay(),
        jobs.async_add.delay(a=2, b=3),
        *durable_jobs.enqueue_many([jobs.add.prepare(a=n, b=n) for n in range(3)]),
    ]
    keyed = jobs.add.using(idempotency_key="signals:once").delay(a=5)
    assert jobs.add.using(idempotency_key="signals:once").delay(a=5).pk == keyed.pk
    made.append(keyed)
    task = tasks.add.enqueue(20, 22)
    made.append(Job.objects.get(pk=int(task.id)))
    # A job leased by a worker that vanished: the starting worker's rescuer finds it lost.
    lost = jobs.noop.using(queue="emails").delay()
    assert claim(queue="emails", limit=1, node_id=None, lease_seconds=0.001)
    made.append(lost)

    enqueued = labels("job_enqueued")
    assert sorted(enqueued) == sorted((job.pk, 0, job.name) for job in made)
    assert set(enqueued.values()) == {1}  # once each, the duplicate enqueue not at all

    proc = run_burst(worker_processes, "--queues", "default:4,emails:1", "--name", "sig-w1")

    # Nothing the raising receivers did changed an outcome.
    states = dict(Job.objects.filter(pk__in=[j.pk for j in made]).values_list("pk", "state"))
    assert states[made[0].pk] == State.COMPLETED
    assert Job.objects.get(pk=made[1].pk).result == "second time lucky"
    assert [states[j.pk] for j in made[2:8]] == [
        State.DEAD, State.DEAD, State.CANCELLED, State.QUEUED, State.DEAD, State.COMPLETED,
    ]  # fmt: skip
    assert states[lost.pk] == State.RETRYING
    assert task_backends["default"].get_result(task.id).return_value == 42
    log = worker_processes.log(proc)
    for name in ("attempt_started", "attempt_finished", "job_finished", "job_dead"):
        assert f"{name} receiver <function raising" in log

    attempts = list(Attempt.objects.filter(job__in=made).select_related("job"))
    assert len(attempts) == len(made) + 1  # fails_once twice, every other job once
    finished = labels("attempt_finished")
    assert sum(finished.values()) == len(attempts)
    for attempt in attempts:
        job = attempt.job
        last = attempt.number == job.attempts or attempt.outcome == Outcome.SNOOZED
        state_then = job.state if last else State.RETRYING
        assert finished[(job.pk, attempt.number, f"{attempt.outcome}:{state_then}")] == 1
    assert {a.outcome for a in attempts} >= {
        Outcome.COMPLETED, Outcome.FAILED, Outcome.DISCARDED, Outcome.CANCELLED,
        Outcome.SNOOZED, Outcome.TIMED_OUT, Outcome.LOST,
    }  # fmt: skip

    started = labels("attempt_started")
    ran = [a for a in attempts if a.outcome != Outcome.LOST]  # the lost one ran elsewhere
    assert sorted(started) == sorted((a.job_id, a.number, "leased:sig-w1:other") for a in ran)
    assert set(started.values()) == {1}

    final = [j for j in Job.objects.filter(pk__in=[j.pk for j in made]) if j.state in FINAL]
    assert sorted(labels("job_finished")) == sorted((j.pk, j.attempts, j.state) for j in final)
    dead = [j for j in final if j.state == State.DEAD]
    assert sorted(labels("job_dead")) == sorted((j.pk, j.attempts, "") for j in dead)
    assert len(dead) == 3

    workers = SideEffect.objects.filter(label__startswith="worker_")
    assert sorted(workers.values_list("label", flat=True)) == [
        "worker_started:sig-w1",
        "worker_stopping:sig-w1",
    ]


def test_a_stopped_worker_reports_the_hand_back_and_its_stop(
    recorded: None, worker_processes: WorkerProcesses, tmp_path: Path
) -> None:
    job = jobs.sleepy.delay(seconds=60, marker_dir=str(tmp_path))
    proc = worker_processes.start("--name", "sig-w2")
    wait_until(
        lambda: list(tmp_path.glob("started-*")),
        worker_processes,
        timeout=30,
        alive=[proc],
        what="the job to start",
    )
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0, logs_of(worker_processes, [proc])
    job.refresh_from_db()
    assert job.state == State.QUEUED
    assert labels("attempt_started") == {(job.pk, 1, "leased:sig-w2:other"): 1}
    assert labels("attempt_finished") == {(job.pk, 1, f"{Outcome.INTERRUPTED}:queued"): 1}
    assert not labels("job_finished")
    assert not labels("job_dead")
    assert sorted(
        SideEffect.objects.filter(label__startswith="worker_").values_list("label", flat=True)
    ) == ["worker_started:sig-w2", "worker_stopping:sig-w2"]


def test_enqueue_signal_is_sent_inside_the_transaction(recorded: None) -> None:
    from django.db import transaction

    with transaction.atomic():
        job = jobs.add.delay(a=1)
        # Sent after the insert, in the enqueuing transaction: the row is there.
        assert labels("job_enqueued") == {(job.pk, 0, "tests.add"): 1}
        assert Job.objects.filter(pk=job.pk).exists()
    assert timezone.now() - job.created_at < datetime.timedelta(minutes=1)
