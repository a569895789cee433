"""Finishes batches whose last job became final without the check running (its worker
died between writing the outcome and the check, or the check met a database error)."""

from __future__ import annotations

from durable_jobs.flow.batches import finish_ready
from durable_jobs.maintenance.base import MaintenanceContext
from durable_jobs.models import Batch

#: Open batches looked at per run, oldest first.
BATCH = 100
#: Seconds between sweeps.
INTERVAL = 15.0


class BatchSweeper:
    name = "batch sweeper"

    def interval(self, context: MaintenanceContext) -> float:
        return INTERVAL

    def run(self, context: MaintenanceContext) -> None:
        sweep(using=context.alias)


def sweep(*, using: str | None = None) -> list[int]:
    """Finish every ready batch among the oldest open ones; return their ids."""
    open_ids = list(
        Batch.objects.using(using)
        .filter(finished_at__isnull=True)
        .order_by("created_at")
        .values_list("pk", flat=True)[:BATCH]
    )
    return finish_ready(open_ids, using=using)
