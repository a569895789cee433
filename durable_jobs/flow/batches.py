"""Batches: enqueue many jobs together; one callback job runs when every one is final.

::

    Batch("import 42", on_complete=import_done.prepare(import_id=42)).enqueue(
        [import_row.prepare(import_id=42, row=n) for n in range(10_000)]
    )

Completion is checked after each acknowledgement that makes a batch job final (and
by a periodic sweep, in case a worker died between the two). The callback is
enqueued with the idempotency key ``batch:<id>:complete``, so however many workers
notice the last job finishing at the same moment, exactly one callback job exists.
Its context carries the batch's counts per final state (``context.batch``).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable
from typing import Any

from django.db import transaction
from django.db.models import Count
from django.utils import timezone

from durable_jobs import limits, registry
from durable_jobs.db import engine_for
from durable_jobs.enqueueing import insert_many, insert_or_get
from durable_jobs.exceptions import DurableJobsError, EnqueueError
from durable_jobs.handlers import EnqueueOptions, PreparedJob, checked_prepared
from durable_jobs.lifecycle.states import FINAL, UNFINISHED, State
from durable_jobs.models import Batch as BatchRow
from durable_jobs.models import Job

logger = logging.getLogger("durable_jobs")


@dataclasses.dataclass(frozen=True)
class BatchSummary:
    """What a batch's callback learns from ``context.batch``."""

    id: int
    name: str
    total: int
    counts: dict[str, int]

    @property
    def completed(self) -> int:
        return self.counts.get(State.COMPLETED, 0)

    @property
    def dead(self) -> int:
        return self.counts.get(State.DEAD, 0)

    @property
    def cancelled(self) -> int:
        return self.counts.get(State.CANCELLED, 0)

    @classmethod
    def from_meta(cls, info: dict[str, Any]) -> BatchSummary | None:
        if not info:
            return None
        return cls(
            id=int(info["id"]),
            name=str(info.get("name", "")),
            total=int(info.get("total", 0)),
            counts={str(k): int(v) for k, v in (info.get("counts") or {}).items()},
        )


class Batch:
    """A group of jobs with an optional callback, run once when all of them are final."""

    def __init__(
        self,
        name: str = "",
        *,
        on_complete: PreparedJob | None = None,
        meta: dict[str, Any] | None = None,
        using: str | None = None,
    ) -> None:
        if on_complete is not None and not isinstance(on_complete, PreparedJob):
            raise EnqueueError(
                "Batch(on_complete=...) takes a prepared job, as in "
                "import_done.prepare(import_id=42)"
            )
        length = limits.length("Batch", "name")
        if not isinstance(name, str) or len(name) > length:
            raise EnqueueError(f"Batch name must be a string of at most {length} characters")
        self.name = name
        self.on_complete = on_complete
        self.meta = dict(meta or {})
        self.using = using

    def enqueue(self, jobs: Iterable[PreparedJob]) -> BatchRow:
        """Create the batch and its jobs in one transaction; return the ``Batch`` row.

        A job whose idempotency key already belongs to an existing job is not added
        (the batch counts only the jobs it created). An empty batch completes at once.
        """
        prepared = checked_prepared(jobs)
        engine = engine_for(self.using)
        callback = self.on_complete
        with transaction.atomic(using=engine.alias):
            row = BatchRow.objects.using(engine.alias).create(
                name=self.name,
                callback_name=callback.handler.name if callback else "",
                callback_payload=callback.payload if callback else {},
                callback_options=_stored_options(callback.options) if callback else {},
                meta=self.meta,
            )
            _, created = insert_many(prepared, using=engine.alias, batch_id=row.pk)
            row.total = created
            row.save(update_fields=["total"])
            if created == 0:
                transaction.on_commit(
                    lambda: finish_ready([row.pk], using=engine.alias), using=engine.alias
                )
        return row


def progress(batch: BatchRow) -> dict[str, int]:
    """Jobs of ``batch`` per state, read through the batch index."""
    counts = (
        Job.objects.using(batch._state.db)
        .filter(batch_id=batch.pk)
        .order_by()
        .values_list("state")
        .annotate(n=Count("id"))
    )
    return {state: n for state, n in counts}


def finish_ready(batch_ids: Iterable[int], *, using: str | None = None) -> list[int]:
    """Finish the batches among ``batch_ids`` whose jobs are all final: record their counts
    and enqueue their callbacks. Safe to call concurrently and repeatedly."""
    finished = []
    for batch_id in sorted(set(batch_ids)):
        try:
            if _finish(batch_id, using=using):
                finished.append(batch_id)
        except (DurableJobsError, LookupError) as exc:
            # The callback cannot be enqueued (its handler is gone?): leave the batch
            # open; the sweep tries again, and the admin shows it unfinished.
            logger.error("batch %s: could not enqueue its callback: %s", batch_id, exc)
    return finished


def _finish(batch_id: int, *, using: str | None) -> bool:
    jobs = Job.objects.using(using).filter(batch_id=batch_id)
    if jobs.filter(state__in=UNFINISHED).exists():
        return False
    row = BatchRow.objects.using(using).filter(pk=batch_id, finished_at__isnull=True).first()
    if row is None:
        return False
    counts = {state: n for state, n in progress(row).items() if state in FINAL}
    engine = engine_for(using)
    callback_id = None
    with transaction.atomic(using=engine.alias):
        if row.callback_name:
            info = {"id": row.pk, "name": row.name, "total": row.total, "counts": counts}
            callback_id = _enqueue_callback(row, info, using=engine.alias).pk
        done = (
            BatchRow.objects.using(engine.alias)
            .filter(pk=batch_id, finished_at__isnull=True)
            .update(finished_at=timezone.now(), counts=counts, callback_job_id=callback_id)
        )
    if done:
        logger.info(
            "batch %s finished",
            batch_id,
            extra={"batch_id": batch_id, "counts": counts, "callback_job_id": callback_id},
        )
    return bool(done)


def _enqueue_callback(row: BatchRow, info: dict[str, Any], *, using: str) -> Job:
    handler = registry.get_handler(row.callback_name)
    stored = row.callback_options or {}
    options = EnqueueOptions(
        queue=stored.get("queue"),
        priority=stored.get("priority"),
        max_retries=stored.get("max_retries"),
        meta={**(stored.get("meta") or {}), "batch": info},
        # Whoever notices completion first creates it; everyone else finds it.
        idempotency_key=f"batch:{row.pk}:complete",
    )
    return insert_or_get(handler, dict(row.callback_payload or {}), options, using=using)[0]


def _stored_options(options: EnqueueOptions) -> dict[str, Any]:
    if options.run_at is not None or options.run_in is not None:
        raise EnqueueError("A batch callback runs when the batch finishes; drop run_at/run_in")
    return {
        "queue": options.queue,
        "priority": options.priority,
        "max_retries": options.max_retries,
        "meta": dict(options.meta or {}),
    }
