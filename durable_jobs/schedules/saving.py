"""Writing a schedule's definition to its row, keeping the state the row already has.

Used by :class:`~durable_jobs.schedules.scheduler.Scheduler` and by the sync of
``DURABLE_JOBS["SCHEDULES"]`` (:mod:`durable_jobs.schedules.sync`).
"""

from __future__ import annotations

import datetime

from django.db import IntegrityError, transaction

from durable_jobs.db import engine_for
from durable_jobs.models import Schedule
from durable_jobs.schedules.definitions import ScheduleSpec
from durable_jobs.schedules.expressions import Once


def save_spec(
    spec: ScheduleSpec, *, now: datetime.datetime, using: str, declared_in_settings: bool = False
) -> Schedule:
    """Create the schedule ``spec`` describes, or redefine it (keeping ``created_at``, its
    counters and, unless the expression or timezone changed, ``next_run_at``)."""
    fields = {
        "expression": str(spec.expression),
        "timezone": spec.timezone,
        "queue": spec.queue,
        "name": spec.name,
        "payload": spec.payload,
        "priority": spec.priority,
        "max_consecutive_fails": spec.max_consecutive_fails,
        "catch_up": spec.catch_up,
        "catch_up_limit": spec.catch_up_limit,
        "metadata": spec.metadata,
        "declared_in_settings": declared_in_settings,
    }
    engine = engine_for(using)
    with engine.write_transaction():
        # Locked, and saved field by field below: a heartbeat advancing this schedule
        # at the same time must not have its next_run_at or counters written back.
        existing = Schedule.objects.using(using).select_for_update().filter(pk=spec.id).first()
        if existing is None:
            try:
                # A savepoint: another node may create the same id at the same moment
                # (workers starting together all sync the declared schedules).
                with transaction.atomic(using=using):
                    return Schedule.objects.using(using).create(
                        id=spec.id,
                        enabled=spec.enabled,
                        next_run_at=spec.first_run_at(now) if spec.enabled else None,
                        created_at=now,
                        updated_at=now,
                        **fields,
                    )
            except IntegrityError:
                existing = Schedule.objects.using(using).select_for_update().get(pk=spec.id)
        timing_changed = (
            existing.expression != fields["expression"] or existing.timezone != spec.timezone
        )
        for key, value in fields.items():
            setattr(existing, key, value)
        changed = [*fields, "updated_at"]
        if not spec.enabled:
            existing.enabled = False
            changed.append("enabled")
        elif timing_changed and isinstance(spec.expression, Once):
            # A one-off given a new time is armed again, even if it already ran.
            existing.enabled = True
            changed.append("enabled")
        if timing_changed or (existing.enabled and existing.next_run_at is None):
            existing.next_run_at = spec.first_run_at(now)
            existing.retry_at = None
            changed += ["next_run_at", "retry_at"]
        existing.updated_at = now
        existing.save(using=using, update_fields=changed)
        return existing
