"""Enqueueing: argument checks, options, transactions and idempotency."""

from __future__ import annotations

import datetime
import decimal
import threading

import pytest
from django.db import connections, transaction
from django.utils import timezone

import durable_jobs
from durable_jobs import EnqueueError, UnknownJob
from durable_jobs.models import Job
from durable_jobs.states import State
from tests.testapp import jobs
from tests.testapp.models import Order

pytestmark = pytest.mark.django_db


def test_delay_returns_a_queued_job_row() -> None:
    job = jobs.add.delay(a=1, b=2)
    stored = Job.objects.get(pk=job.pk)
    assert stored.state == State.QUEUED
    assert stored.name == "tests.add"
    assert stored.payload == {"a": 1, "b": 2}
    assert stored.queue == "default"
    assert stored.priority == 0
    assert stored.available_at <= timezone.now()


def test_calling_the_handler_directly_runs_it_without_a_job() -> None:
    assert jobs.add(a=2, b=3) == 5
    assert not Job.objects.exists()


def test_handler_names_default_to_module_and_qualname() -> None:
    assert jobs.noop.name == "tests.testapp.jobs.noop"
    assert jobs.add.name == "tests.add"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: jobs.add.delay(1, 2), "positional arguments are not accepted"),
        (lambda: jobs.add.delay(a=1, c=3), "unexpected keyword argument 'c'"),
        (lambda: jobs.add.delay(b=1), "missing a required argument: 'a'"),
    ],
)
def test_enqueue_refuses_arguments_the_handler_cannot_take(call, message) -> None:
    with pytest.raises(EnqueueError, match=message) as exc:
        call()
    assert "tests.add" in str(exc.value)
    assert "keyword" in str(exc.value)  # names the fix: pass the handler's keyword arguments
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("value", "fix"),
    [
        (datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC), "isoformat"),
        (datetime.date(2026, 1, 1), "isoformat"),
        (decimal.Decimal("1.10"), "str(value)"),
        ((1, 2), "pass a list"),
        ({1: "x"}, "string keys"),
        (float("nan"), "JSON cannot store"),
        (b"raw", "bytes"),
    ],
)
def test_enqueue_refuses_values_json_would_change(value, fix) -> None:
    with pytest.raises(EnqueueError, match="argument a") as exc:
        jobs.add.delay(a=value)
    assert fix in str(exc.value)
    assert not Job.objects.exists()


def test_enqueue_refuses_model_instances_and_says_to_pass_the_id() -> None:
    order = Order.objects.create(number="A-1")
    with pytest.raises(EnqueueError, match=r"model instance: pass its primary key"):
        jobs.record.delay(label=order)
    assert not Job.objects.exists()


def test_nested_unstorable_values_are_named_by_path() -> None:
    with pytest.raises(EnqueueError, match=r"argument a\['when'\]\[0\] is a date/time"):
        jobs.add.delay(a={"when": [datetime.datetime.now(tz=datetime.UTC)]})


def test_enqueue_by_unknown_name_is_refused_with_the_fix() -> None:
    with pytest.raises(
        UnknownJob, match=r"No job handler is registered under the name 'billing.nope'"
    ):
        durable_jobs.enqueue("billing.nope", {"x": 1})
    assert not Job.objects.exists()


def test_enqueue_by_name() -> None:
    job = durable_jobs.enqueue("tests.add", {"a": 4}, priority=5)
    assert (job.name, job.payload, job.priority) == ("tests.add", {"a": 4}, 5)


def test_using_applies_options() -> None:
    before = timezone.now()
    job = jobs.add.using(
        queue="emails", priority=10, run_in=datetime.timedelta(minutes=5), max_retries=1
    ).delay(a=1)
    assert job.queue == "emails"
    assert job.priority == 10
    assert job.max_retries == 1
    assert job.available_at >= before + datetime.timedelta(minutes=5)


def test_run_at_must_be_aware() -> None:
    with pytest.raises(EnqueueError, match="aware datetime"):
        jobs.add.using(run_at=datetime.datetime(2030, 1, 1)).delay(a=1)


def test_run_at_and_run_in_are_exclusive() -> None:
    with pytest.raises(EnqueueError, match="not both"):
        jobs.add.using(run_at=timezone.now(), run_in=datetime.timedelta(1)).delay(a=1)


@pytest.mark.parametrize("priority", [101, -101, "high", True])
def test_priority_must_be_in_range(priority) -> None:
    with pytest.raises(EnqueueError, match="priority"):
        jobs.add.using(priority=priority).delay(a=1)


def test_same_idempotency_key_returns_the_existing_job() -> None:
    first = jobs.add.using(idempotency_key="receipt:42").delay(a=1)
    second = jobs.add.using(idempotency_key="receipt:42").delay(a=2)
    assert second.pk == first.pk
    assert second.payload == {"a": 1}
    assert Job.objects.count() == 1


def test_rollback_leaves_no_job() -> None:
    class Boom(Exception):
        pass

    seen_inside = []

    def enqueue_then_fail() -> None:
        with transaction.atomic():
            jobs.add.delay(a=1)
            seen_inside.append(Job.objects.count())
            raise Boom

    with pytest.raises(Boom):
        enqueue_then_fail()
    assert seen_inside == [1]  # visible inside the transaction...
    assert not Job.objects.exists()  # ...gone with it


@pytest.mark.django_db(transaction=True)
def test_concurrent_enqueues_of_one_key_create_one_row() -> None:
    threads, ids, errors = 8, [], []
    barrier = threading.Barrier(threads)

    def enqueue() -> None:
        try:
            barrier.wait()
            with transaction.atomic():
                ids.append(jobs.add.using(idempotency_key="race").delay(a=1).pk)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    workers = [threading.Thread(target=enqueue) for _ in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    assert errors == []
    assert len(ids) == threads
    assert Job.objects.filter(idempotency_key="race").count() == 1
    assert set(ids) == {Job.objects.get(idempotency_key="race").pk}
