"""Durable background jobs for Django, stored in the project's own database."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from durable_jobs.context import JobContext
from durable_jobs.exceptions import Cancel, Discard, EnqueueError, Snooze, UnknownJob
from durable_jobs.flow.unique import Unique
from durable_jobs.handlers import JobHandler, PreparedJob, job

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
    "enqueue",
    "enqueue_many",
    "job",
]

__version__ = "0.1.0"


if TYPE_CHECKING:
    from collections.abc import Iterable

    from durable_jobs.flow.batches import Batch
    from durable_jobs.models import Job
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


def enqueue(name: str, payload: dict[str, Any] | None = None, **options: Any) -> Job:
    """Enqueue a job by its handler's registered name::

        durable_jobs.enqueue("billing.send_receipt", {"order_id": 42}, run_in=timedelta(minutes=5))

    ``options`` are those of :meth:`JobHandler.using`. Raises :class:`UnknownJob`
    for a name no handler has.
    """
    from durable_jobs.enqueueing import enqueue as _enqueue

    return _enqueue(name, payload, **options)


def enqueue_many(jobs: Iterable[PreparedJob], *, using: str | None = None) -> list[Job]:
    """Enqueue many prepared jobs in a few statements and one transaction::

        durable_jobs.enqueue_many([send_receipt.prepare(order_id=i) for i in order_ids])

    Returns the rows in the same order. Where an idempotency key (or ``unique``) is
    already taken, the existing job takes that place. Workers are woken once.
    """
    from durable_jobs.enqueueing import enqueue_many as _enqueue_many

    return _enqueue_many(jobs, using=using)
