"""The process executor: jobs of an ``"executor": "process"`` queue run in pooled children.

Real child processes (``spawn``), real signals, a real worker loop (in a thread, or a
``runworker`` subprocess), on the test database; handlers record the pid they ran in
(``SideEffect.label``). Every wait is bounded.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.connection import wait
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from durable_jobs.conf import get_settings
from durable_jobs.models import Attempt, Job, Outcome
from durable_jobs.states import State
from durable_jobs.validate import parse_size
from durable_jobs.worker import Worker
from durable_jobs.worker.executors import Executors, database_names
from durable_jobs.worker.process_pool import KILL_GRACE, ChildProcess
from tests.conftest import WorkerProcesses, logs_of, wait_until
from tests.testapp import jobs
from tests.testapp.models import SideEffect

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

#: A child's start (Python, then Django's setup) on a loaded 2-core machine, at most.
START_BOUND = 30.0


def queues(**processes: Any) -> dict[str, Any]:
    return {
        "default": {"concurrency": 2},
        "processes": {"concurrency": 1, "executor": "process", **processes},
    }


@contextmanager
def process_worker(concurrency: int = 1, **options: Any) -> Iterator[Worker]:
    """A worker (on a thread of this process) serving the process queue "processes"."""
    settings = {
        "QUEUES": queues(concurrency=concurrency, **options),
        "LEASE_SECONDS": 30,
        "POLL_INTERVAL": 0.1,
        "SHUTDOWN_GRACE_SECONDS": 2,
    }
    with override_settings(DURABLE_JOBS=settings):
        worker = Worker({"processes": concurrency}, scheduler=False, shutdown_grace=2)
        thread = worker.start()
        try:
            yield worker
        finally:
            worker.stop()
            thread.join(30)
            assert not thread.is_alive(), "the worker did not stop"


def wait_for(predicate: Any, timeout: float = 60.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"not within {timeout}s: {what or predicate}")


def final(job_id: int) -> Job | None:
    job = Job.objects.get(pk=job_id)
    return job if job.state in (State.COMPLETED, State.DEAD, State.CANCELLED) else None


def pids(job_ids: list[int]) -> list[int]:
    """The pid each job's (first) run recorded, in the jobs' order."""
    by_job = {e.job_id: int(e.label) for e in SideEffect.objects.filter(job_id__in=job_ids)}
    return [by_job[i] for i in job_ids]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def attempts(job_id: int) -> list[Attempt]:
    return list(Attempt.objects.filter(job_id=job_id).order_by("number"))


# -- running in children ---------------------------------------------------------------------


def test_jobs_run_in_children_with_their_results_logs_progress_and_async() -> None:
    context_id = jobs.proc_context.using(queue="processes").delay().pk
    async_id = jobs.proc_async.using(queue="processes").delay(x=21).pk
    raises_id = jobs.proc_raises.using(queue="processes").delay().pk
    with process_worker():
        for job_id in (context_id, async_id, raises_id):
            wait_for(lambda job_id=job_id: final(job_id), what=f"job {job_id} final")
    context_job = Job.objects.get(pk=context_id)
    assert context_job.state == State.COMPLETED
    assert context_job.result["held"] is True  # heartbeat() renewed the lease, through the worker
    assert context_job.result["pid"] != os.getpid()
    (attempt,) = attempts(context_id)
    assert f"running in pid {context_job.result['pid']}" in attempt.log
    async_job = Job.objects.get(pk=async_id)
    assert async_job.result["x"] == 42
    assert async_job.result["pid"] != os.getpid()
    assert "async in pid" in attempts(async_id)[0].log
    failed = attempts(raises_id)[0]
    assert failed.outcome == Outcome.FAILED
    assert failed.error_class == "builtins.ValueError"
    assert "the handler failed in its child\ncaused by: KeyError: 'inner'" in failed.error_message
    assert 'raise KeyError("inner")' in failed.traceback  # the child's own traceback


def test_the_worker_claims_only_once_its_children_are_ready() -> None:
    """A job claimed before its child had Django set up would wait leased, its lease
    running, for the whole start."""
    with process_worker(concurrency=2) as worker:
        wait_for(lambda: worker.pool is not None, START_BOUND, "the worker's pools")
        assert worker.pool is not None
        (pool,) = worker.pool.pools()
        children = [slot.child for slot in pool.slots]  # type: ignore[attr-defined]
        assert len(children) == 2
        assert all(child is not None and child.ready for child in children)


def test_progress_reaches_the_worker_while_the_job_runs() -> None:
    job_id = (
        jobs.proc_hang.using(queue="processes").delay(seconds=3).pk
    )  # timeout 1: killed, then retried and done
    progress_id = jobs.proc_context.using(queue="processes").delay().pk
    with process_worker(concurrency=2):
        wait_for(lambda: final(progress_id), what="the context job final")
    # progress(40) was written by the worker while the child ran; completion made it 100.
    assert Job.objects.get(pk=progress_id).progress == 100.0
    assert attempts(job_id)[0].outcome == Outcome.TIMED_OUT


def test_a_handler_blocked_in_c_is_killed_at_its_timeout_and_its_slot_serves_the_next_job() -> None:
    hang_id = jobs.proc_hang.using(queue="processes").delay().pk  # time.sleep(3600), timeout=1
    next_ids = [jobs.proc_pid.using(queue="processes").delay(n=i).pk for i in range(2)]
    with process_worker(concurrency=1):
        wait_for(lambda: final(hang_id), timeout=90, what="the hanging job retried and done")
        for job_id in next_ids:
            wait_for(lambda job_id=job_id: final(job_id), what=f"job {job_id} final")
    first, second = attempts(hang_id)
    assert first.outcome == Outcome.TIMED_OUT
    assert first.error_class == "durable_jobs.exceptions.JobTimeout"
    # Recorded at its deadline, whatever the handler was blocked in.
    assert first.duration < datetime.timedelta(seconds=1 + 5)
    hung_pid = SideEffect.objects.get(job_id=hang_id, attempt=1).label
    assert not alive(int(hung_pid)), "the timed-out child was killed"
    assert second.outcome == Outcome.COMPLETED
    # The one slot was free again after the kill grace and a new child's start.
    deadline = first.started_at + datetime.timedelta(seconds=1)
    started_next = min(a.started_at for i in next_ids for a in attempts(i))
    assert started_next - deadline < datetime.timedelta(seconds=KILL_GRACE + START_BOUND)
    assert all(str(p) != hung_pid for p in pids(next_ids))


def test_on_a_thread_queue_the_timeout_is_recorded_but_the_slot_waits_for_the_call() -> None:
    """The documented limit of threads: the outcome at the deadline, the slot at the return."""
    thread_queues = {"processes": {"concurrency": 1}}  # the same handlers, on threads
    settings = {"QUEUES": thread_queues, "POLL_INTERVAL": 0.1}
    with override_settings(DURABLE_JOBS=settings):
        hang_id = jobs.proc_hang.using(queue="processes").delay(seconds=4).pk
        next_id = jobs.proc_pid.using(queue="processes").delay().pk
        worker = Worker({"processes": 1}, scheduler=False, shutdown_grace=1)
        worker.start()
        try:
            wait_for(lambda: final(next_id), what="the next job done")
        finally:
            worker.stop()
    first = attempts(hang_id)[0]
    assert first.outcome == Outcome.TIMED_OUT
    assert first.duration < datetime.timedelta(seconds=3)
    # The thread stayed in time.sleep(4): the next job could only start after it returned.
    next_start = attempts(next_id)[0].started_at
    assert next_start - first.started_at >= datetime.timedelta(seconds=3.9)
    assert int(SideEffect.objects.get(job_id=next_id).label) == os.getpid()


def test_max_jobs_per_child_gives_a_new_child_every_three_jobs() -> None:
    ids = [jobs.proc_pid.using(queue="processes").delay(n=i).pk for i in range(9)]
    with process_worker(concurrency=1, max_jobs_per_child=3):
        for job_id in ids:
            wait_for(lambda job_id=job_id: final(job_id), what=f"job {job_id} final")
    seen = pids(ids)
    assert seen[0:3] == [seen[0]] * 3
    assert seen[3:6] == [seen[3]] * 3
    assert seen[6:9] == [seen[6]] * 3
    assert len({seen[0], seen[3], seen[6]}) == 3
    assert os.getpid() not in seen
    assert not any(alive(pid) for pid in {seen[0], seen[3]}), "recycled children exited"


def test_a_child_that_exits_fails_only_its_own_attempt() -> None:
    exit_id = jobs.proc_exit.using(queue="processes").delay(status=3).pk
    other_ids = [jobs.proc_pid.using(queue="processes").delay(n=i).pk for i in range(4)]
    with process_worker(concurrency=2):
        for job_id in [exit_id, *other_ids]:
            wait_for(lambda job_id=job_id: final(job_id), what=f"job {job_id} final")
    (attempt,) = attempts(exit_id)
    assert attempt.outcome == Outcome.FAILED
    assert attempt.error_class == "durable_jobs.exceptions.ProcessExited"
    assert "exited with status 3" in attempt.error_message
    assert Job.objects.get(pk=exit_id).state == State.DEAD  # max_retries=0
    assert [Job.objects.get(pk=i).state for i in other_ids] == [State.COMPLETED] * 4
    assert all(len(attempts(i)) == 1 for i in other_ids)


def test_a_child_killed_from_outside_is_recorded_with_the_signal() -> None:
    hang_id = jobs.proc_hang.using(queue="processes").delay(seconds=3600).pk
    with override_settings(DURABLE_JOBS={"QUEUES": queues(), "POLL_INTERVAL": 0.1}):
        # No timeout here: the kill comes first, as the OOM killer's would.
        Job.objects.filter(pk=hang_id).update(timeout=None)
        worker = Worker({"processes": 1}, scheduler=False, shutdown_grace=1)
        worker.start()
        try:
            effect = wait_for(
                lambda: SideEffect.objects.filter(job_id=hang_id).first(), what="the job started"
            )
            os.kill(int(effect.label), signal.SIGKILL)
            wait_for(lambda: len(attempts(hang_id)) == 2, what="the retry")
        finally:
            worker.stop()
    first = attempts(hang_id)[0]
    assert first.outcome == Outcome.FAILED
    assert "was killed by SIGKILL" in first.error_message
    assert "out-of-memory" in first.error_message


def test_a_child_killed_while_idle_is_replaced_for_the_next_job() -> None:
    with process_worker(concurrency=1) as worker:
        (slot,) = _process_slots(worker)
        wait_for(lambda: slot.child is not None and slot.child.ready, what="a ready child")
        idle = slot.child
        idle_pid = idle.pid
        os.kill(idle_pid, signal.SIGKILL)
        wait_for(lambda: wholly_gone(idle), timeout=10, what="the child dead")
        job_id = jobs.proc_pid.using(queue="processes").delay().pk
        wait_for(lambda: final(job_id), what="the job done")
    (attempt,) = attempts(job_id)
    assert attempt.outcome == Outcome.COMPLETED
    assert pids([job_id]) != [idle_pid]


def wholly_gone(child: ChildProcess) -> bool:
    """Every thread of it has exited, and so its end of the pipe is closed.

    Not "its /proc state is Z": a killed process's main thread can be a zombie while
    its other threads (the child's parent watch) still hold its files open, and a job
    sent then is taken by the dying child rather than refused.
    """
    return bool(wait([child.process.sentinel], 0))


def test_a_child_past_max_memory_is_replaced_after_its_job() -> None:
    ids = [
        jobs.proc_allocate.using(queue="processes").delay(megabytes=0).pk,
        jobs.proc_allocate.using(queue="processes")
        .delay(megabytes=300)
        .pk,  # well past the 250 MB below
        jobs.proc_allocate.using(queue="processes").delay(megabytes=0).pk,
    ]
    with process_worker(concurrency=1, max_memory_per_child="250MB"):
        for job_id in ids:
            wait_for(lambda job_id=job_id: final(job_id), what=f"job {job_id} final")
    first, big, after = pids(ids)
    assert first == big, "a child under the limit is kept"
    assert after != big, "the child past the limit was replaced after its job"
    assert all(Job.objects.get(pk=i).state == State.COMPLETED for i in ids)


def test_a_stopping_worker_hands_back_the_job_and_leaves_no_child() -> None:
    hang_id = jobs.proc_hang.using(queue="processes").delay(seconds=3600).pk
    Job.objects.filter(pk=hang_id).update(timeout=None)
    settings = {"QUEUES": queues(concurrency=2), "POLL_INTERVAL": 0.1}
    with override_settings(DURABLE_JOBS=settings):
        worker = Worker({"processes": 2}, scheduler=False, shutdown_grace=0.5)
        thread = worker.start()
        effect = wait_for(
            lambda: SideEffect.objects.filter(job_id=hang_id).first(), what="the job started"
        )
        slots = _process_slots(worker)
        wait_for(lambda: all(slot.child is not None for slot in slots), what="both children")
        children = [slot.child.pid for slot in slots]
        worker.stop()
        thread.join(30)
    assert not thread.is_alive()
    job = Job.objects.get(pk=hang_id)
    assert job.state == State.QUEUED
    assert attempts(hang_id)[0].outcome == Outcome.INTERRUPTED
    assert int(effect.label) in children
    assert len(children) == 2
    assert not any(alive(pid) for pid in children), "no child outlives its worker"
    assert spawned_children() == []


def spawned_children() -> list[int]:
    """Live children this process spawned to run jobs (Linux's /proc; not multiprocessing's
    resource tracker, which exits with this process)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = open(f"/proc/{entry}/stat").read()  # noqa: SIM115
            cmdline = open(f"/proc/{entry}/cmdline", "rb").read()  # noqa: SIM115
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == os.getpid() and b"spawn_main" in cmdline:
            found.append(int(entry))
    return found


def _process_slots(worker: Worker) -> list[Any]:
    assert isinstance(worker.pool, Executors)
    pool = worker.pool.by_queue["processes"]
    return list(pool.slots)  # type: ignore[attr-defined]


# -- runworker -------------------------------------------------------------------------------


@pytest.mark.subprocess
def test_runworker_sigterm_hands_back_a_job_its_child_runs(
    worker_processes: WorkerProcesses, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(
        "DURABLE_JOBS_TEST_PROCESS_QUEUE", json.dumps({"concurrency": 2, "executor": "process"})
    )
    hang_id = jobs.proc_hang.using(queue="processes").delay(seconds=3600).pk
    Job.objects.filter(pk=hang_id).update(timeout=None)
    done_id = jobs.proc_pid.using(queue="processes").delay().pk
    proc = worker_processes.start(
        "--queues", "processes", "--no-scheduler", "--shutdown-grace", "1"
    )
    effect = wait_until(
        lambda: SideEffect.objects.filter(job_id=hang_id).first(),
        worker_processes,
        timeout=60,
        alive=[proc],
        what="the hanging job started in a child",
    )
    wait_until(lambda: final(done_id), worker_processes, timeout=60, alive=[proc], what="done")
    child_pid = int(effect.label)
    assert child_pid != proc.pid
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=30)
    assert code == 0, logs_of(worker_processes, [proc])
    assert Job.objects.get(pk=hang_id).state == State.QUEUED
    assert attempts(hang_id)[0].outcome == Outcome.INTERRUPTED
    wait_for(lambda: not alive(child_pid), timeout=10, what="the child gone")


# -- settings --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"executor": "fork"}, "executor must be 'thread' or 'process'"),
        ({"max_jobs_per_child": 3}, "only apply to the process executor"),
        ({"executor": "process", "max_jobs_per_child": 0}, "max_jobs_per_child must be"),
        ({"executor": "process", "max_memory_per_child": "lots"}, "is not a size"),
    ],
)
def test_bad_executor_options_are_named(options: dict[str, Any], message: str) -> None:
    with (
        override_settings(DURABLE_JOBS={"QUEUES": {"reports": options}}),
        pytest.raises(SystemCheckError, match=re.escape(message)),
    ):
        call_command("check")


def test_executor_options_are_read() -> None:
    with override_settings(DURABLE_JOBS={"QUEUES": queues(max_memory_per_child="512MB")}):
        options = get_settings().queues["processes"]
    assert options.executor == "process"
    assert options.max_memory_per_child == 512 * 1024 * 1024
    assert parse_size("1GiB") == parse_size("1G") == 1024**3


def test_an_in_memory_database_is_refused_with_the_fix() -> None:
    from django.db import connections

    settings_dict = connections["default"].settings_dict
    if connections["default"].vendor != "sqlite":
        pytest.skip("only SQLite has in-memory databases")
    saved = settings_dict["NAME"]
    settings_dict["NAME"] = ":memory:"
    try:
        with pytest.raises(ImproperlyConfigured, match=r"in-memory SQLite database\. Use a file"):
            database_names("default")
    finally:
        settings_dict["NAME"] = saved
