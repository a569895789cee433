"""Tasks of Django's Tasks framework, run by real ``runworker`` processes: routing and order,
retries, timeouts, kill -9, SIGTERM, and the signals a worker process sends.

Read back through ``get_result`` and ``TaskResult.refresh()`` from the test process.
Every test's data must be committed for the subprocesses to see it: ``transaction=True``.
"""

from __future__ import annotations

import signal
import subprocess
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from durable_jobs.backends.compat import TaskResultStatus, task_backends
from durable_jobs.exceptions import JobTimeout, LeaseExpired
from tests.conftest import WorkerProcesses, logs_of, wait_until
from tests.testapp import tasks
from tests.testapp.models import SideEffect

pytestmark = [
    pytest.mark.subprocess,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(150),
]

START_TIMEOUT = 30.0


def finished(workers: WorkerProcesses, result: object, alive: list, timeout: float = 60) -> None:
    """Refresh ``result`` until it is SUCCESSFUL or FAILED."""

    def done() -> bool:
        result.refresh()  # type: ignore[attr-defined]
        return bool(result.is_finished)  # type: ignore[attr-defined]

    wait_until(done, workers, timeout=timeout, alive=alive, what=f"task {result.id} to finish")  # type: ignore[attr-defined]


def wait_started(workers: WorkerProcesses, proc: subprocess.Popen[bytes], markers: Path) -> None:
    """Until ``tasks.sleepy`` has touched its marker in ``markers`` (it runs, in ``proc``)."""
    wait_until(
        lambda: list(markers.glob("started-*")),
        workers,
        timeout=START_TIMEOUT,
        alive=[proc],
        what="the task to start",
    )


def stop(workers: WorkerProcesses, proc: subprocess.Popen[bytes]) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"worker did not stop\n{logs_of(workers, [proc])}") from None


def test_tasks_run_by_priority_on_their_queues_after_run_after(
    worker_processes: WorkerProcesses,
) -> None:
    low = tasks.add.using(priority=-5).enqueue(1, 1)
    high = tasks.add.using(priority=50).enqueue(2, 2)
    later_at = timezone.now() + timedelta(seconds=3)
    later = tasks.add.using(run_after=later_at).enqueue(3, 3)
    elsewhere = tasks.add.using(queue_name="webhooks").enqueue(4, 4)
    emailed = tasks.send_email.enqueue("a@example.com", subject="Hi")
    proc = worker_processes.start("--queues", "default:1,emails:1", "--name", "tasks-w1")
    for result in (low, high, later, emailed):
        finished(worker_processes, result, [proc])
    assert [r.return_value for r in (low, high, later)] == [2, 4, 6]
    assert emailed.return_value == {"to": "a@example.com", "subject": "Hi"}
    assert high.started_at < low.started_at  # one slot: the higher priority ran first
    assert later.started_at >= later_at
    for result in (low, high, later, emailed):
        assert result.status == TaskResultStatus.SUCCESSFUL
        assert result.worker_ids == ["tasks-w1"]
        assert result.errors == []
        assert result.enqueued_at <= result.started_at <= result.finished_at
    elsewhere.refresh()  # --queues: no worker serves "webhooks"
    assert elsewhere.status == TaskResultStatus.READY
    assert elsewhere.worker_ids == []
    assert stop(worker_processes, proc) == 0


def test_async_and_context_tasks_run_in_a_worker(worker_processes: WorkerProcesses) -> None:
    awaited = tasks.async_add.enqueue(20, 22)
    recorded = tasks.record.enqueue(label="ctx")
    proc = worker_processes.start("--queues", "default:2", "--name", "tasks-w2")
    finished(worker_processes, awaited, [proc])
    finished(worker_processes, recorded, [proc])
    assert awaited.return_value == 42
    assert recorded.return_value == {"attempt": 1, "status": "RUNNING", "workers": ["tasks-w2"]}
    assert stop(worker_processes, proc) == 0


