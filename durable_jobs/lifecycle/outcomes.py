"""What an attempt's end means: one decision, from a :class:`RunResult` to a :class:`Settlement`.

:func:`decide` is the only place that turns how a handler ended (returned, raised,
timed out, was handed back, lost its lease) into the job's next state and the fields
to write. Nothing here touches the database: :mod:`durable_jobs.lifecycle.recording`
writes settlements, fenced by their lease token.
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from durable_jobs import resolve
from durable_jobs.backoff import exponential
from durable_jobs.db.rows import new_instance
from durable_jobs.exceptions import LeaseExpired, UnknownJob, WorkerStopped
from durable_jobs.lifecycle.errors import clean_text, describe_error
from durable_jobs.lifecycle.states import State
from durable_jobs.limits import MAX_SECONDS
from durable_jobs.models import GIVEN_BACK_OUTCOMES, Attempt, Job, Outcome

if TYPE_CHECKING:
    from durable_jobs.handlers import JobHandler

logger = logging.getLogger("durable_jobs")


@dataclass
class RunResult:
    """How one attempt ended, as the worker saw it."""

    job: Job
    outcome: Outcome
    started_at: datetime.datetime
    finished_at: datetime.datetime
    value: Any = None
    error: BaseException | None = None
    snooze_seconds: float = 0.0
    log_lines: list[str] = field(default_factory=list)
    #: The job's handler, as the worker looked it up (None: not known here, or not looked up).
    handler: JobHandler[..., Any] | None = None

    @property
    def duration(self) -> datetime.timedelta:
        return self.finished_at - self.started_at


@dataclass
class Settlement:
    """How one lease ended: the job's next state, what to write with it, its attempt, and
    the lifecycle event to log once it is written.

    Written only while the job is still leased under ``lease_token``.
    """

    job: Job
    lease_token: Any
    target: State
    attempt: Attempt
    updated_at: datetime.datetime
    #: The lifecycle event logged once written (``completed``, ``retried``, ``dead``, ...).
    event: str
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
    #: The error as logged with the event.
    error: str | None = None
    #: More fields for the event's log record.
    extra: dict[str, Any] = field(default_factory=dict)
    #: What the handler raised (or the worker recorded), for ``job_finished``'s receivers.
    exception: BaseException | None = None

    @property
    def job_id(self) -> int:
        return self.job.pk


def decide(result: RunResult, *, node: str) -> Settlement:
    """The state and fields an attempt's outcome leads to."""
    job, outcome, now = result.job, result.outcome, result.finished_at
    error_class, error_message, trace = (clean_text(t) for t in describe_error(result.error))
    attempt = new_instance(
        Attempt,
        job_id=job.pk,
        number=job.attempts,
        name=job.name,
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
        job=job,
        lease_token=job.lease_token,
        target=State.COMPLETED,
        attempt=attempt,
        updated_at=now,
        event="completed",
        error=error_message or None,
        exception=result.error,
    )
    if outcome == Outcome.COMPLETED:
        settlement.finished_at = now
        settlement.sets_result, settlement.result = True, result.value
        settlement.last_error = ""
    elif outcome in GIVEN_BACK_OUTCOMES:  # not failures of the job
        settlement.target = State.QUEUED
        settlement.event = "snoozed" if outcome == Outcome.SNOOZED else "handed back"
        settlement.available_at = now + datetime.timedelta(seconds=result.snooze_seconds)
        settlement.gives_back = True
    elif outcome == Outcome.CANCELLED:
        settlement.target, settlement.event = State.CANCELLED, "cancelled"
        settlement.finished_at, settlement.last_error = now, error_message
    elif outcome == Outcome.DISCARDED or job.attempts > job.max_retries:
        settlement.target, settlement.event = State.DEAD, "dead"
        settlement.finished_at, settlement.last_error = now, error_message
    else:
        settlement.target, settlement.event = State.RETRYING, "retried"
        delay = datetime.timedelta(seconds=retry_delay(job, result.handler))
        settlement.available_at, settlement.last_error = now + delay, error_message
    return settlement


def unreported(
    job: Job,
    *,
    now: datetime.datetime,
    outcome: Outcome,
    error: BaseException | None = None,
    handler: JobHandler[..., Any] | None = None,
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
    finished = max(now, started)
    return RunResult(job, outcome, started, finished, error=error, handler=handler)


def stripped(settlement: Settlement) -> Settlement:
    """The same outcome without the handler's data (result, log lines, traceback).

    For when the database refused the full outcome (a value it cannot store): recording
    the outcome matters more than its details, and retrying the same write forever would
    stall the worker while its other jobs' leases ran out.
    """
    plain = dataclasses.replace(settlement)
    if plain.sets_result:
        plain.result = {"repr": "the result could not be stored"}
    attempt = plain.attempt
    attempt.log = ""
    attempt.traceback = ""
    attempt.error_message = attempt.error_message.encode("ascii", "replace").decode()[:10_000]
    if plain.last_error is not None:
        plain.last_error = attempt.error_message
    return plain


def retry_delay(job: Job, handler: JobHandler[..., Any] | None = None) -> float:
    """Seconds before the next attempt, from the handler's backoff (default: exponential);
    the handler is looked up unless given."""
    try:
        backoff = (handler or resolve.handler_for(job)).backoff
    except UnknownJob:
        backoff = exponential
    try:
        delay = float(backoff(job.attempts))
    except Exception as exc:
        # A @job(backoff=...) function is the project's code, and this runs in the worker's
        # loop: its error must cost this job its custom delay, not stop the worker.
        logger.error(
            "the backoff of %s failed (%s: %s); using the default exponential backoff. "
            "@job(backoff=...) takes a function of the attempt number returning seconds.",
            job.name,
            type(exc).__name__,
            exc,
        )
        delay = exponential(job.attempts)
    if delay != delay:  # NaN: timedelta(seconds=nan) raises
        delay = 0.0
    return min(max(0.0, delay), MAX_SECONDS)
