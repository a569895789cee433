"""The execution middleware: each attempt in a CONSUMER span, child of its enqueue's.

The span is current while the handler runs (for an ``async def`` handler, until its
coroutine finishes), so spans the handler opens, and instrumented libraries it calls,
join the trace of the request that enqueued the job. Every attempt of a job (retries,
snoozes) is a sibling under the same enqueue span.

The outcome attribute uses the names of :class:`durable_jobs.models.Outcome`. Failed,
timed out and discarded attempts (the outcomes the admin counts as failures) record
their exception and set the span's status to ERROR; snoozed, cancelled and interrupted
ones do not. Nothing raised is swallowed: the worker decides the job's next state from
it as it would without tracing.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode

from durable_jobs.contrib.opentelemetry import semconv
from durable_jobs.contrib.opentelemetry.propagation import context_from
from durable_jobs.exceptions import Cancel, Discard, JobTimeout, PayloadMismatch, Snooze
from durable_jobs.worker.pool import Interrupted, TimedOut

if TYPE_CHECKING:
    from durable_jobs.context import JobContext
    from durable_jobs.models import Job

#: Outcomes whose span reports an error (the ones ``durable_jobs.models.FAILED_OUTCOMES``
#: counts, but ``lost``, which no attempt's own span can see).
ERROR_OUTCOMES = frozenset({"failed", "timed_out", "discarded"})


class AttemptTracing:
    """A middleware factory for :func:`durable_jobs.hooks.add_middleware`."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self.tracer = tracer

    def __call__(self, call_next: Callable[[JobContext], Any]) -> Callable[[JobContext], Any]:
        tracer = self.tracer

        def traced(context: JobContext) -> Any:
            attempt = TracedAttempt(tracer, context)
            try:
                with attempt.current():
                    result = call_next(context)
            except BaseException as exc:
                attempt.end(exc)
                raise
            if inspect.isawaitable(result):
                return attempt.awaiting(result)
            attempt.end(None)
            return result

        return traced


class TracedAttempt:
    """One attempt's span, from the handler's start to its outcome."""

    def __init__(self, tracer: trace.Tracer, context: JobContext) -> None:
        self.job = context.job
        parent = context_from(self.job.meta)
        self.span = tracer.start_span(
            semconv.run_name(self.job),
            context=parent,
            kind=SpanKind.CONSUMER,
            attributes=semconv.run_attributes(self.job, context.attempt),
        )
        # The parent context also brings the enqueue's baggage to the handler.
        self.context = trace.set_span_in_context(self.span, parent)

    @contextlib.contextmanager
    def current(self) -> Iterator[None]:
        token = otel_context.attach(self.context)
        try:
            yield
        finally:
            otel_context.detach(token)

    async def awaiting(self, result: Awaitable[Any]) -> Any:
        """The async handler's result, awaited with the span current (the chain runs
        inside the event loop, so the context reaches the handler's task)."""
        try:
            with self.current():
                value = await result
        except BaseException as exc:
            self.end(exc)
            raise
        self.end(None)
        return value

    def end(self, exc: BaseException | None) -> None:
        span = self.span
        try:
            outcome, error = outcome_of(exc, self.job)
            span.set_attribute(semconv.OUTCOME, outcome)
            if isinstance(exc, Snooze):
                span.set_attribute(semconv.SNOOZE_SECONDS, exc.seconds)
            if error is not None and outcome in ERROR_OUTCOMES:
                span.record_exception(error)
                span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
        finally:
            span.end()


def outcome_of(exc: BaseException | None, job: Job) -> tuple[str, BaseException | None]:
    """``(outcome, error)``: how the attempt ended, named as ``Outcome`` names it, and the
    error to record on its span."""
    if exc is None:
        return "completed", None
    if isinstance(exc, Snooze):
        return "snoozed", exc
    if isinstance(exc, Cancel):
        return "cancelled", exc
    if isinstance(exc, Discard | PayloadMismatch):
        return "discarded", exc
    if isinstance(exc, JobTimeout):
        return "timed_out", exc
    if isinstance(exc, TimedOut):
        # A sync handler stopped by its worker at its timeout: the error the attempt records.
        timeout = job.timeout or 0
        return "timed_out", JobTimeout(f"the job ran longer than its timeout of {timeout:g}s")
    if isinstance(exc, Interrupted):
        return "interrupted", None  # handed back by a stopping worker: not a failure
    return "failed", exc
