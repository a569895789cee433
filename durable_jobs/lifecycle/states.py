"""The job state machine's vocabulary: the six states, the moves between them, and how
an attempt ends.

Pure data, no I/O: the models import it, the engines render SQL from it
(:mod:`durable_jobs.lifecycle.sql`), and the writers in
:mod:`durable_jobs.lifecycle.transitions` enforce it.
"""

from __future__ import annotations

from collections.abc import Mapping

from django.db import models
from django.utils.translation import gettext_lazy as _


class State(models.TextChoices):
    # The values are stored in the database: never rename them. The labels are what
    # the admin shows, in the active language.
    QUEUED = "queued", _("Queued")
    LEASED = "leased", _("Leased")
    COMPLETED = "completed", _("Completed")
    RETRYING = "retrying", _("Retrying")
    DEAD = "dead", _("Dead")
    CANCELLED = "cancelled", _("Cancelled")


class Outcome(models.TextChoices):
    """How one attempt ended."""

    COMPLETED = "completed", _("Completed")
    FAILED = "failed", _("Failed")
    TIMED_OUT = "timed_out", _("Timed out")
    SNOOZED = "snoozed", _("Snoozed")
    CANCELLED = "cancelled", _("Cancelled")
    DISCARDED = "discarded", _("Discarded")
    LOST = "lost", _("Lost (lease expired)")
    INTERRUPTED = "interrupted", _("Interrupted (worker stopped)")


#: Attempt outcomes that count as failures in error groups and the failure rate.
FAILED_OUTCOMES: tuple[str, ...] = tuple(
    sorted(o.value for o in (Outcome.FAILED, Outcome.TIMED_OUT, Outcome.LOST, Outcome.DISCARDED))
)


#: Attempt outcomes that give the attempt back: they do not count against the job's retries.
GIVEN_BACK_OUTCOMES = frozenset({Outcome.SNOOZED, Outcome.INTERRUPTED})


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


def keeps_unique_key(target: str, unique_states: str) -> bool:
    """Whether a job keeps its idempotency key on moving to ``target``.

    A unique job (``@job(unique=...)``) stores the states it is unique in as
    ``",queued,leased,"``; it frees its key (to NULL) on leaving them, so that a new job
    with the same arguments can be enqueued. An empty ``unique_states`` (an explicit
    ``idempotency_key``) holds the key for the job's whole life, and a job going back to
    ``queued`` keeps it: queued is always one of a unique job's states.

    :mod:`durable_jobs.lifecycle.sql` spells this rule in SQL and as an ORM expression;
    tests check both against this function.
    """
    return target == State.QUEUED or unique_states == "" or f",{target}," in unique_states
