"""Writing new jobs, one or many: transactional, idempotent, waking workers only on commit."""

from __future__ import annotations

import datetime
import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.utils import timezone

from durable_jobs import registry, wakeup
from durable_jobs.conf import get_settings
from durable_jobs.db import engine_for
from durable_jobs.db.rows import mark_saved, new_instance
from durable_jobs.exceptions import EnqueueError
from durable_jobs.handlers import EnqueueOptions, _check_priority, _check_queue, _check_retries
from durable_jobs.lifecycle.states import State
from durable_jobs.logging import log_event
from durable_jobs.models import Job
from durable_jobs.payload import check_json, text_problem
from durable_jobs.redaction import redact
from durable_jobs.wakeup import wake_local_workers

if TYPE_CHECKING:
    from durable_jobs.handlers import JobHandler, PreparedJob

logger = logging.getLogger("durable_jobs")

#: Job.max_retries is a PositiveIntegerField (PostgreSQL ``integer``).
MAX_RETRIES = 2**31 - 1


def enqueue(name: str, payload: Mapping[str, Any] | None = None, **options: Any) -> Job:
    """Enqueue the handler registered as ``name``.

    ``enqueue("billing.send_receipt", {"order_id": 1})``

    ``options`` are those of :meth:`JobHandler.using`.
    """
    handler = registry.get_handler(name)
    if payload is not None and not (
        isinstance(payload, Mapping) and all(isinstance(k, str) for k in payload)
    ):
        # Else dict(payload) or **payload would fail with a bare TypeError or ValueError.
        raise EnqueueError(
            f"{handler.name}: the payload must be a dict of keyword arguments with string "
            f'keys, as in enqueue("{handler.name}", {{"order_id": 1}}); '
            f"got {type(payload).__name__}"
        )
    return handler.using(**options).delay(**dict(payload or {}))


