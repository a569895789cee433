"""Syncing ``DURABLE_JOBS["SCHEDULES"]`` to the Schedule table.

Settings own a declared schedule's definition (expression, timezone, job, payload,
queue, options); the table owns its runtime state (next run, counters, and whether an
operator paused it). Declared schedules that disappear from settings are deleted;
schedules created through the API or CLI are never touched.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.utils import timezone

from durable_jobs.conf import get_settings
from durable_jobs.db import engine_for
from durable_jobs.models import Schedule
from durable_jobs.schedules.definitions import spec_from_settings
from durable_jobs.schedules.saving import save_spec


@dataclass
class SyncResult:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)


def sync_schedules(*, using: str | None = None) -> SyncResult:
    """Create, update and remove declared schedules; raise on the first invalid entry."""
    declared = get_settings().schedules or {}
    specs = [spec_from_settings(key, entry) for key, entry in declared.items()]
    engine = engine_for(using)
    result = SyncResult()
    existing = set(
        Schedule.objects.using(engine.alias)
        .filter(pk__in=[s.id for s in specs])
        .values_list("pk", flat=True)
    )
    for spec in specs:
        save_spec(spec, now=timezone.now(), using=engine.alias, declared_in_settings=True)
        (result.updated if spec.id in existing else result.created).append(spec.id)
    gone = (
        Schedule.objects.using(engine.alias)
        .filter(declared_in_settings=True)
        .exclude(pk__in=[s.id for s in specs])
    )
    result.removed = sorted(gone.values_list("pk", flat=True))
    with engine.write_transaction():
        gone.delete()
    return result
