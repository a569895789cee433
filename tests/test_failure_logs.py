"""Failed attempts are logged with their real exception, so error trackers get a stack."""

from __future__ import annotations

import logging

import pytest
from django.test import override_settings

from durable_jobs.worker import Worker
from tests.testapp import jobs

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(60)]


def run_worker() -> None:
    with override_settings(DURABLE_JOBS={"QUEUES": {"default": {"concurrency": 2}}}):
        Worker(burst=True, scheduler=False).run()


def events(caplog: pytest.LogCaptureFixture, event: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "event", None) == event]


def test_a_retried_failure_carries_the_exception_and_the_job_fields(
    caplog: pytest.LogCaptureFixture,
) -> None:
    job = jobs.fails_once.delay()
    with caplog.at_level(logging.INFO, logger="durable_jobs"):
        run_worker()
    (retried,) = events(caplog, "retried")
    assert retried.levelno == logging.WARNING
    assert retried.exc_info is not None
    error = retried.exc_info[1]
    assert isinstance(error, RuntimeError)
    assert str(error) == "the first attempt fails"
    # The real traceback, down to the handler's own frame.
    assert retried.exc_info[2] is not None
    assert "fails_once" in logging.Formatter().formatException(retried.exc_info)
    assert (retried.job_id, retried.attempt, retried.job_name) == (job.pk, 1, "tests.fails_once")
    assert retried.queue == "default"
    (completed,) = events(caplog, "completed")
    assert completed.exc_info is None


def test_the_dead_event_is_an_error_with_its_cause(caplog: pytest.LogCaptureFixture) -> None:
    job = jobs.always_fails.using(max_retries=0).delay()
    with caplog.at_level(logging.INFO, logger="durable_jobs"):
        run_worker()
    (dead,) = events(caplog, "dead")
    assert dead.levelno == logging.ERROR
    assert dead.exc_info is not None
    assert isinstance(dead.exc_info[1], ValueError)
    assert isinstance(dead.exc_info[1].__cause__, KeyError)  # the chain is kept
    assert dead.job_id == job.pk


def test_outcomes_that_are_not_failures_log_no_exception(caplog: pytest.LogCaptureFixture) -> None:
    jobs.canceller.delay()
    jobs.snoozer.delay(seconds=600)
    with caplog.at_level(logging.INFO, logger="durable_jobs"):
        run_worker()
    for event in ("cancelled", "snoozed"):
        (record,) = events(caplog, event)
        assert record.exc_info is None, event
