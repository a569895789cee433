"""How attempts end: retries with backoff, dead letters, Snooze, Cancel, Discard, timeouts."""

from __future__ import annotations

import datetime

import pytest
from django.utils import timezone

from durable_jobs import actions
from durable_jobs.models import Attempt, Job, Outcome
from durable_jobs.states import State
from durable_jobs.testing import drain
from tests.testapp import jobs

pytestmark = pytest.mark.django_db


def attempts_of(job: Job) -> list[Attempt]:
    return list(Attempt.objects.filter(job=job).order_by("id"))


def test_failing_twice_then_succeeding_retries_with_jittered_backoff() -> None:
    job = jobs.flaky.delay(fail_times=2)

    for attempt_number, base in [(1, 15), (2, 30)]:
        assert drain() == {"failed": 1}
        job.refresh_from_db()
        assert job.state == State.RETRYING
        last = attempts_of(job)[-1]
        assert last.number == attempt_number
        delay = (job.available_at - last.finished_at).total_seconds()
        # 15 s * 2**(n-1), plus 0-25 % jitter.
        assert base <= delay <= base * 1.25
        assert drain() == {}  # not available before its backoff has passed
        Job.objects.filter(pk=job.pk).update(available_at=timezone.now())

    assert drain() == {"completed": 1}
    job.refresh_from_db()
    assert job.state == State.COMPLETED
    assert job.result == "ok"
    assert job.attempts == 3
    assert [a.outcome for a in attempts_of(job)] == ["failed", "failed", "completed"]


def test_always_failing_job_is_dead_after_its_retries_with_every_attempt_kept() -> None:
    job = jobs.always_fails.delay()  # max_retries=2
    assert drain(with_scheduled=True) == {"failed": 3}
    job.refresh_from_db()
    assert job.state == State.DEAD
    assert job.finished_at is not None
    attempts = attempts_of(job)
    assert [a.number for a in attempts] == [1, 2, 3]
    for attempt in attempts:
        assert attempt.outcome == Outcome.FAILED
        assert attempt.error_class == "builtins.ValueError"
        assert attempt.error_message == "ValueError: cannot process\ncaused by: KeyError: 'missing'"
        assert "raise ValueError" in attempt.traceback
        assert "KeyError" in attempt.traceback
        assert attempt.duration >= datetime.timedelta(0)
    assert "cannot process" in job.last_error


def test_fixed_backoff_delays() -> None:
    job = jobs.fixed_backoff.delay()
    delays = []
    for _ in range(3):
        assert drain() == {"failed": 1}
        job.refresh_from_db()
        delays.append(
            round((job.available_at - attempts_of(job)[-1].finished_at).total_seconds(), 3)
        )
        Job.objects.filter(pk=job.pk).update(available_at=timezone.now())
    assert delays == [1.0, 2.0, 2.0]
    assert drain() == {"failed": 1}
    assert Job.objects.get(pk=job.pk).state == State.DEAD


def test_snooze_requeues_later_and_gives_the_attempt_back() -> None:
    job = jobs.snoozer.delay(seconds=120)
    assert drain() == {"snoozed": 1}
    job.refresh_from_db()
    assert job.state == State.QUEUED
    assert job.attempts == 0
    assert job.available_at >= timezone.now() + datetime.timedelta(seconds=110)
    assert [a.outcome for a in attempts_of(job)] == ["snoozed"]


def test_cancel_from_the_handler() -> None:
    job = jobs.canceller.delay()
    assert drain() == {"cancelled": 1}
    job.refresh_from_db()
    assert job.state == State.CANCELLED
    assert job.last_error == "Cancel: order was refunded"
    assert job.finished_at is not None


def test_discard_goes_dead_at_once_without_retries() -> None:
    job = jobs.discarder.delay()
    assert drain() == {"discarded": 1}
    job.refresh_from_db()
    assert job.state == State.DEAD
    assert job.attempts == 1
    assert job.max_retries > 1
    assert "malformed input" in job.last_error


def test_payload_that_no_longer_binds_goes_dead_with_the_reason_and_never_runs() -> None:
    job = jobs.add.delay(a=1)
    # The code changed after enqueue: the stored payload now names a parameter that is gone.
    Job.objects.filter(pk=job.pk).update(payload={"x": 1})
    assert drain() == {"discarded": 1}
    job.refresh_from_db()
    assert job.state == State.DEAD
    assert job.result is None
    assert "no longer fits tests.add(a, b=0)" in job.last_error
    assert "missing a required argument: 'a'" in job.last_error
    assert "enqueue it again with the new arguments" in job.last_error
    attempt = attempts_of(job)[0]
    assert attempt.error_class == "durable_jobs.exceptions.PayloadMismatch"


def test_unknown_handler_name_is_a_failure_that_retries() -> None:
    job = jobs.add.delay(a=1)
    Job.objects.filter(pk=job.pk).update(name="gone.handler")
    assert drain() == {"failed": 1}
    job.refresh_from_db()
    assert job.state == State.RETRYING
    assert "No job handler is registered under the name 'gone.handler'" in job.last_error


def test_async_handler() -> None:
    job = jobs.async_add.delay(a=2, b=40)
    assert drain() == {"completed": 1}
    job.refresh_from_db()
    assert (job.state, job.result) == (State.COMPLETED, 42)


def test_async_timeout_is_a_failure() -> None:
    job = jobs.async_slow.delay()
    assert drain() == {"timed_out": 1}
    job.refresh_from_db()
    assert job.state == State.DEAD  # max_retries=0
    assert attempts_of(job)[0].error_class == "durable_jobs.exceptions.JobTimeout"


def test_manual_retry_puts_a_dead_job_back_to_queued_keeping_its_history() -> None:
    job = jobs.discarder.delay()
    drain()
    changed, skipped = actions.retry_jobs(Job.objects.filter(pk=job.pk))
    assert (changed, skipped) == (1, 0)
    job.refresh_from_db()
    assert job.state == State.QUEUED
    assert job.finished_at is None
    assert len(attempts_of(job)) == 1
    assert drain() == {"discarded": 1}
    assert [a.number for a in attempts_of(job)] == [1, 2]


def test_manual_actions_respect_the_state_machine() -> None:
    done = jobs.add.delay(a=1)
    drain()
    waiting = jobs.add.delay(a=2)
    assert actions.retry_jobs(Job.objects.filter(pk__in=[done.pk, waiting.pk])) == (0, 2)
    assert actions.cancel_jobs(Job.objects.filter(pk__in=[done.pk, waiting.pk])) == (1, 1)
    assert Job.objects.get(pk=waiting.pk).state == State.CANCELLED
    assert Job.objects.get(pk=done.pk).state == State.COMPLETED
    assert actions.discard_jobs(Job.objects.filter(pk=waiting.pk)) == (0, 1)
