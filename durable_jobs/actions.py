"""Operator actions on jobs (admin, CLI): retry now, cancel, discard.

Each goes through the state machine, so a job in a state the action does not apply
to is skipped, never forced. Each returns ``(changed, skipped)``.
"""

from __future__ import annotations

from django.db.models import QuerySet
from django.utils import timezone

from durable_jobs.db import backend_for
from durable_jobs.flow.batches import finish_ready
from durable_jobs.models import Job
from durable_jobs.states import FINAL, State, transition


def retry_jobs(jobs: QuerySet[Job]) -> tuple[int, int]:
    """Dead, cancelled and retrying jobs go back to ``queued``, available now."""
    now = timezone.now()
    return _apply(
        jobs,
        State.QUEUED,
        # A leased job is running: "retry" must not pull it from under its worker.
        exclude=[State.LEASED],
        available_at=now,
        finished_at=None,
    )


def cancel_jobs(jobs: QuerySet[Job]) -> tuple[int, int]:
    """Waiting or running jobs become ``cancelled``; a running job's result will be ignored."""
    return _apply(
        jobs,
        State.CANCELLED,
        finished_at=timezone.now(),
        lease_expires_at=None,
        leased_by=None,
        last_error="cancelled by an operator",
    )


def discard_jobs(jobs: QuerySet[Job]) -> tuple[int, int]:
    """Waiting jobs go straight to ``dead``, kept for inspection."""
    return _apply(
        jobs,
        State.DEAD,
        exclude=[State.LEASED],
        finished_at=timezone.now(),
        last_error="discarded by an operator",
    )


def _apply(
    jobs: QuerySet[Job], target: State, *, exclude: list[State] | None = None, **changes: object
) -> tuple[int, int]:
    backend = backend_for(jobs.db)
    with backend.write_transaction():
        total = jobs.count()
        selected = jobs.exclude(state__in=exclude) if exclude else jobs
        # Only a move to a final state can complete a batch.
        batch_ids = (
            set(selected.filter(batch__isnull=False).order_by().values_list("batch_id", flat=True))
            if target in FINAL
            else set()
        )
        changed = transition(
            Job.objects.using(backend.alias).filter(pk__in=selected.values("pk")), target, **changes
        )
    if batch_ids:
        finish_ready(batch_ids, using=backend.alias)
    return changed, total - changed
