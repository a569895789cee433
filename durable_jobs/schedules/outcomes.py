"""Reflects how a scheduled job ended on its schedule: ``last_status`` and
``last_duration_ms`` for its last job, and the failure counts for every job.

A job of the schedule that ends ``dead`` is a failure, as a failed enqueue is: it adds
one to ``fail_count`` and ``consecutive_fails``, and the schedule is disabled when
``consecutive_fails`` reaches ``max_consecutive_fails``. A ``completed`` job resets
``consecutive_fails``; a ``cancelled`` one (an operator's decision) changes neither.
"""

from __future__ import annotations

import logging
from typing import Any

from django.db.models import Case, F, Q, Value, When
from django.utils import timezone

from durable_jobs.lifecycle.states import State
from durable_jobs.models import Attempt, Job, Schedule

logger = logging.getLogger("durable_jobs")


def record_job_outcome(job: Job, attempt: Attempt, error: BaseException | None = None) -> None:
    """A finish hook (:mod:`durable_jobs.hooks`): reflect a scheduled job's end on its
    schedule."""
    schedule_id = job.schedule_info.get("id")
    if not schedule_id:
        return
    schedules = Schedule.objects.using(job._state.db).filter(pk=schedule_id)
    if job.state == State.DEAD:
        count_failure(schedules, job, attempt)
    elif job.state == State.COMPLETED:
        schedules.filter(consecutive_fails__gt=0).update(
            consecutive_fails=0, updated_at=timezone.now()
        )
    mine = schedules.filter(last_job_id=job.pk)
    mine.update(
        last_duration_ms=round(attempt.duration.total_seconds() * 1000, 3),
        last_error=attempt.error_message,
    )
    # "paused" and "disabled" describe the schedule itself; a job finishing late must
    # not hide them.
    mine.exclude(last_status__in=["paused", "disabled"]).update(last_status=job.state)


def count_failure(schedules: Any, job: Job, attempt: Attempt) -> None:
    """One more failure, in one UPDATE (so that two jobs ending at once both count);
    disable at ``max_consecutive_fails`` (only an enabled schedule is disabled)."""
    reaches_limit = Q(enabled=True, consecutive_fails__gte=F("max_consecutive_fails") - 1)
    # In this order: MySQL assigns left to right, each expression seeing the columns set
    # before it, so the conditions must read enabled and consecutive_fails before they
    # change (the other databases read the old row throughout).
    schedules.update(
        last_status=Case(When(reaches_limit, then=Value("disabled")), default=F("last_status")),
        enabled=Case(When(reaches_limit, then=Value(False)), default=F("enabled")),
        fail_count=F("fail_count") + 1,
        consecutive_fails=F("consecutive_fails") + 1,
        last_error=f"job {job.pk} ended dead: {attempt.error_message}",
        updated_at=timezone.now(),
    )
    row = schedules.values("pk", "consecutive_fails", "max_consecutive_fails", "enabled").first()
    if row is None:
        return
    (logger.warning if row["enabled"] else logger.error)(
        "schedule %s: job %s ended dead (%s/%s consecutive failures)%s",
        row["pk"],
        job.pk,
        row["consecutive_fails"],
        row["max_consecutive_fails"],
        "" if row["enabled"] else "; the schedule is disabled",
        extra={"schedule_id": row["pk"], "job_id": job.pk},
    )
