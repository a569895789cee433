"""The job state machine: the six states, the allowed moves, and the one writer of ``state``.

Every change of ``Job.state`` goes through :func:`transition` (guarded UPDATEs),
:func:`claim` (the per-database claim query) or :func:`settle` (the per-database
acknowledgement of many leases at once). Each restricts the rows it touches to the
source states this table allows, so a move the table does not list can never be
written, whatever the caller passes.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from django.db import models

if TYPE_CHECKING:
    from django.db.models import QuerySet

    from durable_jobs.models import Attempt, Job


class State(models.TextChoices):
    # These strings are stored in the database: never rename them.
    QUEUED = "queued", "Queued"
    LEASED = "leased", "Leased"
    COMPLETED = "completed", "Completed"
    RETRYING = "retrying", "Retrying"
    DEAD = "dead", "Dead"
    CANCELLED = "cancelled", "Cancelled"


#: target state -> the states a job may be in to move there.
ALLOWED_SOURCES: Mapping[State, frozenset[State]] = {
    # A worker claims a new job or a retry that has come due.
    State.LEASED: frozenset({State.QUEUED, State.RETRYING}),
    # The handler returned.
    State.COMPLETED: frozenset({State.LEASED}),
    # The handler failed, timed out, or its lease expired; more attempts are left.
    State.RETRYING: frozenset({State.LEASED}),
    # Retries exhausted, Discard, or discarded by an operator.
    State.DEAD: frozenset({State.LEASED, State.RETRYING, State.QUEUED}),
    # Cancel from the handler or an operator.
    State.CANCELLED: frozenset({State.QUEUED, State.LEASED, State.RETRYING}),
    # Snoozed or handed back by a stopping worker (from leased); retried by an
    # operator (from dead, cancelled, or a retry that should not wait).
    State.QUEUED: frozenset({State.LEASED, State.RETRYING, State.DEAD, State.CANCELLED}),
}

#: States a worker may claim from, when ``available_at`` has passed.
CLAIMABLE: frozenset[State] = ALLOWED_SOURCES[State.LEASED]
#: States in which a job will not run again on its own.
FINAL: frozenset[State] = frozenset({State.COMPLETED, State.DEAD, State.CANCELLED})
#: The others, in lifecycle order: waiting, running, or waiting to retry.
UNFINISHED: tuple[State, ...] = (State.QUEUED, State.LEASED, State.RETRYING)


def can_move(source: str, target: str) -> bool:
    return State(source) in ALLOWED_SOURCES[State(target)]


def transition(jobs: QuerySet[Job], target: State, **changes: Any) -> int:
    """Move the jobs in ``jobs`` that may legally reach ``target``; return how many moved.

    Callers narrow ``jobs`` further (by lease token, by expiry) to make the write
    conditional; the allowed source states are always added here.
    """
    from django.utils import timezone

    changes.setdefault("updated_at", timezone.now())
    if target != State.QUEUED:
        changes["idempotency_key"] = unique_key_after(target)
    return jobs.filter(state__in=ALLOWED_SOURCES[target]).update(state=target, **changes)


def unique_key_after(target: State) -> Any:
    """The idempotency key a job keeps on moving to ``target``: a unique job's key is freed
    (set to NULL) when ``target`` is not one of the states it is unique in."""
    from django.db.models import Case, F, Q, Value, When

    return Case(
        When(
            Q(unique_states="") | Q(unique_states__contains=f",{target.value},"),
            then=F("idempotency_key"),
        ),
        default=Value(None),
        output_field=models.CharField(),
    )


def held(job_ids: Iterable[int], lease_token: Any, *, using: str | None = None) -> QuerySet[Job]:
    """The jobs among ``job_ids`` still leased under ``lease_token``: the fencing condition
    every write on behalf of a lease (outcome, renewal, progress) must be guarded by."""
    from durable_jobs.models import Job

    return Job.objects.using(using).filter(
        pk__in=list(job_ids), state=State.LEASED, lease_token=lease_token
    )


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
    and counts; see :meth:`durable_jobs.db.base.Backend.claim`.
    """
    from durable_jobs.db import backend_for

    if limit <= 0:
        return []
    return backend_for(using).claim(
        queue=queue,
        limit=limit,
        node_id=node_id,
        lease_seconds=lease_seconds,
        sources=sorted(CLAIMABLE),
        target=State.LEASED,
        limited=limited,
    )


@dataclasses.dataclass
class Settlement:
    """How one lease ended: the job's next state, what to write with it, and its attempt.

    Written by :func:`settle` only while the job is still leased under ``lease_token``.
    """

    job_id: int
    lease_token: Any
    target: State
    attempt: Attempt
    updated_at: datetime.datetime
    #: Set for final states; cleared (NULL) otherwise.
    finished_at: datetime.datetime | None = None
    #: When the job may run again (a retry, a snooze); None leaves it as it is.
    available_at: datetime.datetime | None = None
    #: The attempt does not count (snoozed, handed back): ``attempts`` goes back down by one.
    gives_back: bool = False
    #: Completed: store ``result`` (None is stored as SQL NULL).
    sets_result: bool = False
    result: Any = None
    #: None leaves ``last_error`` as it is.
    last_error: str | None = None


def settle(settlements: Sequence[Settlement], *, using: str | None = None) -> list[bool]:
    """Record how leases ended, in one statement per call (per database, see
    :meth:`durable_jobs.db.base.Backend.settle`); return which were written.

    Each job moves only if it is still ``leased`` under the settlement's token (the
    fence: a rescued or cancelled job is left alone), and its attempt row is inserted
    only then; a written attempt gets its primary key.
    """
    from durable_jobs.db import backend_for

    for settlement in settlements:
        if not can_move(State.LEASED, settlement.target):
            raise ValueError(f"a lease cannot end in {settlement.target!r}")
    backend = backend_for(using)
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
        for index, ok in zip(now, backend.settle([settlements[i] for i in now]), strict=True):
            written[index] = ok
        remaining = later
    return written
