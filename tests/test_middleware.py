"""Execution middleware around every attempt, in a real worker thread on the real database."""

from __future__ import annotations

import datetime

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings
from django.utils import timezone

from durable_jobs import hooks
from durable_jobs.lifecycle.states import State
from durable_jobs.models import Attempt, Job, Outcome
from durable_jobs.worker import Worker
from tests.testapp import job_middleware, jobs

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]

M = "tests.testapp.job_middleware"
QUEUES = {"QUEUES": {"default": {"concurrency": 2}}, "POLL_INTERVAL": 0.05}


@pytest.fixture(autouse=True)
def seen() -> list[str]:
    job_middleware.SEEN.clear()
    job_middleware.BUILT.clear()
    return job_middleware.SEEN


def drain_with(*paths: str) -> None:
    with override_settings(DURABLE_JOBS={**QUEUES, "MIDDLEWARE": list(paths)}):
        Worker(burst=True, scheduler=False).run()


def test_two_middlewares_wrap_a_sync_handler_in_settings_order(seen: list[str]) -> None:
    job = jobs.add.delay(a=2, b=3)
    drain_with(f"{M}.outer", f"{M}.inner")
    assert seen == [
        "outer:before:tests.add:1",
        "inner:before:tests.add:1",
        "inner:after:5",
        "outer:after:5",
    ]
    job.refresh_from_db()
    assert (job.state, job.result) == (State.COMPLETED, 5)


def test_an_async_handler_runs_inside_the_chain(seen: list[str]) -> None:
    job = jobs.async_add.delay(a=4, b=5)
    drain_with(f"{M}.outer", f"{M}.async_factory", f"{M}.inner")
    assert seen == [
        "outer:before:tests.async_add:1",
        "async:before:tests.async_add",
        "inner:before:tests.async_add:1",
        "inner:after-await:9",
        "async:after:9",
        "outer:after-await:9",
    ]
    job.refresh_from_db()
    assert (job.state, job.result) == (State.COMPLETED, 9)


def test_an_async_middleware_around_a_sync_handler(seen: list[str]) -> None:
    job = jobs.add.delay(a=1, b=1)
    drain_with(f"{M}.async_factory")
    assert seen == ["async:before:tests.add", "async:after:2"]
    job.refresh_from_db()
    assert job.result == 2


def test_an_async_timeout_passes_through_the_chain(seen: list[str]) -> None:
    job = jobs.async_slow.delay()
    drain_with(f"{M}.failing")
    assert seen == ["failing:saw:JobTimeout"]
    assert Attempt.objects.get(job=job).outcome == Outcome.TIMED_OUT


def test_snooze_raised_by_a_middleware_snoozes_the_job(seen: list[str]) -> None:
    before = timezone.now()
    snoozed = jobs.add.delay(a=1)
    other = jobs.noop.delay()
    drain_with(f"{M}.snoozing")
    snoozed.refresh_from_db()
    assert snoozed.state == State.QUEUED
    assert snoozed.attempts == 0  # a snooze gives the attempt back
    assert snoozed.available_at >= before + datetime.timedelta(seconds=119)
    assert Attempt.objects.get(job=snoozed).outcome == Outcome.SNOOZED
    other.refresh_from_db()
    assert other.state == State.COMPLETED


def test_what_the_handler_raises_goes_through_the_middleware(seen: list[str]) -> None:
    failed = jobs.always_fails.using(max_retries=0).delay()
    cancelled = jobs.canceller.delay()
    # A payload that no longer binds is raised inside the chain too.
    mismatched = jobs.add.delay(a=1)
    Job.objects.filter(pk=mismatched.pk).update(payload={"x": 1})
    drain_with(f"{M}.failing")
    assert sorted(seen) == [
        "failing:saw:Cancel",
        "failing:saw:PayloadMismatch",
        "failing:saw:ValueError",
    ]
    states = dict(Job.objects.values_list("pk", "state"))
    assert states[failed.pk] == State.DEAD
    assert states[cancelled.pk] == State.CANCELLED
    assert states[mismatched.pk] == State.DEAD


def test_a_chain_is_built_once_not_per_attempt(seen: list[str]) -> None:
    for n in range(5):
        jobs.add.delay(a=n)
    drain_with(f"{M}.outer")
    assert job_middleware.BUILT == ["outer"]
    assert len([s for s in seen if s.startswith("outer:before")]) == 5


def test_integration_middleware_goes_outside_the_configured_ones(seen: list[str]) -> None:
    def integration(call_next):  # type: ignore[no-untyped-def]
        def middleware(context):  # type: ignore[no-untyped-def]
            seen.append("integration:before")
            return call_next(context)

        return middleware

    hooks.add_middleware(integration)
    hooks.add_middleware(integration)  # once, however often it is added
    try:
        jobs.add.delay(a=1)
        drain_with(f"{M}.outer")
    finally:
        hooks.remove_middleware(integration)
    assert seen[:2] == ["integration:before", "outer:before:tests.add:1"]
    assert seen.count("integration:before") == 1


@pytest.mark.parametrize(
    ("path", "message"),
    [
        (f"{M}.missing", "cannot be imported"),
        (f"{M}.not_callable", "is not callable"),
        ("", "must be a list of dotted paths"),
    ],
)
def test_a_bad_middleware_path_fails_the_checks(path: str, message: str) -> None:
    with (
        override_settings(DURABLE_JOBS={"MIDDLEWARE": [path]}),
        pytest.raises(SystemCheckError, match=r"durable_jobs\.E020") as raised,
    ):
        call_command("check")
    assert message in str(raised.value)
