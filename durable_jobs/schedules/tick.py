"""The schedule tick (the scheduler heartbeat): turn due occurrences into jobs, then move
each schedule on.

It never calls a handler. Each occurrence becomes a job with the idempotency key
``schedule:<id>:<scheduled time in UTC ISO>``: duplicate ticks (several nodes, a
restart, two at once) insert nothing the second time, because the database's unique
constraint decides. On PostgreSQL, due schedules are also locked with SKIP LOCKED so
concurrent ticks share the work instead of repeating it.
"""

from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass, field
from typing import Any

from django.db import DatabaseError, transaction
from django.db.models import Case, F, PositiveIntegerField, Q, Value, When
from django.utils import timezone

from durable_jobs import resolve
from durable_jobs.backoff import Doubling
from durable_jobs.conf import get_settings
from durable_jobs.db import engine_for
from durable_jobs.enqueueing import insert_or_get
from durable_jobs.exceptions import DurableJobsError
from durable_jobs.handlers import EnqueueOptions
from durable_jobs.models import CatchUp, Job, Schedule
from durable_jobs.schedules.expressions import Once, get_zone, parse

logger = logging.getLogger("durable_jobs.schedules")

BATCH = 100
#: Waits before a failed enqueue is tried again: 5 s, 10 s, 20 s, ... up to 5 minutes.
RETRY = Doubling(5.0, 300.0)
#: Missed occurrences examined at most per schedule and tick (a minutely cron
#: after a month of downtime is not worth walking minute by minute).
MAX_MISSED = 10_000


@dataclass
class TickResult:
    enqueued: int = 0
    duplicates: int = 0
    failed: int = 0
    schedules: int = 0
    errors: dict[str, str] = field(default_factory=dict)


def occurrence_key(schedule_id: str, scheduled: datetime.datetime) -> str:
    return f"schedule:{schedule_id}:{scheduled.astimezone(datetime.UTC).isoformat()}"


def tick(now: datetime.datetime | None = None, *, using: str | None = None) -> TickResult:
    """Enqueue every due occurrence of every enabled schedule; return what happened."""
    now = now or timezone.now()
    engine = engine_for(using)
    result = TickResult()
    due_now = Schedule.objects.using(engine.alias).filter(
        Q(retry_at__isnull=True) | Q(retry_at__lte=now), enabled=True, next_run_at__lte=now
    )
    # A plain read first: most ticks find nothing due and need no write lock
    # (on SQLite the write transaction below would block every other writer).
    if not due_now.exists():
        return result
    cursor: tuple[datetime.datetime, str] | None = None
    while True:
        with engine.write_transaction():
            due = due_now
            if cursor is not None:
                # Keyset pagination: a schedule that failed keeps its next_run_at and must
                # not be read again in this tick.
                due = due.filter(
                    Q(next_run_at__gt=cursor[0]) | Q(next_run_at=cursor[0], pk__gt=cursor[1])
                )
            if engine.connection.features.has_select_for_update_skip_locked:
                due = due.select_for_update(skip_locked=True)
            batch = list(due.order_by("next_run_at", "pk")[:BATCH])
            for schedule in batch:
                run_due(schedule, now, result, using=engine.alias)
        if len(batch) < BATCH:
            return result
        last = batch[-1]
        assert last.next_run_at is not None
        cursor = (last.next_run_at, last.pk)


def run_due(schedule: Schedule, now: datetime.datetime, result: TickResult, *, using: str) -> None:
    """Enqueue ``schedule``'s due occurrences (per its catch-up policy) and advance it."""
    result.schedules += 1
    try:
        to_enqueue, next_run_at = plan(schedule, now)
    except DurableJobsError as exc:  # the stored expression or timezone became invalid
        record_failure(schedule, exc, now=now, using=using, result=result)
        return
    created = 0
    last_job: Job | None = None
    for scheduled in to_enqueue:
        try:
            with transaction.atomic(using=using):  # a savepoint: one failure spoils nothing else
                last_job, was_created = enqueue_occurrence(schedule, scheduled, now, using=using)
        except (DurableJobsError, DatabaseError) as exc:
            record_failure(schedule, exc, now=now, using=using, result=result)
            return
        created += was_created
        result.enqueued += was_created
        result.duplicates += not was_created
    changes: dict[str, Any] = {
        "next_run_at": next_run_at,
        "last_run_at": now,
        "run_count": F("run_count") + created,
        # A success after failed enqueues ends their streak. Jobs that ended dead keep
        # theirs: only a completed job ends it (schedules.outcomes).
        "consecutive_fails": Case(
            When(last_status="failed", then=Value(0)),
            default=F("consecutive_fails"),
            output_field=PositiveIntegerField(),
        ),
        "retry_at": None,
        "last_error": "",
        "updated_at": timezone.now(),
    }
    if last_job is not None:
        changes.update(last_status="enqueued", last_job_id=last_job.pk)
    if next_run_at is None:
        changes["enabled"] = False  # a one-off that ran, or a cron with no future date
    Schedule.objects.using(using).filter(pk=schedule.pk, next_run_at=schedule.next_run_at).update(
        **changes
    )


