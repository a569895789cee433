"""Recording decided outcomes: the fenced write, then what follows its commit.

:func:`write` records settlements in the caller's transaction (the worker's loop writes
them together with its next claim); :func:`after_commit` then updates the in-memory
jobs, sends the outcome signals (:mod:`durable_jobs.signals`), logs each lifecycle event and
finishes the batches whose last job this was. :func:`write_now` does both, for callers
with no transaction of their own (the rescuer, ``testing.drain``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from django.db import DatabaseError

from durable_jobs import hooks, signals
from durable_jobs.flow.batches import finish_ready
from durable_jobs.lifecycle.outcomes import Settlement
from durable_jobs.lifecycle.states import FINAL, State
from durable_jobs.lifecycle.transitions import settle
from durable_jobs.logging import log_event
from durable_jobs.logging import logger as event_logger
from durable_jobs.models import FAILED_OUTCOMES, Job

logger = logging.getLogger("durable_jobs")

EVENT_LEVELS = {
    "completed": logging.INFO,
    "retried": logging.WARNING,
    "dead": logging.ERROR,
    "cancelled": logging.INFO,
    "snoozed": logging.INFO,
    "handed back": logging.WARNING,
    "rescued": logging.WARNING,
}


def write(settlements: Sequence[Settlement], *, using: str | None = None) -> list[bool]:
    """Write the outcomes (in the caller's transaction, if there is one; else each
    statement commits on its own); return which were written. If the database refuses
    one, the error propagates. Call :func:`after_commit` once they are committed."""
    return settle(settlements, using=using)


def write_now(settlements: Sequence[Settlement], *, using: str | None = None) -> list[bool]:
    """:func:`write`, then :func:`after_commit`; return which were written."""
    written = write(settlements, using=using)
    after_commit(settlements, written, using=using)
    return written


def after_commit(
    settlements: Sequence[Settlement], written: Sequence[bool], *, using: str | None = None
) -> None:
    """After the outcomes' commit: log them, send their signals, and finish the batches
    whose last job this was."""
    for settlement, ok in zip(settlements, written, strict=True):
        _report(settlement, ok)
    finish_batches(
        (
            s.job.batch_id
            for s, ok in zip(settlements, written, strict=True)
            if ok and s.target in FINAL and s.job.batch_id
        ),
        using=using,
    )


def finish_batches(batch_ids: Iterable[int], *, using: str | None = None) -> None:
    ids = set(batch_ids)
    if not ids:
        return
    try:
        finish_ready(ids, using=using)
    except DatabaseError as exc:
        # The outcomes are committed; the batch sweeper finishes these batches later.
        logger.warning("could not check batches %s for completion: %s", sorted(ids), exc)


def _report(settlement: Settlement, written: bool) -> None:
    job, attempt = settlement.job, settlement.attempt
    if not written:
        # The job moved on without this worker: its lease expired and it was rescued,
        # or an operator cancelled it. Nothing was written.
        log_event(logging.WARNING, "rejected", job, node=attempt.node, outcome=attempt.outcome)
        return
    job.state = settlement.target
    # The outcome is committed; a failing receiver must not make it look otherwise.
    signals.send(signals.attempt_finished, Job, job=job, attempt=attempt)
    if settlement.target in FINAL:
        hooks.job_finished(job, attempt, settlement.exception)
        signals.send(
            signals.job_finished, Job, job=job, attempt=attempt, error=settlement.exception
        )
    if settlement.target == State.DEAD:
        signals.send(signals.job_dead, Job, job=job, attempt=attempt)
    error = settlement.exception
    level = EVENT_LEVELS.get(settlement.event, logging.INFO)
    if not event_logger.isEnabledFor(level):
        return  # the record's fields are not worth building
    log_event(
        level,
        settlement.event,
        job,
        # A failure carries its real exception, so that error trackers' logging
        # integrations (Sentry's, for one) capture its stack, not only its message.
        exc_info=error if attempt.outcome in FAILED_OUTCOMES else None,
        node=attempt.node,
        duration_ms=round(attempt.duration.total_seconds() * 1000, 3),
        error=settlement.error,
        outcome=attempt.outcome,
        **settlement.extra,
    )
