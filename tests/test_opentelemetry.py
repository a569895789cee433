"""durable_jobs.contrib.opentelemetry's parts: the trace context kept in Job.meta, and
the check that OPENTELEMETRY can be honoured (durable_jobs.E021)."""

from __future__ import annotations

import sys

import pytest
from django.core import checks
from django.test import override_settings
from opentelemetry import baggage, trace
from opentelemetry import context as otel_context
from opentelemetry.context import Context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState

from durable_jobs.contrib.opentelemetry.propagation import META_KEY, carrier_for, context_from

TRACE_ID = 0x4BF92F3577B34DA6A3CE929D0E0E4736
SPAN_ID = 0x00F067AA0BA902B7


@pytest.fixture
def tracer() -> trace.Tracer:
    return TracerProvider().get_tracer("tests")


def remote_parent(trace_state: TraceState | None = None) -> Context:
    parent = SpanContext(
        TRACE_ID, SPAN_ID, is_remote=True, trace_flags=TraceFlags(1), trace_state=trace_state
    )
    return trace.set_span_in_context(NonRecordingSpan(parent))


def test_a_span_s_carrier_is_its_w3c_trace_context(tracer) -> None:
    span = tracer.start_span("enqueue", context=remote_parent())
    ids = span.get_span_context()
    assert carrier_for(span) == {
        "traceparent": f"00-{TRACE_ID:032x}-{ids.span_id:016x}-01",
    }


def test_the_carrier_keeps_tracestate_and_baggage(tracer) -> None:
    parent = baggage.set_baggage("tenant", "acme", remote_parent(TraceState([("vendor", "x1")])))
    span = tracer.start_span("enqueue", context=parent)
    token = otel_context.attach(parent)
    try:
        carrier = carrier_for(span)
    finally:
        otel_context.detach(token)
    assert carrier["tracestate"] == "vendor=x1"
    assert carrier["baggage"] == "tenant=acme"
    restored = context_from({META_KEY: carrier})
    assert trace.get_current_span(restored).get_span_context().span_id == (
        span.get_span_context().span_id
    )
    assert baggage.get_baggage("tenant", restored) == "acme"


def test_a_span_without_sdk_carries_nothing() -> None:
    # The API's own no-op tracer: no meta is written when no SDK is configured.
    span = trace.NoOpTracer().start_span("enqueue")
    assert carrier_for(span) == {}


def test_the_stored_context_parents_the_attempt(tracer) -> None:
    span = tracer.start_span("enqueue")
    restored = context_from({META_KEY: carrier_for(span), "other": 1})
    parent = trace.get_current_span(restored).get_span_context()
    assert parent.is_remote
    assert (parent.trace_id, parent.span_id) == (
        span.get_span_context().trace_id,
        span.get_span_context().span_id,
    )


@pytest.mark.parametrize(
    "meta",
    [
        None,
        "not a dict",
        {},
        {META_KEY: None},
        {META_KEY: "00-abc"},
        {META_KEY: ["traceparent"]},
        {META_KEY: {}},
        {META_KEY: {"traceparent": 5}},
        {META_KEY: {"traceparent": "garbage"}},
        {META_KEY: {"traceparent": f"00-{0:032x}-{SPAN_ID:016x}-01"}},  # an invalid trace id
        {META_KEY: {1: "x", "traceparent": ["00"]}},
    ],
)
def test_no_or_garbled_context_gives_an_empty_one(meta) -> None:
    restored = context_from(meta)
    assert not trace.get_current_span(restored).get_span_context().is_valid


def test_an_empty_context_never_takes_the_current_span(tracer) -> None:
    # A worker thread's own current span (if any) is not the job's parent.
    with tracer.start_as_current_span("around the worker"):
        restored = context_from({})
    assert trace.get_current_span(restored) is trace.INVALID_SPAN


def e021(value: object) -> list[checks.CheckMessage]:
    with override_settings(DURABLE_JOBS={"OPENTELEMETRY": value}):
        return [m for m in checks.run_checks() if m.id == "durable_jobs.E021"]


@pytest.mark.parametrize("value", [True, False])
def test_a_boolean_with_the_api_installed_passes(value) -> None:
    assert e021(value) == []


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_a_value_other_than_a_boolean_fails(value) -> None:
    [message] = e021(value)
    assert message.msg == f"OPENTELEMETRY must be True or False (got {value!r})."


def test_true_without_the_api_fails_and_says_what_to_install(monkeypatch) -> None:
    # A None entry in sys.modules makes the import fail as if the package were absent.
    monkeypatch.setitem(sys.modules, "opentelemetry.trace", None)
    [message] = e021(True)
    assert message.msg.startswith("OPENTELEMETRY is True, but opentelemetry-api cannot be imported")
    assert message.hint == 'pip install "django-durable-jobs[opentelemetry]".'
    assert e021(False) == []