def test_a_failing_task_retries_with_backoff_then_fails(
    worker_processes: WorkerProcesses,
) -> None:
    failing = tasks.always_fails.enqueue()  # OPTIONS: max_retries 2, backoff [0]
    flaky = tasks.flaky.enqueue(fail_times=2)
    proc = worker_processes.start("--queues", "default:2", "--name", "tasks-w3")
    finished(worker_processes, failing, [proc])
    finished(worker_processes, flaky, [proc])
    assert failing.status == TaskResultStatus.FAILED
    assert failing.worker_ids == ["tasks-w3"] * 3
    assert [e.exception_class for e in failing.errors] == [ValueError] * 3
    assert all("ValueError: cannot process" in e.traceback for e in failing.errors)
    assert flaky.status == TaskResultStatus.SUCCESSFUL
    assert flaky.attempts == 3
    assert [e.exception_class for e in flaky.errors] == [RuntimeError, RuntimeError]
    assert stop(worker_processes, proc) == 0


def test_a_timeout_and_system_exit_fail_the_task_and_the_worker_goes_on(
    worker_processes: WorkerProcesses,
) -> None:
    strict = task_backends["strict"]  # OPTIONS: timeout 1, max_retries 0
    slow = tasks.sleepy.using(backend="strict").enqueue(seconds=30)
    exiting = tasks.exits.using(backend="strict").enqueue()
    proc = worker_processes.start("--queues", "default:2")
    finished(worker_processes, slow, [proc])
    finished(worker_processes, exiting, [proc])
    (timeout,) = slow.errors
    assert timeout.exception_class is JobTimeout
    assert "timeout of 1s" in timeout.traceback
    assert strict.get_result(exiting.id).errors[0].exception_class is SystemExit
    after = tasks.add.enqueue(1, 2)
    finished(worker_processes, after, [proc])
    assert after.return_value == 3
    assert stop(worker_processes, proc) == 0


def test_a_task_of_a_killed_worker_is_rescued_not_left_running(
    worker_processes: WorkerProcesses, tmp_path: Path
) -> None:
    result = tasks.sleepy.enqueue(seconds=4, marker_dir=str(tmp_path))
    doomed = worker_processes.start(
        "--queues", "default:1", "--lease-seconds", "2", "--name", "doomed"
    )
    wait_started(worker_processes, doomed, tmp_path)
    result.refresh()
    assert result.status == TaskResultStatus.RUNNING
    assert result.worker_ids == ["doomed"]
    doomed.send_signal(signal.SIGKILL)
    assert doomed.wait(timeout=10) == -signal.SIGKILL
    rescuer = worker_processes.start(
        "--queues", "default:1", "--lease-seconds", "2", "--name", "rescuer"
    )
    finished(worker_processes, result, [rescuer])
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.worker_ids == ["doomed", "rescuer"]
    (lost,) = result.errors
    assert lost.exception_class is LeaseExpired
    assert lost.traceback
    assert stop(worker_processes, rescuer) == 0


def test_sigterm_hands_a_running_task_back_ready(
    worker_processes: WorkerProcesses, tmp_path: Path
) -> None:
    result = tasks.sleepy.enqueue(seconds=60, marker_dir=str(tmp_path))
    proc = worker_processes.start("--queues", "default:1", "--shutdown-grace", "1")
    wait_started(worker_processes, proc, tmp_path)
    assert stop(worker_processes, proc) == 0
    result.refresh()
    assert result.status == TaskResultStatus.READY
    # A handed-back attempt does not count: none is listed.
    assert result.worker_ids == []
    assert result.errors == []


def test_signals_fire_in_order_from_the_worker_process(
    worker_processes: WorkerProcesses, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DURABLE_JOBS_TEST_TASK_SIGNALS", "1")
    flaky = tasks.flaky.enqueue(fail_times=1)
    failing = tasks.always_fails.using(backend="other").enqueue()  # max_retries 0
    proc = worker_processes.start("--queues", "default:1", "--name", "signals")
    finished(worker_processes, flaky, [proc])
    finished(worker_processes, failing, [proc])

    def sent(result: object) -> list[tuple[int, str]]:
        rows = SideEffect.objects.filter(job_id=int(result.id)).order_by("id")  # type: ignore[attr-defined]
        return list(rows.values_list("attempt", "label"))

    # Nothing for the retried attempt's end: only READY could be sent, never FAILED.
    assert sent(flaky) == [
        (1, "started:RUNNING:signals:"),
        (2, "started:RUNNING:signals:"),
        (2, "finished:SUCCESSFUL:signals:"),
    ]
    # On failure, from inside the except block: sys.exc_info() holds the error.
    assert sent(failing) == [
        (1, "started:RUNNING:signals:"),
        (1, "finished:FAILED:signals:ValueError"),
    ]
    assert stop(worker_processes, proc) == 0
