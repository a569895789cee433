"""Runs the schedule heartbeat inside every worker.

Safe on every node at once: occurrences are deduplicated by their idempotency keys,
and on PostgreSQL concurrent heartbeats skip the schedules another one has locked.
On its first run it syncs ``DURABLE_JOBS["SCHEDULES"]`` to the table.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from durable_jobs.conf import get_settings
from durable_jobs.plugins.base import Plugin

if TYPE_CHECKING:
    from durable_jobs.worker.worker import Worker


class SchedulerPlugin(Plugin):
    name = "scheduler"

    def __init__(self) -> None:
        self.synced = False

    def interval(self, worker: Worker) -> float:
        return get_settings().scheduler_interval

    def run(self, worker: Worker) -> None:
        from durable_jobs.schedules.heartbeat import tick
        from durable_jobs.schedules.sync import sync_schedules

        if not self.synced:
            sync_schedules(using=worker.alias)
            self.synced = True
        tick(using=worker.alias)
