"""``JobContext``: what a ``takes_context=True`` handler learns about its own run."""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from django.utils import timezone
from django.utils.dateparse import parse_datetime

from durable_jobs.logging import JobLoggerAdapter

if TYPE_CHECKING:
    from durable_jobs.flow.batches import BatchSummary
    from durable_jobs.models import Job

#: ``progress()`` writes at most this often (seconds), except for 0 and 100.
PROGRESS_MIN_INTERVAL = 1.0


class LeaseWrites(Protocol):
    """Where a context's progress and lease renewals go when this process does not write
    them itself (a child of the process executor hands them to its worker)."""

    def progress(self, percent: float) -> None: ...

    def heartbeat(self) -> bool: ...


@dataclass
class JobContext:
    job: Job
    logger: JobLoggerAdapter
    lease_seconds: float = 60.0
    _last_progress_write: float = field(default=0.0, repr=False)
    #: Set by the worker when execution middleware wraps the attempt: binds the payload
    #: and calls the handler (the end of the chain).
    _invoke: Callable[[], Any] = field(default=lambda: None, repr=False, compare=False)
    #: None: written here, on this process's database connection.
    _writes: LeaseWrites | None = field(default=None, repr=False, compare=False)

    @property
    def attempt(self) -> int:
        """1 on the first attempt."""
        return self.job.attempts

    @property
    def idempotency_key(self) -> str | None:
        return self.job.idempotency_key

    @property
    def batch(self) -> BatchSummary | None:
        """For a batch's callback job: the batch's id, name, total and counts per final state."""
        from durable_jobs.flow.batches import BatchSummary

        return BatchSummary.from_meta(self.job.batch_info)

    @property
    def schedule_id(self) -> str | None:
        return self.job.schedule_info.get("id")

    @property
    def scheduled_run_at(self) -> datetime.datetime | None:
        return _parse(self.job.schedule_info.get("scheduled_run_at"))

    @property
    def run_timestamp(self) -> datetime.datetime | None:
        return _parse(self.job.schedule_info.get("run_timestamp"))

    def progress(self, percent: float) -> None:
        """Record how far the job has got (0-100). Writes are throttled to about one a second."""
        percent = max(0.0, min(100.0, float(percent)))
        self.job.progress = percent
        now = time.monotonic()
        if percent not in (0.0, 100.0) and now - self._last_progress_write < PROGRESS_MIN_INTERVAL:
            return
        self._last_progress_write = now
        if self._writes is not None:
            self._writes.progress(percent)
        else:
            write_progress(self.job, percent)

    def heartbeat(self) -> bool:
        """Extend this job's lease now. False means the lease was lost: stop work that matters."""
        if self._writes is not None:
            return self._writes.heartbeat()
        return extend_lease(self.job, self.lease_seconds)


def write_progress(job: Job, percent: float) -> None:
    """Store ``job``'s progress, while its lease holds."""
    _leased(job).update(progress=percent, updated_at=timezone.now())


def extend_lease(job: Job, lease_seconds: float) -> bool:
    """Extend ``job``'s lease by ``lease_seconds`` from now; False if the lease was lost."""
    expires = timezone.now() + datetime.timedelta(seconds=lease_seconds)
    return _leased(job).update(lease_expires_at=expires) == 1


def _leased(job: Job) -> Any:
    from durable_jobs.lifecycle.transitions import leased_under

    return leased_under([job.pk], job.lease_token, using=job._state.db)


def _parse(value: Any) -> datetime.datetime | None:
    if isinstance(value, datetime.datetime):
        return value
    if isinstance(value, str):
        return parse_datetime(value)
    return None
