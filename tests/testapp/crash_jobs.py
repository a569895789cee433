"""Handlers for the fault tests: worker crashes, graceful deploys, database restarts.

Each run of a handler writes one :class:`~tests.testapp.models.SideEffect` row in its
own (autocommit) transaction, labelled with the node that ran it, before it returns
or raises. ``(job_id, attempt, node)`` then names one execution, and the fault tests
match every row to the :class:`~durable_jobs.models.Attempt` recorded for it (see
``tests/faults/conftest.py``): a handler's run that no attempt accounts for would be a
silent duplicate.

Retries wait a fixed fraction of a second, not the default exponential backoff
(15 s and more), so that jobs rescued after a kill finish within a test's budget.
"""

from __future__ import annotations

import os
import time

from durable_jobs import JobContext, job
from tests.testapp.models import SideEffect

#: Seconds a retry waits: short, so rescued jobs come back at once.
FAST_RETRY = [0.2]


def record_execution(context: JobContext) -> None:
    """The side effect of one execution: one committed row naming the job, the attempt
    number and the node (the name the worker also writes on the attempt)."""
    node = str((context.logger.extra or {}).get("node") or f"pid-{os.getpid()}")
    SideEffect.objects.create(job_id=context.job.pk, attempt=context.attempt, label=node)


def pause(seconds: float) -> None:
    """Sleep in small steps, so a stopping worker's interruption lands promptly."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(min(0.01, max(deadline - time.monotonic(), 0)))


# Many retries: a job may be caught by several kills in a row, and it must then still
# complete rather than end dead for reasons the test did not intend.
@job(name="faults.record", takes_context=True, max_retries=25, backoff=FAST_RETRY)
def fault_record(context: JobContext, n: int, before: float = 0.0, after: float = 0.0) -> int:
    """Works ``before`` seconds, records its side effect, then works ``after`` seconds more.

    Time spent after the side effect widens the window in which a kill lands between the
    side effect's commit and the acknowledgement: the case that yields a second run.
    """
    pause(before)
    record_execution(context)
    pause(after)
    return n


@job(name="faults.always_fails", takes_context=True, max_retries=1, backoff=FAST_RETRY)
def fault_always_fails(context: JobContext, n: int) -> None:
    """Records its side effect, then fails on purpose: two attempts, then ``dead``."""
    record_execution(context)
    raise RuntimeError(f"job {n} fails on purpose")


@job(name="faults.slow", takes_context=True, max_retries=25, backoff=FAST_RETRY)
def fault_slow(context: JobContext, n: int, seconds: float) -> int:
    """A slow job (a deploy catches some mid-run): works, then records its side effect."""
    pause(seconds)
    record_execution(context)
    return n
