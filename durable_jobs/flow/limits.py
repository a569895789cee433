"""Which jobs a claim may take: the fast path, the locked path, and concurrency keys.

A queue without limits is claimed on the **fast path**: one guarded statement that
leases nothing if the queue's row says it is paused or limited, so a pause takes effect
at once on every node. A queue with a global concurrency or a rate limit is claimed on
the **locked path**, one write transaction that locks the queue's row, computes the
allowance (free global slots, starts left in the rate window), claims at most that many,
and records the starts. Keyed jobs start only while their key has room; their keys are
locked before they are counted, so the count includes every other claimer's committed
leases. The engines run the statements (:mod:`durable_jobs.db`); the rules are here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

from django.db import models
from django.utils import timezone

from durable_jobs.db.commit_mode import relax_commit
from durable_jobs.db.contract import ClaimRequest, KeyedCandidate, PassWrites
from durable_jobs.db.engine import Engine
from durable_jobs.flow import rates
from durable_jobs.lifecycle.states import State
from durable_jobs.models import Job, Queue

if TYPE_CHECKING:
    from durable_jobs.lifecycle.outcomes import Settlement

#: No limit from a queue's row: more than any worker's concurrency.
UNLIMITED = 1 << 30


def claim_within_limits(engine: Engine, request: ClaimRequest, *, limited: bool) -> list[Job]:
    """Lease up to ``request.limit`` jobs of the queue for ``request.node_id``, best first.

    ``limited``: the queue has global limits (as its worker last heard), so the claim
    takes the locked path. A worker that has not heard yet stays on the fast path, whose
    guard leases nothing, until its next heartbeat tells it.
    """
    if not engine.may_claim(request.queue):
        return []

    def choose_keyed(candidates: Sequence[KeyedCandidate]) -> list[int]:
        return keyed_with_room(engine, candidates)

    # Only a transaction of its own: inside the loop pass's (or a caller's) it is not
    # this claim's to relax.
    own_transaction = not engine.connection.in_atomic_block
    with engine.write_transaction(savepoint=False):
        if own_transaction:
            relax_commit(engine)
        if not limited:
            return engine.claim(request, guarded=True, choose_keyed=choose_keyed)
        queue_row = engine.lock_queue(request.queue)
        if queue_row is not None:
            if queue_row.paused:
                return []
            request = dataclasses.replace(
                request, limit=min(request.limit, allowance(queue_row, using=engine.alias))
            )
            if request.limit <= 0:
                return []
        jobs = engine.claim(request, guarded=False, choose_keyed=choose_keyed)
        if queue_row is not None and queue_row.rate_limit and jobs:
            record_starts(queue_row, len(jobs), using=engine.alias)
        return jobs


def settle_and_claim(
    engine: Engine,
    settlements: Sequence[Settlement],
    request: ClaimRequest,
    *,
    limited: bool,
    keyed: bool = False,
) -> PassWrites:
    """Write ``settlements`` and lease up to ``request.limit`` jobs of the queue, in the
    pass's transaction (:meth:`Engine.pass_transaction`); on the fast path the engine
    may do both in one statement.

    ``limited`` as for :func:`claim_within_limits`. ``keyed``: the queue's last such
    statement left keyed jobs waiting (see :class:`~durable_jobs.db.engine.PassWrites`):
    claim as :func:`claim_within_limits` does, which chooses among them under their
    keys' locks.
    """
    if limited or keyed:
        written = engine.settle(settlements) if settlements else []
        return PassWrites(written, claim_within_limits(engine, request, limited=limited))

    def choose_keyed(candidates: Sequence[KeyedCandidate]) -> list[int]:
        return keyed_with_room(engine, candidates)

    return engine.settle_and_claim(settlements, request, choose_keyed=choose_keyed)


def allowance(queue_row: Queue, *, using: str) -> int:
    """How many jobs the queue's global limits let start now (its row is locked)."""
    allowed = UNLIMITED
    if queue_row.global_concurrency is not None:
        leased = Job.objects.using(using).filter(queue=queue_row.name, state=State.LEASED).count()
        allowed = min(allowed, queue_row.global_concurrency - leased)
    if queue_row.rate_limit and queue_row.rate_period:
        allowed = min(
            allowed,
            rates.remaining(
                queue_row.rate_window,
                timezone.now().timestamp(),
                queue_row.rate_limit,
                queue_row.rate_period,
            ),
        )
    return allowed


def record_starts(queue_row: Queue, started: int, *, using: str) -> None:
    """Append this claim's starts to the queue's sliding rate log (its row is locked)."""
    now = timezone.now()
    assert queue_row.rate_period is not None
    log = rates.window_entries(queue_row.rate_window, now.timestamp(), queue_row.rate_period)
    log.append([now.timestamp(), started])
    Queue.objects.using(using).filter(name=queue_row.name).update(rate_window=log)


def keyed_with_room(engine: Engine, candidates: Sequence[KeyedCandidate]) -> list[int]:
    """Of ``(id, key, limit)`` candidates in claim order, those whose key has a free slot.

    Called inside the claim's transaction; the keys are locked first, so the leased
    count seen here includes every other claimer's committed leases.
    """
    keys = sorted({key for _, key, _ in candidates})
    engine.lock_keys(keys)
    holders = dict(
        Job.objects.using(engine.alias)
        .filter(state=State.LEASED, concurrency_key__in=keys)
        .values_list("concurrency_key")
        .annotate(n=models.Count("id"))
        .values_list("concurrency_key", "n")
    )
    chosen = []
    for pk, key, limit in candidates:
        if holders.get(key, 0) < (limit or 1):
            holders[key] = holders.get(key, 0) + 1
            chosen.append(pk)
    return chosen
