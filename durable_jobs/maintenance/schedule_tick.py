"""Turns the due occurrences of durable schedules into jobs, in every worker.

Safe on every node at once: occurrences are deduplicated by their idempotency keys,
and on PostgreSQL concurrent ticks skip the schedules another one has locked. On its
first run it syncs ``DURABLE_JOBS["SCHEDULES"]`` to the table.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable

from django.utils import timezone

from durable_jobs.conf import get_settings
from durable_jobs.maintenance.base import MaintenanceContext
from durable_jobs.schedules.sync import sync_schedules
from durable_jobs.schedules.tick import tick


class ScheduleTick:
    name = "schedule tick"

    def __init__(
        self,
        *,
        interval: float | None = None,
        clock: Callable[[], datetime.datetime] | None = None,
    ) -> None:
        self._interval = interval
        self._clock = clock
        self.synced = False

    def interval(self, context: MaintenanceContext) -> float:
        return self._interval or get_settings().scheduler_interval

    def run(self, context: MaintenanceContext) -> None:
        if not self.synced:
            sync_schedules(using=context.alias)
            self.synced = True
        tick((self._clock or timezone.now)(), using=context.alias)
