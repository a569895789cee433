"""Bad handlers against real workers: a worker thread in this process, and ``runworker``.

Each handler below raises what could end a thread or a process (SystemExit,
KeyboardInterrupt, a BaseException subclass, RecursionError, an exception whose
``__str__`` fails, text no database driver can encode). The job must be recorded as
failed (here: dead, as each has ``max_retries=0``) with its error, and the worker must go
on running other jobs in the same single slot. The data must be committed for the
worker to see it: hence ``transaction=True``.
"""

from __future__ import annotations

import signal
import time
from typing import Any

import pytest

from durable_jobs.models import Attempt, Job
from tests.conftest import WorkerProcesses, wait_for, wait_until
from tests.testapp import jobs

pytestmark = pytest.mark.django_db(transaction=True)

#: kind of tests.bad_input.raises -> (error class recorded, text in the error message)
RAISED = {
    "system_exit": ("builtins.SystemExit", "SystemExit: 3"),
    "keyboard_interrupt": ("builtins.KeyboardInterrupt", "KeyboardInterrupt"),
    "base_exception": ("tests.testapp.jobs._BadInputBoom", "a BaseException that is not"),
    "memory": ("builtins.MemoryError", "simulated: the allocation failed"),
    "unprintable": ("tests.testapp.jobs._UnprintableError", "<str() of the exception failed"),
    "surrogate": ("builtins.ValueError", "cannot open caf\\udce9.txt"),
    "nul": ("builtins.ValueError", "bad byte \\x00 in input"),
    "snooze_forever": ("builtins.ValueError", "Snooze(seconds) needs a number of seconds"),
}

FINISHED = ("completed", "dead", "cancelled")


def finished(ids: list[int]) -> bool:
    return Job.objects.filter(pk__in=ids, state__in=FINISHED).count() == len(ids)


def assert_recorded(job_id: int, error_class: str, message: str) -> None:
    job = Job.objects.get(pk=job_id)
    attempt = Attempt.objects.get(job_id=job_id)  # exactly one: not lost, not run twice
    assert job.state == "dead", (job.state, job.last_error)
    assert (attempt.outcome, attempt.error_class) == ("failed", error_class)
    assert message in attempt.error_message
    assert (job.lease_expires_at, job.leased_by_id) == (None, None)  # nothing left leased


def test_one_worker_slot_survives_every_bad_handler(durable_worker: Any) -> None:
    bad = {kind: jobs.bad_input_raises.delay(kind=kind).pk for kind in RAISED}
    recursing = jobs.bad_input_recurse.delay().pk
    logs_surrogate = jobs.bad_input_logs_surrogate.delay().pk
    deep_result = jobs.bad_input_returns.delay(kind="deep").pk
    good = jobs.add.delay(a=1).pk
    ids = [*bad.values(), recursing, logs_surrogate, deep_result, good]

    # One slot: had any of them ended the pool thread or the loop, nothing after it ran.
    worker = durable_worker("default:1", poll_interval=0.05)
    wait_for(lambda: finished(ids), timeout=30)

    for kind, pk in bad.items():
        assert_recorded(pk, *RAISED[kind])
    assert_recorded(recursing, "builtins.RecursionError", "maximum recursion depth exceeded")
    logged = Job.objects.get(pk=logs_surrogate)
    assert (logged.state, logged.result) == ("completed", "done")
    assert "file caf\\udce9" in Attempt.objects.get(job_id=logs_surrogate).log
    deep = Job.objects.get(pk=deep_result)
    assert deep.state == "completed"
    assert deep.result == {"repr": "<list that could not be shown: RecursionError>"}
    assert Job.objects.get(pk=good).result == 1
    assert worker.failure is None
    after = jobs.add.delay(a=2).pk  # and it still takes new work
    wait_for(lambda: Job.objects.get(pk=after).state == "completed", timeout=10)


@pytest.mark.subprocess
@pytest.mark.timeout(120)
def test_runworker_records_recursion_and_exits_as_failures_and_keeps_running(
    worker_processes: WorkerProcesses,
) -> None:
    recursing = jobs.bad_input_recurse.delay().pk
    exits = jobs.bad_input_raises.delay(kind="system_exit").pk
    interrupts = jobs.bad_input_raises.delay(kind="keyboard_interrupt").pk
    boom = jobs.bad_input_raises.delay(kind="base_exception").pk
    good = jobs.add.delay(a=1).pk
    ids = [recursing, exits, interrupts, boom, good]

    proc = worker_processes.start("--queues", "default:1", "--no-scheduler")
    wait_until(
        lambda: finished(ids),
        worker_processes,
        timeout=60,
        alive=[proc],  # fails at once, with the log, if the process exits
        what="every job finished",
    )
    assert_recorded(recursing, "builtins.RecursionError", "maximum recursion depth exceeded")
    assert_recorded(exits, *RAISED["system_exit"])
    assert_recorded(interrupts, *RAISED["keyboard_interrupt"])
    assert_recorded(boom, *RAISED["base_exception"])
    assert Job.objects.get(pk=good).result == 1

    # Still running, and still working: SystemExit in a handler did not exit the process.
    time.sleep(0.5)
    assert proc.poll() is None, worker_processes.log(proc)
    after = jobs.add.delay(a=2).pk
    wait_until(
        lambda: Job.objects.get(pk=after).state == "completed",
        worker_processes,
        timeout=30,
        alive=[proc],
        what="a job enqueued after the bad ones",
    )
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0, worker_processes.log(proc)
