"""Outcomes a handler may raise, and the errors durable_jobs raises.

Each class's docstring is its default message.
"""

from __future__ import annotations

from durable_jobs.limits import MAX_SECONDS


class Snooze(Exception):
    """Run this job again later; the attempt is given back."""

    def __init__(self, seconds: float = 60) -> None:
        try:
            value = float(seconds)
        except (TypeError, ValueError):
            value = -1.0
        # Checked here, in the handler, so a bad value fails the attempt with this message;
        # NaN, inf or a huge number would otherwise overflow in the worker's loop.
        if not 0 <= value <= MAX_SECONDS:
            raise ValueError(
                f"Snooze(seconds) needs a number of seconds from 0 to {MAX_SECONDS:g} "
                f"(a year), not {seconds!r}"
            )
        self.seconds = value
        super().__init__(f"snoozed for {self.seconds:g}s")


class Cancel(Exception):
    """The job is no longer wanted; it moves to ``cancelled`` without retrying."""

    def __init__(self, reason: str = "cancelled by the handler") -> None:
        self.reason = reason
        super().__init__(reason)


class Discard(Exception):
    """The job can never succeed; it moves to ``dead`` at once, without retrying."""

    def __init__(self, reason: str = "discarded by the handler") -> None:
        self.reason = reason
        super().__init__(reason)


class DurableJobsError(Exception):
    """Base class of the errors durable_jobs raises."""


class EnqueueError(DurableJobsError, ValueError):
    """The job cannot be enqueued as asked; nothing was written."""


class TaskArgumentError(EnqueueError, TypeError):
    """A Task's arguments fail Django's JSON rules or do not fit its function: a
    ``TypeError``, as Django's own backends raise, and an :class:`EnqueueError`."""


class UnknownJob(DurableJobsError, LookupError):
    """No handler is registered under this name."""

    def __init__(self, name: str, message: str | None = None) -> None:
        self.name = name
        super().__init__(
            message
            or f"No job handler is registered under the name {name!r}. Decorate the function "
            "with @job in an installed app's jobs.py (or give @job(name=...) this name), "
            "and check the spelling."
        )


class PayloadMismatch(DurableJobsError, TypeError):
    """A stored payload no longer binds to its handler's signature."""


class JobTimeout(DurableJobsError, TimeoutError):
    """The job ran longer than its timeout."""


class ImproperlyConfiguredQueue(DurableJobsError):
    """A worker was asked to serve queues in a form it cannot parse."""


class LeaseExpired(DurableJobsError):
    """The attempt's lease expired before its worker reported: the worker died or hung."""


class WorkerStopped(DurableJobsError):
    """The worker stopped before the job finished; the job was handed back to the queue."""


class ProcessExited(DurableJobsError):
    """The child process running the job exited before reporting how the job ended."""
