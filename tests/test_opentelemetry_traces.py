"""End to end: a request to an instrumented Django view enqueues jobs, a real worker
thread runs them, and the SDK's in-memory exporter shows one trace per request:
SERVER (the view) -> PRODUCER (the enqueue) -> one CONSUMER per attempt."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from django.apps import apps
from django.db import transaction
from django.db.transaction import TransactionManagementError
from django.test import AsyncClient, Client, override_settings
from opentelemetry.instrumentation.django import DjangoInstrumentor
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from durable_jobs import enqueue, hooks
from durable_jobs.contrib import opentelemetry as job_tracing
from durable_jobs.models import Attempt, Job
from durable_jobs.states import State
from tests.conftest import wait_for
from tests.testapp import jobs, traced  # noqa: F401  (traced registers its handlers)

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.urls("tests.otel_urls")]


@pytest.fixture
def provider() -> Iterator[TracerProvider]:
    provider = TracerProvider()
    yield provider
    provider.shutdown()


@pytest.fixture
def exporter(provider: TracerProvider) -> Iterator[InMemorySpanExporter]:
    """Tracing installed into ``provider``, and the request spans of an instrumented Django."""
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    job_tracing.install(tracer_provider=provider)
    DjangoInstrumentor().instrument(tracer_provider=provider)
    yield exporter
    DjangoInstrumentor().uninstrument()
    job_tracing.uninstall()


def request(**body: Any) -> list[int]:
    response = Client().post("/enqueue/", json.dumps(body), content_type="application/json")
    assert response.status_code == 200, response.content
    return response.json()["jobs"]


def spans(exporter: InMemorySpanExporter, kind: SpanKind) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.kind == kind]


def run_span(exporter: InMemorySpanExporter, job_id: int, attempt: int = 1) -> ReadableSpan:
    """The CONSUMER span of ``job_id``'s attempt, once it has ended."""

    def found() -> ReadableSpan | None:
        for span in spans(exporter, SpanKind.CONSUMER):
            attributes = span.attributes or {}
            if (attributes["messaging.message.id"], attributes["durable_jobs.attempt"]) == (
                str(job_id),
                attempt,
            ):
                return span
        return None

    return wait_for(found, timeout=20)


def enqueue_span(exporter: InMemorySpanExporter, job_id: int) -> ReadableSpan:
    [span] = [
        s
        for s in spans(exporter, SpanKind.PRODUCER)
        if (s.attributes or {}).get("messaging.message.id") == str(job_id)
    ]
    return span


def parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def finished(job_id: int, *states: str) -> Job:
    return wait_for(lambda: Job.objects.filter(pk=job_id, state__in=states).first(), timeout=20)


def hex_ids(span: ReadableSpan) -> dict[str, str]:
    assert span.context is not None
    return {"trace_id": f"{span.context.trace_id:032x}", "span_id": f"{span.context.span_id:016x}"}


@pytest.mark.parametrize("name", ["tests.traced.sync", "tests.traced.async"])
def test_a_request_and_the_job_it_enqueues_are_one_trace(exporter, durable_worker, name) -> None:
    [job_id] = request(name=name, baggage="acme")
    [server] = spans(exporter, SpanKind.SERVER)
    producer = enqueue_span(exporter, job_id)
    assert producer.name == f"durable_jobs enqueue {name}"
    assert parent_id(producer) == server.context.span_id
    assert producer.context.trace_id == server.context.trace_id
    assert dict(producer.attributes or {}) == {
        "messaging.system": "durable_jobs",
        "messaging.operation.type": "send",
        "messaging.operation.name": "enqueue",
        "messaging.destination.name": "default",
        "messaging.message.id": str(job_id),
        "durable_jobs.handler": name,
    }
    stored = Job.objects.get(pk=job_id).meta["otel"]
    assert stored["traceparent"] == (
        f"00-{producer.context.trace_id:032x}-{producer.context.span_id:016x}-"
        f"{producer.context.trace_flags:02x}"
    )
    assert stored["baggage"] == "tenant=acme"

    durable_worker("default:2")
    job = finished(job_id, State.COMPLETED)
    consumer = run_span(exporter, job_id)
    assert consumer.name == f"durable_jobs run {name}"
    assert consumer.context.trace_id == server.context.trace_id
    assert parent_id(consumer) == producer.context.span_id
    assert consumer.parent.is_remote
    assert dict(consumer.attributes or {}) == {
        "messaging.system": "durable_jobs",
        "messaging.operation.type": "process",
        "messaging.operation.name": "run",
        "messaging.destination.name": "default",
        "messaging.message.id": str(job_id),
        "durable_jobs.handler": name,
        "durable_jobs.attempt": 1,
        "durable_jobs.outcome": "completed",
    }
    assert consumer.status.status_code == StatusCode.UNSET
    assert consumer.events == ()
    # The handler ran with the CONSUMER span current and the request's baggage.
    assert job.result == {**hex_ids(consumer), "tenant": "acme"}


