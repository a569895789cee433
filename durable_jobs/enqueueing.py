"""Writing new jobs, one or many: transactional, idempotent, waking workers only on commit.

The public ways in are ``.delay()``, :func:`durable_jobs.enqueue` and
:func:`durable_jobs.enqueue_many` (:mod:`durable_jobs.handlers`), which check the
arguments first.
"""

from __future__ import annotations

import contextlib
import datetime
import itertools
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar

from django.db import DatabaseError, transaction
from django.utils import timezone

from durable_jobs import hooks, signals, validate, wakeup
from durable_jobs.conf import get_settings
from durable_jobs.db import engine_for
from durable_jobs.db.engine import Engine
from durable_jobs.db.rows import instance_maker, mark_saved, new_instance
from durable_jobs.exceptions import EnqueueError
from durable_jobs.lifecycle.states import State
from durable_jobs.logging import log_event
from durable_jobs.models import Job
from durable_jobs.payload import check_json
from durable_jobs.redaction import redact
from durable_jobs.wakeup import wake_local_workers

if TYPE_CHECKING:
    from durable_jobs.handlers import EnqueueOptions, JobHandler, PreparedJob

logger = logging.getLogger("durable_jobs")

T = TypeVar("T")
#: Times an enqueue rolled back by a deadlock runs again before the error is the caller's.
RERUNS = 5


def build_job(
    handler: JobHandler,
    payload: dict[str, Any],
    options: EnqueueOptions,
    *,
    now: datetime.datetime | None = None,
) -> Job:
    """An unsaved ``Job`` row for ``handler`` with ``payload`` and ``options`` applied."""
    now = now or timezone.now()
    fields = _fields_from_options(handler, options, now)
    return new_instance(Job, **_values_for(handler, payload, options, fields, now))


def build_jobs(prepared: Sequence[PreparedJob], now: datetime.datetime) -> list[Job]:
    """:func:`build_job` for each prepared job; what comes of the options alone (checked
    and validated) is worked out once for each run of jobs sharing a handler and options,
    as a list of ``handler.prepare(...)`` calls has."""
    jobs: list[Job] = []
    make: Callable[[dict[str, Any]], Job] | None = None
    last: tuple[Any, Any, dict[str, Any]] | None = None
    for p in prepared:
        if (
            last is None
            or last[0] is not p.handler
            or (last[1] is not p.options and last[1] != p.options)
        ):
            last = (p.handler, p.options, _fields_from_options(p.handler, p.options, now))
        values = _values_for(p.handler, p.payload, p.options, last[2], now)
        if make is None:  # every job's values name the same fields
            make = instance_maker(Job, values)
        jobs.append(make(values))
    return jobs


def _fields_from_options(
    handler: JobHandler, options: EnqueueOptions, now: datetime.datetime
) -> dict[str, Any]:
    """A job's fields that follow from its handler and options, checked."""
    available_at = _available_at(handler.name, now, options)
    with validate.refused_as(EnqueueError, handler.name):
        if options.idempotency_key is not None:
            validate.key(options.idempotency_key, "idempotency_key")
        queue = handler.queue if options.queue is None else validate.queue_name(options.queue)
        priority = handler.priority if options.priority is None else options.priority
        priority = validate.priority(priority)
        max_retries = options.max_retries
        if max_retries is None:
            max_retries = handler.max_retries
        if max_retries is None:
            max_retries = get_settings().default_max_retries
        max_retries = validate.retries(max_retries)
    # Stored as JSON like the payload, with the same rules (a datetime would fail the insert
    # with a bare TypeError; NUL text would abort PostgreSQL's transaction).
    if options.meta is not None and not isinstance(options.meta, Mapping):
        raise EnqueueError(
            f"{handler.name}: meta must be a dict, not {type(options.meta).__name__}"
        )
    return {
        "queue": queue,
        "name": handler.name,
        "state": State.QUEUED,
        "priority": priority,
        "max_retries": max_retries,
        "timeout": handler.timeout,
        "available_at": available_at,
        "created_at": now,
        "updated_at": now,
        "meta": check_json(f"{handler.name} meta", dict(options.meta or {})),
        "task": handler.task_fields(options),
    }