def plan(
    schedule: Schedule, now: datetime.datetime
) -> tuple[list[datetime.datetime], datetime.datetime | None]:
    """(occurrences to enqueue now, the next occurrence after ``now``)."""
    expression = parse(schedule.expression)
    zone = get_zone(schedule.timezone)
    assert schedule.next_run_at is not None

    def walk(first: datetime.datetime) -> tuple[list[datetime.datetime], datetime.datetime | None]:
        """Occurrences from ``first`` up to ``now`` (at most MAX_MISSED), and the one after."""
        due = [first]
        following = expression.next_after(first, zone, anchor=first)
        while following is not None and following <= now and len(due) < MAX_MISSED:
            due.append(following)
            following = expression.next_after(following, zone, anchor=following)
        return due, following

    due, following = walk(schedule.next_run_at)
    if following is not None and following <= now:
        # Still behind after MAX_MISSED occurrences (a frequent schedule after a long
        # outage): walk the same span again, ending now, so "latest" stays the latest.
        restart = expression.next_after(now - (due[-1] - due[0]), zone, anchor=due[0])
        due, following = walk(restart if restart is not None and restart <= now else due[-1])
    grace = datetime.timedelta(seconds=get_settings().schedule_misfire_grace_seconds)
    on_time = [t for t in due if now - t <= grace]
    missed = [t for t in due if now - t > grace]
    if isinstance(expression, Once):
        # A one-off runs once, however late: that is its whole purpose.
        on_time, missed = due[:1], []
    if schedule.catch_up == CatchUp.ALL:
        chosen = missed[-schedule.catch_up_limit :]
    elif schedule.catch_up == CatchUp.SKIP:
        chosen = []
    else:
        chosen = missed[-1:]
    if missed:
        logger.info(
            "schedule %s missed %s occurrence(s); catch_up=%s enqueues %s",
            schedule.pk,
            len(missed),
            schedule.catch_up,
            len(chosen),
            extra={"schedule_id": schedule.pk, "missed": len(missed)},
        )
    return chosen + on_time, following


def enqueue_occurrence(
    schedule: Schedule,
    scheduled: datetime.datetime,
    now: datetime.datetime,
    *,
    using: str | None = None,
) -> tuple[Job, bool]:
    """Insert the job of one occurrence (or find it); ``(job, created)``."""
    handler = resolve.handler_named(schedule.name)
    payload = handler.check_arguments((), schedule.payload or {})
    options = EnqueueOptions(
        queue=schedule.queue,
        priority=schedule.priority,
        idempotency_key=occurrence_key(schedule.pk, scheduled),
        meta={
            "schedule": {
                "id": schedule.pk,
                "scheduled_run_at": scheduled.astimezone(datetime.UTC).isoformat(),
                "run_timestamp": now.astimezone(datetime.UTC).isoformat(),
            }
        },
    )
    return insert_or_get(handler, payload, options, using=using)


def record_failure(
    schedule: Schedule,
    error: BaseException,
    *,
    now: datetime.datetime,
    using: str,
    result: TickResult,
) -> None:
    """Count a failed enqueue; disable the schedule at ``max_consecutive_fails``.

    ``next_run_at`` is left alone: the same occurrence is tried again rather than lost,
    after a backoff (5 s, 10 s, 20 s, ... up to 5 min) so that a passing problem, such as
    a rolling deploy that brings the handler, does not use up the failures in seconds.
    """
    result.failed += 1
    message = f"{type(error).__name__}: {error}"
    result.errors[schedule.pk] = message
    fails = schedule.consecutive_fails + 1
    disable = fails >= schedule.max_consecutive_fails
    Schedule.objects.using(using).filter(pk=schedule.pk).update(
        fail_count=F("fail_count") + 1,
        consecutive_fails=fails,
        last_error=message,
        last_status="disabled" if disable else "failed",
        enabled=not disable,
        retry_at=now + datetime.timedelta(seconds=RETRY.delay(fails)),
        updated_at=timezone.now(),
    )
    log = logger.error if disable else logger.warning
    log(
        "schedule %s could not enqueue (%s/%s): %s%s",
        schedule.pk,
        fails,
        schedule.max_consecutive_fails,
        message,
        "; disabled" if disable else "",
        extra={"schedule_id": schedule.pk, "error": message},
    )
