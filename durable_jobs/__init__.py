"""Durable background jobs for Django, stored in the project's own database."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from durable_jobs.context import JobContext
from durable_jobs.exceptions import Cancel, Discard, EnqueueError, Snooze, UnknownJob
from durable_jobs.flow.unique import Unique
from durable_jobs.handlers import (
    JobHandler,
    PreparedJob,
    aenqueue,
    aenqueue_many,
    enqueue,
    enqueue_many,
    job,
)

__all__ = [
    "Batch",
    "Cancel",
    "Discard",
    "EnqueueError",
    "JobContext",
    "JobHandler",
    "PreparedJob",
    "Scheduler",
    "Snooze",
    "Unique",
    "UnknownJob",
    "aenqueue",
    "aenqueue_many",
    "enqueue",
    "enqueue_many",
    "job",
]

__version__ = "0.1.0"


if TYPE_CHECKING:
    from durable_jobs.flow.batches import Batch
    from durable_jobs.schedules.scheduler import Scheduler


def __getattr__(name: str) -> Any:
    # These import the models, which must wait until Django's apps are ready.
    if name == "Scheduler":
        from durable_jobs.schedules.scheduler import Scheduler

        return Scheduler
    if name == "Batch":
        from durable_jobs.flow.batches import Batch

        return Batch
    raise AttributeError(f"module 'durable_jobs' has no attribute {name!r}")
