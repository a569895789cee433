"""Recording how an attempt ended: one decision, one guarded write.

:func:`decide` classifies a finished attempt into an :class:`Ack` (the target
state and the fields to write); :func:`apply_many` writes a batch of them with
:func:`durable_jobs.states.settle`, each guarded by ``state = 'leased'`` and its
lease token. A worker whose lease was lost (rescued by another node, cancelled by
an operator, handed back) therefore changes nothing: its write matches no row.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
import traceback as tb
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import DatabaseError

from durable_jobs import registry
from durable_jobs.backoff import MAX_DELAY_SECONDS, exponential
from durable_jobs.db.base import unsaved
from durable_jobs.exceptions import LeaseExpired, UnknownJob, WorkerStopped
from durable_jobs.logging import log_event
from durable_jobs.models import Attempt, Job, Outcome
from durable_jobs.signals import job_finished
from durable_jobs.states import FINAL, Settlement, State, settle
from durable_jobs.worker.execute import RunResult

#: Outcomes that give the attempt back: they are not failures of the job.
GIVEN_BACK = frozenset({Outcome.SNOOZED, Outcome.INTERRUPTED})

EVENT_LEVELS = {
    "completed": logging.INFO,
    "retried": logging.WARNING,
    "dead": logging.ERROR,
    "cancelled": logging.INFO,
    "snoozed": logging.INFO,
    "handed back": logging.WARNING,
    "rescued": logging.WARNING,
}


@dataclass
class Ack:
    """A decided outcome: the settlement to write, and what to log and signal once written."""

    job: Job
    settlement: Settlement
    event: str
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def target(self) -> State:
        return self.settlement.target

    @property
    def attempt(self) -> Attempt:
        return self.settlement.attempt


def decide(result: RunResult, *, node: str) -> Ack:
    """The state and fields an attempt's outcome leads to."""
    job, outcome, now = result.job, result.outcome, result.finished_at
    error_class, error_message, trace = (clean_text(t) for t in describe_error(result.error))
    attempt = unsaved(
        Attempt,
        job_id=job.pk,
        number=job.attempts,
        node=node,
        started_at=result.started_at,
        finished_at=result.finished_at,
        duration=result.duration,
        outcome=outcome,
        error_class=error_class[:255],
        error_message=error_message,
        traceback=trace,
        log=clean_text("\n".join(result.log_lines)) if result.log_lines else "",
    )
    settlement = Settlement(
        job_id=job.pk,
        lease_token=job.lease_token,
        target=State.COMPLETED,
        attempt=attempt,
        updated_at=now,
    )
    event: str
    if outcome == Outcome.COMPLETED:
        event = "completed"
        settlement.finished_at = now
        settlement.sets_result, settlement.result = True, result.value
        settlement.last_error = ""
    elif outcome in GIVEN_BACK:
        settlement.target = State.QUEUED
        event = "snoozed" if outcome == Outcome.SNOOZED else "handed back"
        settlement.available_at = now + datetime.timedelta(seconds=result.snooze_seconds)
        settlement.gives_back = True
    elif outcome == Outcome.CANCELLED:
        settlement.target, event = State.CANCELLED, "cancelled"
        settlement.finished_at, settlement.last_error = now, error_message
    elif outcome == Outcome.DISCARDED or job.attempts > job.max_retries:
        settlement.target, event = State.DEAD, "dead"
        settlement.finished_at, settlement.last_error = now, error_message
    else:
        settlement.target, event = State.RETRYING, "retried"
        delay = datetime.timedelta(seconds=retry_delay(job))
        settlement.available_at, settlement.last_error = now + delay, error_message
    return Ack(job, settlement, event, error_message or None)


def apply(ack: Ack, *, using: str | None = None) -> bool:
    """Write ``ack`` if the job is still leased under the same token; True if it was."""
    return apply_many([ack], using=using)[0]


def apply_many(batch: Sequence[Ack], *, using: str | None = None) -> list[bool]:
    """Write several outcomes at once (one statement per database round, see
    :func:`durable_jobs.states.settle`); each is still guarded by its own job's lease.
    Returns which were written.

    All or nothing: if the database refuses one of them, none is written and the error
    propagates, so the caller can retry them one by one.
    """
    moved = record(batch, using=using)
    announce(batch, moved, using=using)
    return moved


def record(batch: Sequence[Ack], *, using: str | None = None) -> list[bool]:
    """Write the outcomes (in the caller's transaction, if there is one); return which were
    written. Call :func:`announce` once they are committed."""
    return settle([ack.settlement for ack in batch], using=using)


def announce(batch: Sequence[Ack], written: Sequence[bool], *, using: str | None = None) -> None:
    """After the outcomes' commit: log them, send ``job_finished``, and finish the batches
    whose last job this was."""
    for ack, ok in zip(batch, written, strict=True):
        _after_commit(ack, ok)
    _finish_batches(
        (
            ack.job.batch_id
            for ack, ok in zip(batch, written, strict=True)
            if ok and ack.target in FINAL and ack.job.batch_id
        ),
        using=using,
    )


