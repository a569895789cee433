"""Reflects how a scheduled job ended on its schedule (``last_status``, ``last_duration_ms``)."""

from __future__ import annotations

from typing import Any

from durable_jobs.models import Attempt, Job, Schedule


def record_job_outcome(sender: Any, *, job: Job, attempt: Attempt, **kwargs: Any) -> None:
    schedule_id = job.schedule_info.get("id")
    if not schedule_id:
        return
    mine = Schedule.objects.using(job._state.db).filter(pk=schedule_id, last_job_id=job.pk)
    mine.update(
        last_duration_ms=round(attempt.duration.total_seconds() * 1000, 3),
        last_error=attempt.error_message,
    )
    # "paused" and "disabled" describe the schedule itself; a job finishing late must
    # not hide them.
    mine.exclude(last_status__in=["paused", "disabled"]).update(last_status=job.state)
