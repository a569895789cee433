"""The enqueue's trace context, carried in ``Job.meta["otel"]``.

The carrier is what the global propagator writes (W3C ``traceparent``, ``tracestate``
when set, and ``baggage`` with the default propagators), stored as a JSON object of
strings, so a worker in another process, on another host, or days later, continues the
trace. Reading never fails: a missing or garbled carrier (a job enqueued before tracing
was on, or meta written by hand) gives an empty context, and the attempt's span is a
root.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.context import Context

#: The key of ``Job.meta`` that holds the carrier.
META_KEY = "otel"


def carrier_for(span: trace.Span) -> dict[str, str]:
    """The propagation fields of ``span``'s context (with the current baggage); empty when
    the span is not recording (no SDK configured), so untraced jobs carry nothing."""
    carrier: dict[str, str] = {}
    if span.get_span_context().is_valid:
        propagate.inject(carrier, context=trace.set_span_in_context(span))
    return carrier


def context_from(meta: Any) -> Context:
    """The context to parent an attempt's span on: the one stored in ``meta``, or an
    empty one (never the worker thread's current context)."""
    carrier = meta.get(META_KEY) if isinstance(meta, Mapping) else None
    if not isinstance(carrier, Mapping):
        return Context()
    fields = {k: v for k, v in carrier.items() if isinstance(k, str) and isinstance(v, str)}
    return propagate.extract(fields, context=Context())