def _finish_batches(batch_ids: Iterable[int], *, using: str | None = None) -> None:
    ids = set(batch_ids)
    if not ids:
        return
    from durable_jobs.flow.batches import finish_ready

    try:
        finish_ready(ids, using=using)
    except DatabaseError as exc:
        # The outcomes are committed; the batch sweep finishes these batches later.
        logging.getLogger("durable_jobs").warning(
            "could not check batches %s for completion: %s", sorted(ids), exc
        )


def _after_commit(ack: Ack, moved: bool) -> None:
    if not moved:
        # The job moved on without this worker: its lease expired and it was rescued,
        # or an operator cancelled it. Nothing was written.
        log_event(
            logging.WARNING, "rejected", ack.job, node=ack.attempt.node, outcome=ack.attempt.outcome
        )
        return
    ack.job.state = ack.target
    if ack.target in FINAL:
        # The outcome is committed; a failing receiver must not make it look otherwise.
        for receiver, response in job_finished.send_robust(
            sender=Job, job=ack.job, attempt=ack.attempt
        ):
            if isinstance(response, Exception):
                logging.getLogger("durable_jobs").error(
                    "job_finished receiver %r failed: %s", receiver, response, exc_info=response
                )
    log_event(
        EVENT_LEVELS.get(ack.event, logging.INFO),
        ack.event,
        ack.job,
        node=ack.attempt.node,
        duration_ms=round(ack.attempt.duration.total_seconds() * 1000, 3),
        error=ack.error,
        outcome=ack.attempt.outcome,
        **ack.extra,
    )


def clean_text(text: str) -> str:
    """Text every database will store: PostgreSQL refuses NUL characters in text columns,
    and no driver can encode a lone surrogate (an error message quoting a file name
    decoded with 'surrogateescape'); either would stop the worker recording the outcome."""
    if not text.isascii():
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text.replace("\x00", "\\x00")


def stripped(ack: Ack) -> Ack:
    """The same outcome without the handler's data (result, log lines, traceback).

    Used when the database refused the full acknowledgement (a value it cannot store):
    recording the outcome matters more than its details, and retrying the same write
    forever would stall the worker while its other jobs' leases ran out.
    """
    settlement = dataclasses.replace(ack.settlement)
    if settlement.sets_result:
        settlement.result = {"repr": "the result could not be stored"}
    attempt = settlement.attempt
    attempt.log = ""
    attempt.traceback = ""
    attempt.error_message = attempt.error_message.encode("ascii", "replace").decode()[:10_000]
    if settlement.last_error is not None:
        settlement.last_error = attempt.error_message
    return Ack(ack.job, settlement, ack.event, ack.error, ack.extra)


def retry_delay(job: Job) -> float:
    """Seconds before the next attempt, from the handler's backoff (default: exponential)."""
    try:
        backoff = registry.get_handler(job.name).backoff
    except UnknownJob:
        backoff = exponential
    try:
        delay = float(backoff(job.attempts))
    except Exception as exc:
        # A @job(backoff=...) function is the project's code, and this runs in the worker's
        # loop: its error must cost this job its custom delay, not stop the worker.
        logging.getLogger("durable_jobs").error(
            "the backoff of %s failed (%s: %s); using the default exponential backoff. "
            "@job(backoff=...) takes a function of the attempt number returning seconds.",
            job.name,
            type(exc).__name__,
            exc,
        )
        delay = exponential(job.attempts)
    if delay != delay:  # NaN: timedelta(seconds=nan) raises
        delay = 0.0
    return min(max(0.0, delay), MAX_DELAY_SECONDS)


def describe_error(error: BaseException | None) -> tuple[str, str, str]:
    """(class path, the whole cause chain as text, the formatted traceback)."""
    if error is None:
        return "", "", ""
    cls = type(error)
    chain, seen = [], set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        chain.append(f"{type(current).__qualname__}: {_text_of(current)}")
        current = current.__cause__ or (
            None if current.__suppress_context__ else current.__context__
        )
    message = "\ncaused by: ".join(chain)
    trace = "".join(tb.format_exception(error)) if error.__traceback__ else ""
    return f"{cls.__module__}.{cls.__qualname__}", message, trace


def _text_of(error: BaseException) -> str:
    """``str(error)``, or a note when the exception's own ``__str__`` fails: this runs in
    the worker's loop, where an exception escaping would stop the worker."""
    try:
        return str(error)
    except Exception as exc:
        return f"<str() of the exception failed: {type(exc).__name__}>"


def unreported_result(
    job: Job,
    *,
    now: datetime.datetime,
    outcome: Outcome,
    error: BaseException | None = None,
) -> RunResult:
    """A result the handler did not return itself: its lease expired (``LOST``), its worker
    stopped (``INTERRUPTED``), or the worker recorded a timeout or a thread's exit."""
    if error is None and outcome == Outcome.LOST:
        error = LeaseExpired(
            f"the lease expired at {job.lease_expires_at:%Y-%m-%d %H:%M:%S} UTC without a "
            "report: the worker died, hung, or lost its database connection"
        )
    elif error is None:
        error = WorkerStopped("the worker stopped before the job finished; the job was handed back")
    started = job.attempted_at or now
    return RunResult(
        job=job, outcome=outcome, started_at=started, finished_at=max(now, started), error=error
    )