def _values_for(
    handler: JobHandler,
    payload: dict[str, Any],
    options: EnqueueOptions,
    fields: dict[str, Any],
    now: datetime.datetime,
) -> dict[str, Any]:
    """The field values of the job of ``payload``, with ``fields`` from its options (its
    own copy of ``meta``: enqueue hooks may add to one job's)."""
    key = options.idempotency_key
    unique_states = ""
    if key is None and handler.unique is not None:
        # An explicit idempotency_key wins; it holds for the job's whole life.
        arguments = handler.named_arguments(payload)
        key = handler.unique.key(
            handler.name, handler.signature, arguments, now, scope=options.unique_scope
        )
        unique_states = handler.unique.stored_states()
    concurrency_key = handler.key_for(payload)
    return {
        **fields,
        "payload": payload,
        "idempotency_key": key,
        "unique_states": unique_states,
        "concurrency_key": concurrency_key,
        "concurrency_limit": handler.concurrency_limit if concurrency_key else None,
        "meta": dict(fields["meta"]),
    }


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
    with around_insert([job]):
        for _ in range(3):
            job_id = rerun_if_rolled_back(engine, lambda: engine.insert_job(job, notify=wake))
            if job_id is not None:
                break
            existing = Job.objects.using(engine.alias).filter(idempotency_key=job.idempotency_key)
            found = existing.first()
            if found is not None:
                log_event(
                    logging.DEBUG, "duplicate enqueue", found, idempotency_key=job.idempotency_key
                )
                return found, False
            # The holder of a unique key left its unique states between our insert and
            # read, freeing the key: insert again.
        else:
            raise EnqueueError(
                f"{handler.name}: the idempotency key {job.idempotency_key!r} kept changing "
                "hands; try again"
            )
        mark_saved(job, job_id, engine.alias)  # before the hooks exit: they see its id
    signals.send(signals.job_enqueued, Job, job=job)
    if logger.isEnabledFor(logging.INFO):
        log_event(logging.INFO, "enqueued", job, payload=redact(job.payload))
    if wake:
        # Runs at once outside a transaction; after COMMIT inside one; never on rollback.
        transaction.on_commit(wake_local_workers, using=engine.alias)
        wakeup.mark_woken(connection, job.queue)
    return job, True


def _insert_all(
    engine: Engine, jobs: list[Job], now: datetime.datetime
) -> tuple[list[int | None], dict[str | None, Job], list[str]]:
    """In one transaction: insert ``jobs``, read the jobs holding the keys they found
    taken, and notify the workers of their queues; the new ids, the holders by key and
    the queues notified."""
    with transaction.atomic(using=engine.alias):
        ids = engine.insert_jobs(jobs)
        for job, pk in zip(jobs, ids, strict=True):
            if pk is not None:
                mark_saved(job, pk, engine.alias)  # before the hooks exit: they see the ids
        missing = {j.idempotency_key for j, pk in zip(jobs, ids, strict=True) if pk is None}
        existing = (
            {
                j.idempotency_key: j
                for j in Job.objects.using(engine.alias).filter(idempotency_key__in=missing)
            }
            if missing
            else {}
        )
        inserted = (j for j, pk in zip(jobs, ids, strict=True) if pk)
        available = {j.queue for j in inserted if j.available_at <= now}
        connection = engine.connection
        queues = sorted(q for q in available if not wakeup.already_woken(connection, q))
        if queues:
            engine.notify(queues)
    return ids, existing, queues


def rerun_if_rolled_back(engine: Engine, attempt: Callable[[], T]) -> T:
    """Run ``attempt`` (a statement in autocommit, or a transaction of its own) again when
    the database rolled it back to break a deadlock or a lock wait: MySQL's InnoDB does
    so when concurrent enqueues wait on each other's idempotency keys. Inside the
    caller's transaction the error is the caller's: InnoDB has rolled all of it back."""
    for rerun in itertools.count():
        try:
            return attempt()
        except DatabaseError as exc:
            if engine.connection.in_atomic_block or rerun >= RERUNS:
                raise
            if not engine.is_transient(exc):
                raise
            logger.info("the database rolled back an enqueue (%s); running it again", exc)
    raise AssertionError("unreachable")


def around_insert(jobs: list[Job]) -> AbstractContextManager[Any]:
    """The integrations' enqueue hooks (:mod:`durable_jobs.hooks`) around one insert."""
    return _hooked(jobs) if hooks.enqueue_hooks else contextlib.nullcontext()


@contextlib.contextmanager
def _hooked(jobs: list[Job]) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        for hook in list(hooks.enqueue_hooks):
            stack.enter_context(hook(jobs))
        yield


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


def insert_many(
    prepared: list[PreparedJob],
    *,
    using: str | None = None,
    batch_id: int | None = None,
) -> tuple[list[Job], int]:
    """``(jobs, created)``: insert many prepared jobs in a few statements and one
    transaction (or the caller's), optionally tagging new jobs with a batch.

    Idempotency keys and ``unique`` are honoured: where a key is already taken (or
    repeats within the list), the existing job takes that place and nothing new is
    created. Workers are woken once.
    """
    engine = engine_for(using)
    now = timezone.now()
    jobs = build_jobs(prepared, now)
    for job in jobs:
        job.batch_id = batch_id
    with around_insert(jobs):
        ids, existing, queues = rerun_if_rolled_back(engine, lambda: _insert_all(engine, jobs, now))
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
        signals.send(signals.job_enqueued, Job, job=job)
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
