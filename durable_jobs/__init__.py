"""Durable background jobs for Django, stored in the project's own database."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from durable_jobs.context import JobContext
from durable_jobs.exceptions import Cancel, Discard, EnqueueError, Snooze, UnknownJob
from durable_jobs.handlers import JobHandler, job

__all__ = [
    "Cancel",
    "Discard",
    "EnqueueError",
    "JobContext",
    "JobHandler",
    "Scheduler",
    "Snooze",
    "UnknownJob",
    "enqueue",
    "job",
]

__version__ = "0.1.0"


if TYPE_CHECKING:
    from durable_jobs.models import Job
    from durable_jobs.schedules.scheduler import Scheduler


def __getattr__(name: str) -> Any:
    # Scheduler imports the models, which must wait until Django's apps are ready.
    if name == "Scheduler":
        from durable_jobs.schedules.scheduler import Scheduler

        return Scheduler
    raise AttributeError(f"module 'durable_jobs' has no attribute {name!r}")


def enqueue(name: str, payload: dict[str, Any] | None = None, **options: Any) -> Job:
    """Enqueue a job by its handler's registered name::

        durable_jobs.enqueue("billing.send_receipt", {"order_id": 42}, run_in=timedelta(minutes=5))

    ``options`` are those of :meth:`JobHandler.using`. Raises :class:`UnknownJob`
    for a name no handler has.
    """
    from durable_jobs.enqueueing import enqueue as _enqueue

    return _enqueue(name, payload, **options)
