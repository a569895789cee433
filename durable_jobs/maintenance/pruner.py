"""Deletes finished jobs older than ``PRUNE_AFTER_DAYS``, and nodes long gone silent."""

from __future__ import annotations

import time
from datetime import timedelta

from django.utils import timezone

from durable_jobs.conf import get_settings
from durable_jobs.db import engine_for
from durable_jobs.maintenance.base import MaintenanceContext

#: Rows deleted per transaction, and transactions per run: bounded work on every tick.
BATCH, MAX_BATCHES = 1000, 10
#: A run also stops after this many seconds, so that it holds SQLite's write lock briefly.
RUN_BUDGET_SECONDS = 0.2
#: Seconds between runs; while a run leaves old jobs behind (a busy queue finishes more
#: jobs per minute than one run deletes), the next comes after BEHIND_INTERVAL instead.
INTERVAL, BEHIND_INTERVAL = 60.0, 1.0
#: A node that has not sent a heartbeat for this long is forgotten.
FORGET_NODES_AFTER = timedelta(days=1)


class Pruner:
    name = "pruner"

    def __init__(self) -> None:
        self.behind = False

    def interval(self, context: MaintenanceContext) -> float:
        return BEHIND_INTERVAL if self.behind else INTERVAL

    def run(self, context: MaintenanceContext) -> None:
        deadline = time.monotonic() + RUN_BUDGET_SECONDS
        deleted = prune(using=context.alias, deadline=deadline)
        # A run that used all its batches or its time probably left some behind.
        self.behind = deleted >= BATCH * MAX_BATCHES or (
            deleted > 0 and time.monotonic() >= deadline
        )


def prune(
    *, days: float | None = None, using: str | None = None, deadline: float | None = None
) -> int:
    """Delete finished jobs (and their attempts) older than ``days``, BATCH per transaction,
    at most MAX_BATCHES transactions (fewer if the monotonic ``deadline`` passes); return
    how many were deleted."""
    engine = engine_for(using)
    days = get_settings().prune_after_days if days is None else days
    deleted = 0
    now = timezone.now()
    if days is not None:
        cutoff = now - timedelta(days=days)
        for _ in range(MAX_BATCHES):
            if deadline is not None and time.monotonic() >= deadline:
                break
            batch = engine.delete_finished(cutoff, BATCH)
            if batch is None:
                break
            deleted += batch
        # The refused requests the HTTP throttle counted, as old as the jobs just pruned.
        engine.forget_refused_requests(cutoff, BATCH)
    engine.forget_nodes(now - FORGET_NODES_AFTER)
    return deleted
