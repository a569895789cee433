"""The only writers of ``Job.state``: :func:`transition`, :func:`claim` and :func:`settle`.

Each restricts the rows it touches to the source states the table in
:mod:`durable_jobs.lifecycle.states` allows, so a move the table does not list can
never be written, whatever the caller passes:

- :func:`transition` moves the jobs of a queryset (operator actions), and
  :func:`bring_forward` makes waiting jobs available now;
- :func:`claim` leases waiting jobs for a worker (the engine's claim statement, under
  the flow-control rules of :mod:`durable_jobs.flow.limits`);
- :func:`settle` records how leases ended, fenced by each lease's token.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from django.db.models import QuerySet
from django.utils import timezone

from durable_jobs.db import engine_for
from durable_jobs.db.contract import ClaimRequest, PassWrites
from durable_jobs.flow import limits
from durable_jobs.lifecycle import sql
from durable_jobs.lifecycle.states import ALLOWED_SOURCES, State, can_move
from durable_jobs.models import Job

if TYPE_CHECKING:
    from durable_jobs.lifecycle.outcomes import Settlement


def transition(jobs: QuerySet[Job], target: State, **changes: Any) -> int:
    """Move the jobs in ``jobs`` that may legally reach ``target``; return how many moved.

    Callers narrow ``jobs`` further (by lease token, by expiry) to make the write
    conditional; the allowed source states are always added here, and a unique job's
    key is freed as :func:`~durable_jobs.lifecycle.states.keeps_unique_key` says.
    """
    changes.setdefault("updated_at", timezone.now())
    key = sql.key_after_expression(target)
    if key is not None:
        changes["idempotency_key"] = key
    return jobs.filter(state__in=ALLOWED_SOURCES[target]).update(state=target, **changes)


def bring_forward(jobs: QuerySet[Job], now: datetime.datetime) -> int:
    """Make waiting jobs available at ``now``: a ``retrying`` one moves to ``queued``
    (through :func:`transition`), a ``queued`` one that waits for a later time keeps its
    state. Return how many changed; running and finished jobs are left alone."""
    retried = transition(jobs.filter(state=State.RETRYING), State.QUEUED, available_at=now)
    delayed = jobs.filter(state=State.QUEUED, available_at__gt=now)
    return retried + delayed.update(available_at=now, updated_at=now)


def leased_under(
    job_ids: Iterable[int], lease_token: Any, *, using: str | None = None
) -> QuerySet[Job]:
    """The jobs among ``job_ids`` still leased under ``lease_token``: what every write on
    behalf of a lease (outcome, renewal, progress) must be limited to."""
    return Job.objects.using(using).filter(sql.lease_fence(job_ids, lease_token))


def claim(
    *,
    queue: str,
    limit: int,
    node_id: int | None,
    lease_seconds: float,
    limited: bool = False,
    using: str | None = None,
) -> list[Job]:
    """Lease up to ``limit`` available jobs of ``queue`` for ``node_id``, best first.

    ``limited``: the queue has global limits (rate, concurrency), so the claim locks
    and counts; see :mod:`durable_jobs.flow.limits`.
    """
    if limit <= 0:
        return []
    request = ClaimRequest(queue, limit, node_id, lease_seconds)
    return limits.claim_within_limits(engine_for(using), request, limited=limited)


def settle_and_claim(
    settlements: Sequence[Settlement],
    *,
    queue: str,
    limit: int,
    node_id: int | None,
    lease_seconds: float,
    limited: bool = False,
    keyed: bool = False,
    using: str | None = None,
) -> PassWrites:
    """:func:`settle`, then :func:`claim` for the slots the outcomes freed, as one loop
    pass writes them (inside the engine's
    :meth:`~durable_jobs.db.engine.Engine.pass_transaction`). Where the engine can, one
    statement does both. ``keyed``: see :func:`durable_jobs.flow.limits.settle_and_claim`.
    """
    if limit <= 0 or _repeats_a_job(settlements):
        written = settle(settlements, using=using)
        claimed = claim(
            queue=queue,
            limit=limit,
            node_id=node_id,
            lease_seconds=lease_seconds,
            limited=limited,
            using=using,
        )
        return PassWrites(written, claimed)
    _check_targets(settlements)
    request = ClaimRequest(queue, limit, node_id, lease_seconds)
    engine = engine_for(using)
    return limits.settle_and_claim(engine, settlements, request, limited=limited, keyed=keyed)


def settle(settlements: Sequence[Settlement], *, using: str | None = None) -> list[bool]:
    """Record how leases ended (one statement per batch); return which were written.

    Each job moves only if it is still ``leased`` under the settlement's token (a rescued
    or cancelled job is left alone), and its attempt row is inserted only then.
    """
    _check_targets(settlements)
    engine = engine_for(using)
    written: list[bool] = [False] * len(settlements)
    # Each statement holds a job at most once (a stale lease and the job's current one
    # may meet in one batch): the fence is checked per statement, so the later lease is
    # written only after the earlier one has been judged.
    remaining = list(range(len(settlements)))
    while remaining:
        seen: set[int] = set()
        now: list[int] = []
        later: list[int] = []
        for index in remaining:
            job_id = settlements[index].job_id
            (later if job_id in seen else now).append(index)
            seen.add(job_id)
        for index, ok in zip(now, engine.settle([settlements[i] for i in now]), strict=True):
            written[index] = ok
        remaining = later
    return written


def _check_targets(settlements: Sequence[Settlement]) -> None:
    for settlement in settlements:
        if not can_move(State.LEASED, settlement.target):
            raise ValueError(f"a lease cannot end in {settlement.target!r}")


def _repeats_a_job(settlements: Sequence[Settlement]) -> bool:
    return len({settlement.job_id for settlement in settlements}) < len(settlements)
