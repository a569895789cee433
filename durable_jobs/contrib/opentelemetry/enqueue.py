"""The enqueue hook: a PRODUCER span per new job, its context stored in the job.

An enqueue of one job (``.delay()``, ``enqueue``, a Task's ``enqueue``, a schedule's
tick) makes that job's span current around the insert, so spans of an instrumented
database driver nest under it. ``enqueue_many`` inserts every job in one statement: each
job still gets its own span and its own context, and none is made current.

A span ends when the insert returns. It reports the insert's error if it fails, and a
job that already existed (its idempotency key was taken) as a duplicate. It cannot know
whether the caller's transaction commits later: an enqueue rolled back with its
transaction keeps its span, and its job never runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextvars import Token
from types import TracebackType
from typing import TYPE_CHECKING

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Status, StatusCode

from durable_jobs.contrib.opentelemetry import semconv
from durable_jobs.contrib.opentelemetry.propagation import META_KEY, carrier_for

if TYPE_CHECKING:
    from durable_jobs.models import Job


class EnqueueTracing:
    """``hook(jobs)`` for :func:`durable_jobs.hooks.add_enqueue_hook`."""

    def __init__(self, tracer: trace.Tracer) -> None:
        self.tracer = tracer

    def __call__(self, jobs: Sequence[Job]) -> Sending:
        spans = []
        for job in jobs:
            span = self.tracer.start_span(
                semconv.enqueue_name(job),
                kind=SpanKind.PRODUCER,
                attributes=semconv.enqueue_attributes(job),
            )
            carrier = carrier_for(span)
            if carrier:
                job.meta[META_KEY] = carrier
            spans.append(span)
        return Sending(list(jobs), spans)


class Sending:
    """Around the insert: the single job's span current, every span ended after it."""

    def __init__(self, jobs: list[Job], spans: list[trace.Span]) -> None:
        self.jobs = jobs
        self.spans = spans
        self.token: Token[Context] | None = None

    def __enter__(self) -> None:
        if len(self.spans) == 1:
            self.token = otel_context.attach(trace.set_span_in_context(self.spans[0]))

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        try:
            if self.token is not None:
                otel_context.detach(self.token)
            for job, span in zip(self.jobs, self.spans, strict=True):
                if exc is not None:
                    span.record_exception(exc)
                    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
                elif job.pk is not None:
                    span.set_attribute(semconv.MESSAGE_ID, str(job.pk))
                else:
                    span.set_attribute(semconv.DUPLICATE, True)
        finally:
            for span in self.spans:
                span.end()