@pytest.mark.usefixtures("async_connections_closed")
def test_an_async_view_s_enqueue_joins_its_trace(exporter, durable_worker) -> None:
    response = asyncio.run(AsyncClient().get("/aenqueue/"))
    [job_id] = response.json()["jobs"]
    [server] = spans(exporter, SpanKind.SERVER)
    producer = enqueue_span(exporter, job_id)
    assert parent_id(producer) == server.context.span_id
    durable_worker("default:1")
    job = finished(job_id, State.COMPLETED)
    consumer = run_span(exporter, job_id)
    assert parent_id(consumer) == producer.context.span_id
    assert job.result["trace_id"] == f"{server.context.trace_id:032x}"


def test_a_failing_attempt_records_its_exception_and_each_retry_is_a_sibling(
    exporter, durable_worker
) -> None:
    # tests.fixed_backoff always fails, retried after 1 s.
    [job_id] = request(name="tests.fixed_backoff")
    producer = enqueue_span(exporter, job_id)
    durable_worker("default:1")
    first, second = run_span(exporter, job_id, 1), run_span(exporter, job_id, 2)
    for span in (first, second):
        assert parent_id(span) == producer.context.span_id
        assert (span.attributes or {})["durable_jobs.outcome"] == "failed"
        assert span.status.status_code == StatusCode.ERROR
        assert span.status.description == "RuntimeError: nope"
        [event] = span.events
        assert event.name == "exception"
        assert (event.attributes or {})["exception.type"] == "RuntimeError"
        assert (event.attributes or {})["exception.message"] == "nope"
    assert first.context.span_id != second.context.span_id


@pytest.mark.parametrize(
    ("name", "outcome", "error"),
    [
        ("tests.snoozer", "snoozed", None),
        ("tests.canceller", "cancelled", None),
        ("tests.discarder", "discarded", "Discard: malformed input"),
        (
            "tests.async_slow",
            "timed_out",
            "JobTimeout: the job ran longer than its timeout of 0.3s",
        ),
        (
            "tests.slow_timeout",
            "timed_out",
            "JobTimeout: the job ran longer than its timeout of 0.5s",
        ),
    ],
)
def test_each_outcome_is_an_attribute_and_only_failures_are_errors(
    exporter, durable_worker, name, outcome, error
) -> None:
    [job_id] = request(name=name)
    durable_worker("default:1")
    span = run_span(exporter, job_id)
    assert (span.attributes or {})["durable_jobs.outcome"] == outcome
    attempt = wait_for(lambda: Attempt.objects.filter(job_id=job_id).first(), timeout=20)
    assert attempt.outcome == outcome  # the span says what the attempt row says
    if error is None:
        assert span.status.status_code == StatusCode.UNSET
        assert span.events == ()
    else:
        assert span.status.status_code == StatusCode.ERROR
        assert span.status.description == error
        assert [e.name for e in span.events] == ["exception"]
    if outcome == "snoozed":
        assert (span.attributes or {})["durable_jobs.snooze_seconds"] == 60


def test_a_payload_that_no_longer_binds_is_discarded_with_an_error(
    exporter, durable_worker
) -> None:
    job = jobs.add.delay(a=1)
    Job.objects.filter(pk=job.pk).update(payload={"c": 3})  # the code changed since
    durable_worker("default:1")
    span = run_span(exporter, job.pk)
    assert (span.attributes or {})["durable_jobs.outcome"] == "discarded"
    assert span.status.status_code == StatusCode.ERROR
    [event] = span.events
    assert (event.attributes or {})["exception.type"].endswith("PayloadMismatch")


def test_a_job_handed_back_by_a_stopping_worker_is_interrupted_not_failed(
    exporter, durable_worker
) -> None:
    job = jobs.sleepy.delay(seconds=30)
    worker = durable_worker("default:1", shutdown_grace=0.2)
    finished(job.pk, State.LEASED)
    worker.stop()
    span = run_span(exporter, job.pk)
    assert (span.attributes or {})["durable_jobs.outcome"] == "interrupted"
    assert span.status.status_code == StatusCode.UNSET
    finished(job.pk, State.QUEUED)


def test_enqueue_many_gives_each_job_its_own_span_and_context(exporter, durable_worker) -> None:
    many = [{"name": "tests.traced.sync"}, {"name": "tests.add", "payload": {"a": 1}}]
    ids = request(many=many)
    [server] = spans(exporter, SpanKind.SERVER)
    producers = [enqueue_span(exporter, i) for i in ids]
    assert [p.name for p in producers] == [
        "durable_jobs enqueue tests.traced.sync",
        "durable_jobs enqueue tests.add",
    ]
    assert {parent_id(p) for p in producers} == {server.context.span_id}
    assert producers[0].context.span_id != producers[1].context.span_id
    stored = [Job.objects.get(pk=i).meta["otel"]["traceparent"] for i in ids]
    assert [t.split("-")[2] for t in stored] == [f"{p.context.span_id:016x}" for p in producers]
    durable_worker("default:2")
    for job_id, producer in zip(ids, producers, strict=True):
        finished(job_id, State.COMPLETED)
        consumer = run_span(exporter, job_id)
        assert parent_id(consumer) == producer.context.span_id


