"""Finishes batches whose last job became final without the check running (its worker
died between the acknowledgement and the check, or an operator finished the job)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from durable_jobs.flow.batches import finish_ready
from durable_jobs.models import Batch
from durable_jobs.plugins.base import Plugin

if TYPE_CHECKING:
    from durable_jobs.worker.worker import Worker

#: Open batches looked at per run, oldest first.
BATCH = 100


class BatchSweeper(Plugin):
    name = "batches"

    def interval(self, worker: Worker) -> float:
        return 15.0

    def run(self, worker: Worker) -> None:
        sweep(using=worker.alias)


def sweep(*, using: str | None = None) -> list[int]:
    """Finish every ready batch among the oldest open ones; return their ids."""
    open_ids = list(
        Batch.objects.using(using)
        .filter(finished_at__isnull=True)
        .order_by("created_at")
        .values_list("pk", flat=True)[:BATCH]
    )
    return finish_ready(open_ids, using=using)
