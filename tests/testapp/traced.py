"""Handlers and views for tests/test_opentelemetry_traces.py (served by tests/otel_urls.py).

The handlers report the span that is current while they run, so a test can check that
the attempt's CONSUMER span, and the enqueue's baggage, reach the handler's code.
"""

from __future__ import annotations

import asyncio
import json

from django.http import HttpRequest, JsonResponse
from opentelemetry import baggage, trace
from opentelemetry import context as otel_context

import durable_jobs
from durable_jobs import job
from durable_jobs.registry import get_handler
from tests.testapp import tasks


def current_span() -> dict[str, object]:
    ids = trace.get_current_span().get_span_context()
    return {
        "trace_id": f"{ids.trace_id:032x}",
        "span_id": f"{ids.span_id:016x}",
        "tenant": baggage.get_baggage("tenant"),
    }


@job(name="tests.traced.sync")
def traced_sync() -> dict[str, object]:
    return current_span()


@job(name="tests.traced.async")
async def traced_async() -> dict[str, object]:
    await asyncio.sleep(0)  # the span stays current across the handler's awaits
    return current_span()


def enqueue(request: HttpRequest) -> JsonResponse:
    """Enqueue what the JSON body asks: ``{"name", "payload"}``, ``{"many": [...]}`` of
    them, or ``{"task": true}`` (Django's Tasks framework); ``baggage`` is set around it."""
    body = json.loads(request.body)
    token = None
    if "baggage" in body:
        token = otel_context.attach(baggage.set_baggage("tenant", body["baggage"]))
    try:
        if body.get("task"):
            return JsonResponse({"jobs": [int(tasks.add.enqueue(1, 2).id)]})
        if "many" in body:
            jobs = durable_jobs.enqueue_many(
                [get_handler(j["name"]).prepare(**j.get("payload", {})) for j in body["many"]]
            )
            return JsonResponse({"jobs": [j.pk for j in jobs]})
        one = durable_jobs.enqueue(body["name"], body.get("payload", {}))
        return JsonResponse({"jobs": [one.pk]})
    finally:
        if token is not None:
            otel_context.detach(token)


async def aenqueue(request: HttpRequest) -> JsonResponse:
    """An async view: ``adelay()`` inserts in a worker thread, which gets the view's context."""
    job = await traced_sync.adelay()
    return JsonResponse({"jobs": [job.pk]})
