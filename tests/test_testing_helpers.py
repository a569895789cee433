"""The helpers users test their own jobs with, and the pytest fixtures."""

from __future__ import annotations

import pytest

from durable_jobs import Cancel, EnqueueError
from durable_jobs.models import Job
from durable_jobs.states import State
from durable_jobs.testing import assert_enqueued, drain, perform, refute_enqueued
from tests.testapp import jobs
from tests.testapp.models import SideEffect

pytestmark = pytest.mark.django_db


def test_assert_and_refute_enqueued() -> None:
    job = jobs.add.delay(a=1, b=2)
    assert assert_enqueued(jobs.add, a=1).pk == job.pk
    assert assert_enqueued("tests.add").pk == job.pk
    refute_enqueued(jobs.add, a=5)
    with pytest.raises(AssertionError, match=r"payloads \[\{'a': 1, 'b': 2\}\]"):
        assert_enqueued(jobs.add, a=5)
    with pytest.raises(AssertionError, match="Expected no waiting job"):
        refute_enqueued(jobs.add, b=2)
    drain()
    refute_enqueued(jobs.add)  # completed jobs are no longer waiting


def test_perform_runs_with_the_same_checks_as_enqueue() -> None:
    assert perform(jobs.add, a=2, b=3) == 5
    assert perform(jobs.logs) is None
    with pytest.raises(EnqueueError, match="missing a required argument"):
        perform(jobs.add)
    with pytest.raises(Cancel):
        perform(jobs.canceller)
    assert not Job.objects.exists()


def test_drain_by_queue() -> None:
    jobs.add.delay(a=1)
    email = jobs.add.using(queue="emails").delay(a=2)
    assert drain("emails") == {"completed": 1}
    assert Job.objects.get(pk=email.pk).state == State.COMPLETED
    assert Job.objects.filter(state=State.QUEUED).count() == 1


def test_durable_jobs_fixture(durable_jobs) -> None:
    jobs.record.delay(label="x")
    durable_jobs.assert_enqueued(jobs.record, label="x")
    assert durable_jobs.drain() == {"completed": 1}
    assert SideEffect.objects.get().label == "x"


def test_perform_runs_async_handlers_with_a_context() -> None:
    assert perform(jobs.async_context, x=21) == 42
    assert perform(jobs.async_add, a=1, b=2) == 3


def test_a_logging_mistake_in_a_handler_does_not_fail_the_job() -> None:
    job = jobs.bad_log_format.delay()
    assert drain() == {"completed": 1}
    job.refresh_from_db()
    assert job.result == "still fine"
