"""Writing new jobs: transactional, idempotent, and waking workers only on commit."""

from __future__ import annotations

import datetime
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.utils import timezone

from durable_jobs import registry
from durable_jobs.conf import get_settings
from durable_jobs.db import backend_for
from durable_jobs.exceptions import EnqueueError
from durable_jobs.handlers import EnqueueOptions, _check_priority, _check_queue, _check_retries
from durable_jobs.logging import log_event
from durable_jobs.models import Job
from durable_jobs.redaction import redact
from durable_jobs.states import State
from durable_jobs.wakeup import wake_local_workers

if TYPE_CHECKING:
    from durable_jobs.handlers import JobHandler

logger = logging.getLogger("durable_jobs")


def enqueue(name: str, payload: Mapping[str, Any] | None = None, **options: Any) -> Job:
    """Enqueue the handler registered as ``name``.

    ``enqueue("billing.send_receipt", {"order_id": 1})``

    ``options`` are those of :meth:`JobHandler.using`.
    """
    handler = registry.get_handler(name)
    return handler.using(**options).delay(**dict(payload or {}))


def build_job(handler: JobHandler, payload: dict[str, Any], options: EnqueueOptions) -> Job:
    """An unsaved ``Job`` row for ``handler`` with ``payload`` and ``options`` applied."""
    now = timezone.now()
    available_at = _available_at(handler.name, now, options)
    key = options.idempotency_key
    if key is not None and (not isinstance(key, str) or not key or len(key) > 255):
        raise EnqueueError(f"{handler.name}: idempotency_key must be a string of 1-255 characters")
    queue = handler.queue if options.queue is None else _check_queue(options.queue, handler.name)
    priority = (
        handler.priority
        if options.priority is None
        else _check_priority(options.priority, handler.name)
    )
    max_retries = _check_retries(options.max_retries, handler.name)
    if max_retries is None:
        max_retries = handler.max_retries
    if max_retries is None:
        max_retries = get_settings().default_max_retries
    return Job(
        queue=queue,
        name=handler.name,
        payload=payload,
        idempotency_key=key,
        state=State.QUEUED,
        priority=priority,
        max_retries=max_retries,
        timeout=handler.timeout,
        available_at=available_at,
        created_at=now,
        updated_at=now,
        meta=dict(options.meta or {}),
    )


def enqueue_job(handler: JobHandler, payload: dict[str, Any], options: EnqueueOptions) -> Job:
    """Insert one job (or find the one holding its idempotency key) and return it."""
    return insert_or_get(handler, payload, options)[0]


def insert_or_get(
    handler: JobHandler,
    payload: dict[str, Any],
    options: EnqueueOptions,
    *,
    using: str | None = None,
) -> tuple[Job, bool]:
    """``(job, created)``: the new job, or the existing one holding its idempotency key."""
    job = build_job(handler, payload, options)
    backend = backend_for(using)
    available_now = job.available_at <= job.created_at
    job_id = backend.insert_job(job, notify=available_now)
    if job_id is None:
        existing = Job.objects.using(backend.alias).get(idempotency_key=job.idempotency_key)
        log_event(logging.DEBUG, "duplicate enqueue", existing, idempotency_key=job.idempotency_key)
        return existing, False
    job.pk = job_id
    job._state.adding = False
    job._state.db = backend.alias
    if logger.isEnabledFor(logging.INFO):
        log_event(logging.INFO, "enqueued", job, payload=redact(job.payload))
    if available_now:
        # Runs at once outside a transaction; after COMMIT inside one; never on rollback.
        transaction.on_commit(wake_local_workers, using=backend.alias)
    return job, True


def _available_at(name: str, now: datetime.datetime, options: EnqueueOptions) -> datetime.datetime:
    if options.run_at is not None and options.run_in is not None:
        raise EnqueueError(f"{name}: give run_at or run_in, not both")
    if options.run_at is not None:
        if not isinstance(options.run_at, datetime.datetime) or timezone.is_naive(options.run_at):
            raise EnqueueError(
                f"{name}: run_at must be an aware datetime; use "
                "django.utils.timezone.now() + timedelta(...) or datetime(..., tzinfo=...)"
            )
        return max(options.run_at, now)
    if options.run_in is not None:
        if not isinstance(options.run_in, datetime.timedelta):
            raise EnqueueError(f"{name}: run_in must be a datetime.timedelta")
        return now + max(options.run_in, datetime.timedelta(0))
    return now
