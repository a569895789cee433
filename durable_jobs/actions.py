"""Operator actions on jobs (admin, CLI): run now, retry now, cancel, discard, delete.

Each goes through the state machine, so a job in a state the action does not apply
to is skipped, never forced. Each works a thousand jobs per transaction, so that no
statement or lock grows with the selection, and returns ``(changed, skipped)``;
``progress(n)`` is called after each chunk of ``n`` jobs.
"""

from __future__ import annotations

from collections.abc import Callable

from django.db.models import QuerySet
from django.utils import timezone

from durable_jobs.db import engine_for
from durable_jobs.flow.batches import finish_ready
from durable_jobs.lifecycle.transitions import bring_forward
from durable_jobs.models import Attempt, Job
from durable_jobs.states import FINAL, State, transition

Progress = Callable[[int], object] | None

#: Jobs per transaction.
CHUNK = 1000


def run_jobs(jobs: QuerySet[Job], progress: Progress = None) -> tuple[int, int]:
    """Waiting jobs start as soon as a worker is free: a delayed job (``queued`` for a later
    time) or a ``retrying`` one becomes available now, without waiting for its time."""

    def run(chunk: QuerySet[Job]) -> tuple[int, int]:
        engine = engine_for(chunk.db)
        with engine.write_transaction():
            total = chunk.count()
            changed = bring_forward(
                Job.objects.using(engine.alias).filter(pk__in=chunk), timezone.now()
            )
        return changed, total - changed

    return _in_chunks(jobs, run, progress)


def retry_jobs(jobs: QuerySet[Job], progress: Progress = None) -> tuple[int, int]:
    """Dead, cancelled and retrying jobs go back to ``queued``, available now."""

    def retry(chunk: QuerySet[Job]) -> tuple[int, int]:
        # A leased job is running: "retry" must not pull it from under its worker.
        return _move(
            chunk, State.QUEUED, exclude=[State.LEASED], available_at=timezone.now(),
            finished_at=None,
        )  # fmt: skip

    return _in_chunks(jobs, retry, progress)


def cancel_jobs(jobs: QuerySet[Job], progress: Progress = None) -> tuple[int, int]:
    """Waiting or running jobs become ``cancelled``; a running job's result will be ignored."""

    def cancel(chunk: QuerySet[Job]) -> tuple[int, int]:
        return _move(
            chunk, State.CANCELLED, finished_at=timezone.now(), lease_expires_at=None,
            leased_by=None, last_error="cancelled by an operator",
        )  # fmt: skip

    return _in_chunks(jobs, cancel, progress)


def discard_jobs(jobs: QuerySet[Job], progress: Progress = None) -> tuple[int, int]:
    """Waiting jobs go straight to ``dead``, kept for inspection."""

    def discard(chunk: QuerySet[Job]) -> tuple[int, int]:
        return _move(
            chunk, State.DEAD, exclude=[State.LEASED], finished_at=timezone.now(),
            last_error="discarded by an operator",
        )  # fmt: skip

    return _in_chunks(jobs, discard, progress)


def delete_jobs(jobs: QuerySet[Job], progress: Progress = None) -> tuple[int, int]:
    """Jobs and their attempts go; a running job stays (cancel it first)."""
    return _in_chunks(jobs, _delete, progress)


def _in_chunks(
    jobs: QuerySet[Job], action: Callable[[QuerySet[Job]], tuple[int, int]], progress: Progress
) -> tuple[int, int]:
    """Apply ``action`` to ``jobs`` ``CHUNK`` at a time, in id order (keyset, not OFFSET)."""
    changed = skipped = 0
    last = 0
    while True:
        ids = list(jobs.filter(pk__gt=last).order_by("pk").values_list("pk", flat=True)[:CHUNK])
        if not ids:
            return changed, skipped
        # The caller's filters again, with the ids: a job that left them since is skipped.
        done, passed = action(jobs.filter(pk__in=ids))
        changed += done
        skipped += passed
        last = ids[-1]
        if progress is not None:
            progress(len(ids))


def _move(
    jobs: QuerySet[Job], target: State, *, exclude: list[State] | None = None, **changes: object
) -> tuple[int, int]:
    engine = engine_for(jobs.db)
    with engine.write_transaction():
        total = jobs.count()
        selected = jobs.exclude(state__in=exclude) if exclude else jobs
        # Only a move to a final state can complete a batch.
        batch_ids = (
            set(selected.filter(batch__isnull=False).order_by().values_list("batch_id", flat=True))
            if target in FINAL
            else set()
        )
        changed = transition(
            Job.objects.using(engine.alias).filter(pk__in=selected.values("pk")), target, **changes
        )
    if batch_ids:
        finish_ready(batch_ids, using=engine.alias)
    return changed, total - changed


def _delete(jobs: QuerySet[Job]) -> tuple[int, int]:
    engine = engine_for(jobs.db)
    with engine.write_transaction():
        total = jobs.count()
        # Locked, so that no worker claims one of them between this read and the delete
        # (claims skip locked rows).
        rows = list(
            Job.objects.using(engine.alias)
            .filter(pk__in=jobs.values("pk"))
            .exclude(state=State.LEASED)
            .select_for_update()
            .values_list("pk", "batch_id")
        )
        ids = [pk for pk, _ in rows]
        batch_ids = {batch_id for _, batch_id in rows if batch_id is not None}
        Attempt.objects.using(engine.alias).filter(job_id__in=ids).delete()
        deleted = (
            Job.objects.using(engine.alias).filter(pk__in=ids).delete()[1].get(Job._meta.label, 0)
        )
    if batch_ids:
        # A batch whose last unfinished job is gone is complete.
        finish_ready(batch_ids, using=engine.alias)
    return deleted, total - deleted