def build_job(
    handler: JobHandler,
    payload: dict[str, Any],
    options: EnqueueOptions,
    *,
    now: datetime.datetime | None = None,
) -> Job:
    """An unsaved ``Job`` row for ``handler`` with ``payload`` and ``options`` applied."""
    now = now or timezone.now()
    available_at = _available_at(handler.name, now, options)
    key = options.idempotency_key
    if key is not None and (not isinstance(key, str) or not key or len(key) > 255):
        raise EnqueueError(f"{handler.name}: idempotency_key must be a string of 1-255 characters")
    for label, text in (("idempotency_key", key), ("queue", options.queue)):
        problem = isinstance(text, str) and text_problem(text)
        if problem:
            # SQLite would store it; PostgreSQL refuses it and aborts the transaction.
            raise EnqueueError(f"{handler.name}: {label} cannot be {problem}")
    unique_states = ""
    if key is None and handler.unique is not None:
        # An explicit idempotency_key wins; it holds for the job's whole life.
        key = handler.unique.key(handler.name, handler.signature, payload, now)
        unique_states = handler.unique.stored_states()
    concurrency_key = handler.key_for(payload)
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
    if max_retries > MAX_RETRIES:
        # Past the column's range the insert fails with a bare OverflowError or DataError.
        raise EnqueueError(f"{handler.name}: max_retries can be at most {MAX_RETRIES}")
    # Stored as JSON like the payload, with the same rules (a datetime would fail the insert
    # with a bare TypeError; NUL text would abort PostgreSQL's transaction).
    if options.meta is not None and not isinstance(options.meta, Mapping):
        raise EnqueueError(
            f"{handler.name}: meta must be a dict, not {type(options.meta).__name__}"
        )
    meta = check_json(f"{handler.name} meta", dict(options.meta or {}))
    return new_instance(
        Job,
        queue=queue,
        name=handler.name,
        payload=payload,
        idempotency_key=key,
        unique_states=unique_states,
        concurrency_key=concurrency_key,
        concurrency_limit=handler.concurrency_limit if concurrency_key else None,
        state=State.QUEUED,
        priority=priority,
        max_retries=max_retries,
        timeout=handler.timeout,
        available_at=available_at,
        created_at=now,
        updated_at=now,
        meta=meta,
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
    engine = engine_for(using)
    connection = engine.connection
    # Wake-ups go with the first enqueue of the queue in a transaction, not with each.
    wake = job.available_at <= job.created_at and not wakeup.already_woken(connection, job.queue)
    for _ in range(3):
        job_id = engine.insert_job(job, notify=wake)
        if job_id is not None:
            break
        existing = Job.objects.using(engine.alias).filter(idempotency_key=job.idempotency_key)
        found = existing.first()
        if found is not None:
            log_event(
                logging.DEBUG, "duplicate enqueue", found, idempotency_key=job.idempotency_key
            )
            return found, False
        # The holder of a unique key left its unique states between our insert and read,
        # freeing the key: insert again.
    else:
        raise EnqueueError(
            f"{handler.name}: the idempotency key {job.idempotency_key!r} kept changing hands; "
            "try again"
        )
    mark_saved(job, job_id, engine.alias)
    if logger.isEnabledFor(logging.INFO):
        log_event(logging.INFO, "enqueued", job, payload=redact(job.payload))
    if wake:
        # Runs at once outside a transaction; after COMMIT inside one; never on rollback.
        transaction.on_commit(wake_local_workers, using=engine.alias)
        wakeup.mark_woken(connection, job.queue)
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


def enqueue_many(prepared: Iterable[PreparedJob], *, using: str | None = None) -> list[Job]:
    """Enqueue many prepared jobs in a few statements; return their rows, in order.

    ``durable_jobs.enqueue_many([send_receipt.prepare(order_id=i) for i in ids])``

    All or nothing, in one transaction. Idempotency keys and ``unique`` are honoured:
    where a key is already taken (or repeats within the list), the existing job is
    returned in that position and nothing new is created. Workers are woken once.
    """
    return insert_many(list(prepared), using=using)[0]


def insert_many(
    prepared: list[PreparedJob],
    *,
    using: str | None = None,
    batch_id: int | None = None,
) -> tuple[list[Job], int]:
    """``(jobs, created)``: :func:`enqueue_many`, optionally tagging new jobs with a batch."""
    from durable_jobs.handlers import PreparedJob

    for item in prepared:
        if not isinstance(item, PreparedJob):
            raise EnqueueError(
                f"enqueue_many takes prepared jobs, as in send_receipt.prepare(order_id=1); "
                f"got {type(item).__name__}"
            )
    engine = engine_for(using)
    now = timezone.now()
    jobs = [build_job(p.handler, p.payload, p.options, now=now) for p in prepared]
    for job in jobs:
        job.batch_id = batch_id
    with transaction.atomic(using=engine.alias):
        ids = engine.insert_jobs(jobs)
        missing = {j.idempotency_key for j, pk in zip(jobs, ids, strict=True) if pk is None}
        existing = (
            {
                j.idempotency_key: j
                for j in Job.objects.using(engine.alias).filter(idempotency_key__in=missing)
            }
            if missing
            else {}
        )
        queues = sorted(
            {
                j.queue
                for j, pk in zip(jobs, ids, strict=True)
                if pk
                and j.available_at <= now
                and not wakeup.already_woken(engine.connection, j.queue)
            }
        )
        if queues:
            engine.notify(queues)
    out: list[Job] = []
    created = 0
    for job, pk in zip(jobs, ids, strict=True):
        if pk is None:
            found = existing.get(job.idempotency_key)
            if found is None:
                raise EnqueueError(
                    f"{job.name}: the idempotency key {job.idempotency_key!r} was freed while "
                    "enqueuing; enqueue again"
                )
            out.append(found)
            continue
        mark_saved(job, pk, engine.alias)
        created += 1
        out.append(job)
    if logger.isEnabledFor(logging.INFO) and created:
        logger.info(
            "enqueued %s jobs (%s already existed)",
            created,
            len(jobs) - created,
            extra={"count": created, "queues": queues},
        )
    if queues:
        transaction.on_commit(wake_local_workers, using=engine.alias)
        for queue in queues:
            wakeup.mark_woken(engine.connection, queue)
    return out, created
