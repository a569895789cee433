""" "Why isn't it running?": the reasons a waiting job has not started, in plain words.

Used by ``manage.py jobs why ID`` and the job's admin page. Each check reads a
little (the job's queue row, a count through an index, the live nodes), so it is
cheap enough to run on every page view.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any

from django.utils import timezone

from durable_jobs.flow import rates
from durable_jobs.flow.queues import serving_nodes
from durable_jobs.lifecycle.states import CLAIMABLE, State
from durable_jobs.models import Job, Queue

#: Jobs ahead in line are counted up to this many, to keep the check bounded.
AHEAD_COUNT_CAP = 10_000


@dataclass(frozen=True)
class Reason:
    """One reason, with a stable ``code`` for scripts and a ``message`` for people."""

    code: str
    message: str
    detail: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "detail": self.detail}


def explain(job: Job, *, now: datetime.datetime | None = None) -> list[Reason]:
    """Every reason ``job`` is not running now (empty for a job that is running or done)."""
    now = now or timezone.now()
    using = job._state.db
    if job.state not in CLAIMABLE:
        return [_not_waiting(job)]
    reasons: list[Reason] = []
    if job.available_at > now:
        wait = (job.available_at - now).total_seconds()
        what = "its next attempt is" if job.state == State.RETRYING else "it is"
        reasons.append(
            Reason(
                "not_yet_available",
                f"Not yet available: {what} due at {_when(job.available_at)} (in {wait:.0f}s).",
                {"available_at": job.available_at.isoformat()},
            )
        )
    queue_row = Queue.objects.using(using).filter(name=job.queue).first()
    if queue_row is not None:
        reasons += _queue_reasons(queue_row, now)
    if job.concurrency_key:
        reasons += _key_reasons(job)
    if not serving_nodes(using=using, now=now).get(job.queue):
        reasons.append(
            Reason(
                "no_live_node",
                f"No live worker serves queue {job.queue!r}. Start one with "
                f"`manage.py runworker --queues {job.queue}`, or add it to "
                "DURABLE_JOBS['QUEUES'].",
                {"queue": job.queue},
            )
        )
    if not reasons:
        ahead = _jobs_ahead(job, now)
        reasons.append(
            Reason(
                "waiting_in_line",
                f"Ready: it starts when a worker of queue {job.queue!r} has a free slot; "
                f"{ahead if ahead < AHEAD_COUNT_CAP else f'{AHEAD_COUNT_CAP}+'} job(s) "
                "are ahead of it.",
                {"ahead": ahead},
            )
        )
    return reasons


def _not_waiting(job: Job) -> Reason:
    if job.state == State.LEASED:
        holder = job.lease_holder
        node = holder.name if holder else "a worker"
        since = f" since {_when(job.attempted_at)}" if job.attempted_at else ""
        return Reason(
            "running", f"It is running on {node}{since} (attempt {job.attempts}).", {"node": node}
        )
    if job.state == State.COMPLETED:
        return Reason("finished", "It completed; it will not run again.", {"state": job.state})
    return Reason(
        "finished",
        f"It is {job.state}: it will not run again unless retried "
        f"(`manage.py jobs retry {job.pk}`).",
        {"state": job.state},
    )


def _queue_reasons(queue_row: Queue, now: datetime.datetime) -> list[Reason]:
    reasons = []
    if queue_row.paused:
        since = f" since {_when(queue_row.paused_at)}" if queue_row.paused_at else ""
        reasons.append(
            Reason(
                "queue_paused",
                f"Queue {queue_row.name!r} is paused{since}. Resume it with "
                f"`manage.py jobs resume {queue_row.name}`.",
                {"queue": queue_row.name},
            )
        )
    if queue_row.global_concurrency is not None:
        leased = (
            Job.objects.using(queue_row._state.db)
            .filter(queue=queue_row.name, state=State.LEASED)
            .count()
        )
        if leased >= queue_row.global_concurrency:
            reasons.append(
                Reason(
                    "queue_concurrency_full",
                    f"Queue {queue_row.name!r} already runs {leased} job(s), its global "
                    f"concurrency limit ({queue_row.global_concurrency}).",
                    {"leased": leased, "limit": queue_row.global_concurrency},
                )
            )
    if queue_row.rate_limit and queue_row.rate_period:
        slot = rates.next_slot(
            queue_row.rate_window, now.timestamp(), queue_row.rate_limit, queue_row.rate_period
        )
        if slot is not None:
            at = datetime.datetime.fromtimestamp(slot, tz=datetime.UTC)
            reasons.append(
                Reason(
                    "rate_limited",
                    f"Queue {queue_row.name!r} reached its rate limit ({queue_row.rate}); the next "
                    f"start is allowed at {_when(at)}.",
                    {"rate": queue_row.rate, "next_slot_at": at.isoformat()},
                )
            )
    return reasons


def _key_reasons(job: Job) -> list[Reason]:
    holders = list(
        Job.objects.using(job._state.db)
        .filter(state=State.LEASED, concurrency_key=job.concurrency_key)
        .order_by("attempted_at")
        .values_list("pk", flat=True)[:20]
    )
    limit = job.concurrency_limit or 1
    if len(holders) < limit:
        return []
    names = ", ".join(str(pk) for pk in holders)
    return [
        Reason(
            "concurrency_key_held",
            f"Its concurrency key {job.concurrency_key!r} is held by job {names} "
            f"(limit {limit}); it starts when one of them finishes.",
            {"key": job.concurrency_key, "held_by": holders, "limit": limit},
        )
    ]


def _jobs_ahead(job: Job, now: datetime.datetime) -> int:
    waiting = Job.objects.using(job._state.db).filter(
        queue=job.queue, state__in=sorted(CLAIMABLE), available_at__lte=now
    )
    ahead = waiting.filter(priority__gt=job.priority) | waiting.filter(
        priority=job.priority, available_at__lt=job.available_at
    )
    return ahead.order_by()[:AHEAD_COUNT_CAP].count()


def _when(value: datetime.datetime) -> str:
    return value.astimezone(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
