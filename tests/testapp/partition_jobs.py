"""Handlers for the fault tests: network partition, SQLite contention, the scheduler."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from durable_jobs import JobContext, job
from tests.testapp.models import SideEffect


@job(name="tests.partition.slow", takes_context=True, max_retries=3, backoff=[0])
def partition_slow(
    context: JobContext, first_seconds: float, marker_dir: str, retry_seconds: float = 0.1
) -> dict[str, Any]:
    """Slow on its first attempt (the one the partition overtakes), quick on retries.

    Touches ``started-<job>-<attempt>-<pid>`` and ``finished-<job>-<attempt>-<pid>`` in
    ``marker_dir`` (files, not rows: a partitioned worker cannot write rows), and returns
    who ran it, so the test can tell whose result the job kept. No backoff: a rescued
    job is retried at once.
    """
    pid = os.getpid()
    Path(marker_dir, f"started-{context.job.pk}-{context.attempt}-{pid}").touch()
    time.sleep(first_seconds if context.attempt == 1 else retry_seconds)
    Path(marker_dir, f"finished-{context.job.pk}-{context.attempt}-{pid}").touch()
    return {"pid": pid, "attempt": context.attempt}


@job(name="tests.contention.record", takes_context=True, backoff=[0.2])
def contention_record(context: JobContext, process: int, n: int) -> int:
    """One SideEffect row per run: another writer for SQLite's single write lock."""
    SideEffect.objects.create(
        job_id=context.job.pk, attempt=context.attempt, label=f"p{process}:{n}"
    )
    return n


@job(name="tests.chaos.occurrence")
def chaos_occurrence() -> None:
    """What the chaos schedules enqueue; the scheduler test never runs it."""
