"""Recording how an attempt ended: one decision, one guarded write.

:func:`decide` classifies a finished attempt into an :class:`Ack` (the target
state and the fields to write); :func:`apply` writes it with
:func:`durable_jobs.states.transition`, guarded by ``state = 'leased'`` and the
lease token. A worker whose lease was lost (rescued by another node, cancelled by
an operator, handed back) therefore changes nothing: its write matches no row.
"""

from __future__ import annotations

import datetime
import logging
import traceback as tb
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import DatabaseError
from django.db.models import F

from durable_jobs import registry
from durable_jobs.backoff import MAX_DELAY_SECONDS, exponential
from durable_jobs.db import backend_for
from durable_jobs.exceptions import LeaseExpired, UnknownJob, WorkerStopped
from durable_jobs.logging import log_event
from durable_jobs.models import Attempt, Job, Outcome
from durable_jobs.signals import job_finished
from durable_jobs.states import FINAL, State, held, transition
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
    job: Job
    lease_token: Any
    target: State
    changes: dict[str, Any]
    attempt: Attempt
    event: str
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def decide(result: RunResult, *, node: str) -> Ack:
    """The state and fields an attempt's outcome leads to."""
    job, outcome, now = result.job, result.outcome, result.finished_at
    error_class, error_message, trace = (clean_text(t) for t in describe_error(result.error))
    error_class = error_class[:255]
    changes: dict[str, Any] = {
        "updated_at": now,
        "lease_expires_at": None,
        "leased_by": None,
    }
    event: str
    if outcome == Outcome.COMPLETED:
        target, event = State.COMPLETED, "completed"
        changes.update(finished_at=now, result=result.value, last_error="")
        if job.progress is not None:
            changes["progress"] = 100.0
    elif outcome in GIVEN_BACK:
        target = State.QUEUED
        event = "snoozed" if outcome == Outcome.SNOOZED else "handed back"
        delay = datetime.timedelta(seconds=result.snooze_seconds)
        changes.update(available_at=now + delay, attempts=F("attempts") - 1)
    elif outcome == Outcome.CANCELLED:
        target, event = State.CANCELLED, "cancelled"
        changes.update(finished_at=now, last_error=error_message)
    elif outcome == Outcome.DISCARDED or job.attempts > job.max_retries:
        target, event = State.DEAD, "dead"
        changes.update(finished_at=now, last_error=error_message)
    else:
        target, event = State.RETRYING, "retried"
        delay = datetime.timedelta(seconds=retry_delay(job))
        changes.update(available_at=now + delay, last_error=error_message)
    attempt = Attempt(
        job_id=job.pk,
        number=job.attempts,
        node=node,
        started_at=result.started_at,
        finished_at=result.finished_at,
        duration=result.duration,
        outcome=outcome,
        error_class=error_class,
        error_message=error_message,
        traceback=trace,
        log=clean_text("\n".join(result.log_lines)),
    )
    return Ack(job, job.lease_token, target, changes, attempt, event, error_message or None)


def apply(ack: Ack, *, using: str | None = None) -> bool:
    """Write ``ack`` if the job is still leased under the same token; True if it was."""
    return apply_many([ack], using=using)[0]


def apply_many(batch: Sequence[Ack], *, using: str | None = None) -> list[bool]:
    """Write several outcomes in one transaction (one commit, one multi-row insert of the
    attempts); each is still guarded by its own job's lease. Returns which were written.

    All or nothing: if the database refuses one of them, none is written and the error
    propagates, so the caller can retry them one by one.
    """
    backend = backend_for(using)
    moved: list[bool] = []
    with backend.write_transaction():
        for ack in batch:
            leased = held([ack.job.pk], ack.lease_token, using=backend.alias)
            moved.append(transition(leased, ack.target, **ack.changes) == 1)
        Attempt.objects.using(backend.alias).bulk_create(
            [ack.attempt for ack, ok in zip(batch, moved, strict=True) if ok]
        )
    for ack, ok in zip(batch, moved, strict=True):
        _after_commit(ack, ok)
    _finish_batches(
        (
            ack.job.batch_id
            for ack, ok in zip(batch, moved, strict=True)
            if ok and ack.target in FINAL and ack.job.batch_id
        ),
        using=backend.alias,
    )
    return moved


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
    changes = {**ack.changes}
    if "result" in changes:
        changes["result"] = {"repr": "the result could not be stored"}
    attempt = ack.attempt
    attempt.log = ""
    attempt.traceback = ""
    attempt.error_message = attempt.error_message.encode("ascii", "replace").decode()[:10_000]
    changes["last_error"] = attempt.error_message
    return Ack(ack.job, ack.lease_token, ack.target, changes, attempt, ack.event, ack.error)


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