def test_a_task_enqueue_is_traced_too(exporter, durable_worker) -> None:
    [job_id] = request(task=True)
    [server] = spans(exporter, SpanKind.SERVER)
    producer = enqueue_span(exporter, job_id)
    assert parent_id(producer) == server.context.span_id
    durable_worker("default:1")
    finished(job_id, State.COMPLETED)
    assert parent_id(run_span(exporter, job_id)) == producer.context.span_id


def test_a_duplicate_enqueue_is_marked_and_the_job_keeps_its_first_context(exporter) -> None:
    first = jobs.add.using(idempotency_key="once").delay(a=1)
    again = jobs.add.using(idempotency_key="once").delay(a=1)
    assert again.pk == first.pk
    original, duplicate = spans(exporter, SpanKind.PRODUCER)
    assert (original.attributes or {})["messaging.message.id"] == str(first.pk)
    assert (duplicate.attributes or {})["durable_jobs.duplicate"] is True
    assert "messaging.message.id" not in (duplicate.attributes or {})
    traceparent = Job.objects.get(pk=first.pk).meta["otel"]["traceparent"]
    assert traceparent.split("-")[2] == f"{original.context.span_id:016x}"


def test_an_enqueue_outside_any_span_starts_a_trace(exporter, durable_worker) -> None:
    job = jobs.add.delay(a=1)
    producer = enqueue_span(exporter, job.pk)
    assert producer.parent is None
    durable_worker("default:1")
    consumer = run_span(exporter, job.pk)
    assert parent_id(consumer) == producer.context.span_id
    assert consumer.context.trace_id == producer.context.trace_id


@pytest.mark.parametrize(
    "meta",
    [{}, {"otel": "garbage"}, {"otel": {"traceparent": "00-nonsense"}}, {"otel": [1]}],
)
def test_a_job_without_a_usable_context_runs_in_a_root_span(exporter, durable_worker, meta) -> None:
    job = jobs.add.delay(a=1)
    # As if enqueued before tracing was on, or by hand.
    Job.objects.filter(pk=job.pk).update(meta=meta)
    durable_worker("default:1")
    assert finished(job.pk, State.COMPLETED).result == 1
    consumer = run_span(exporter, job.pk)
    assert consumer.parent is None
    assert (consumer.attributes or {})["durable_jobs.outcome"] == "completed"


def test_a_failed_insert_ends_its_span_with_the_error(exporter) -> None:
    with transaction.atomic():
        transaction.set_rollback(True)  # a broken transaction: Django refuses every query
        with pytest.raises(TransactionManagementError):
            jobs.add.delay(a=1)
    [span] = spans(exporter, SpanKind.PRODUCER)
    assert span.status.status_code == StatusCode.ERROR
    assert (span.status.description or "").startswith("TransactionManagementError: ")
    assert [e.name for e in span.events] == ["exception"]
    assert "messaging.message.id" not in (span.attributes or {})


def test_tracing_off_adds_nothing(durable_worker) -> None:
    # The test settings leave OPENTELEMETRY False, as the default is.
    assert not job_tracing.installed()
    assert (hooks.enqueue_hooks, hooks.middleware) == ([], [])
    job = enqueue("tests.traced.sync")
    assert "otel" not in Job.objects.get(pk=job.pk).meta
    durable_worker("default:1")
    assert finished(job.pk, State.COMPLETED).result["span_id"] == f"{0:016x}"


def test_the_setting_installs_tracing_when_django_starts() -> None:
    config = apps.get_app_config("durable_jobs")
    try:
        with override_settings(DURABLE_JOBS={"OPENTELEMETRY": True}):
            config.install_tracing()
        assert job_tracing.installed()
        assert (len(hooks.enqueue_hooks), len(hooks.middleware)) == (1, 1)
        # With no SDK provider set globally, the spans are no-ops: nothing is stored.
        job = enqueue("tests.add", {"a": 1})
        assert "otel" not in job.meta
    finally:
        job_tracing.uninstall()
    assert (hooks.enqueue_hooks, hooks.middleware) == ([], [])
    with override_settings(DURABLE_JOBS={"OPENTELEMETRY": False}):
        config.install_tracing()
    assert not job_tracing.installed()


def test_the_setting_without_the_api_installs_nothing_and_says_why(monkeypatch, caplog) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.trace", None)
    with override_settings(DURABLE_JOBS={"OPENTELEMETRY": True}):
        apps.get_app_config("durable_jobs").install_tracing()
    assert not job_tracing.installed()
    assert "OpenTelemetry tracing is off: OPENTELEMETRY is True, but opentelemetry-api" in (
        caplog.text
    )
    assert "durable_jobs.E021" in caplog.text


def test_install_replaces_and_uninstall_is_idempotent(provider) -> None:
    job_tracing.install(tracer_provider=provider)
    job_tracing.install(tracer_provider=provider)
    assert (len(hooks.enqueue_hooks), len(hooks.middleware)) == (1, 1)
    job_tracing.uninstall()
    job_tracing.uninstall()
    assert (hooks.enqueue_hooks, hooks.middleware) == ([], [])
