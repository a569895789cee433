"""The JSON forms of jobs, queues and batches for the ``jobs`` command, and its filters.

The overview's figures (counts, throughput, errors) are in :mod:`durable_jobs.overview`.
"""

from __future__ import annotations

import datetime
from typing import Any

from django.db.models import Count, QuerySet

from durable_jobs.flow.batches import progress
from durable_jobs.flow.queues import known, serving_nodes
from durable_jobs.lifecycle.states import FINAL, UNFINISHED, State
from durable_jobs.models import Batch, Job, Queue
from durable_jobs.redaction import redact


def iso(value: datetime.datetime | None) -> str | None:
    return value.isoformat() if value else None


def job_to_dict(job: Job, *, attempts: bool = False) -> dict[str, Any]:
    """The stable JSON form of a job (``--json``); secret-looking payload keys masked."""
    holder = job.lease_holder
    data: dict[str, Any] = {
        "id": job.pk,
        "name": job.name,
        "queue": job.queue,
        "state": job.state,
        "priority": job.priority,
        "attempts": job.attempts,
        "max_retries": job.max_retries,
        "payload": redact(job.payload),
        "idempotency_key": job.idempotency_key,
        "created_at": iso(job.created_at),
        "available_at": iso(job.available_at),
        "attempted_at": iso(job.attempted_at),
        "finished_at": iso(job.finished_at),
        "lease_expires_at": iso(job.lease_expires_at),
        "node": holder.name if holder else None,
        "progress": job.progress,
        "batch_id": job.batch_id,
        "concurrency_key": job.concurrency_key,
        "unique_in": [state for state in job.unique_states.split(",") if state],
        "result": redact(job.result),
        "last_error": job.last_error,
        "meta": redact(job.meta),
        # Enqueued through Django's Tasks framework: the Task's path and the TASKS alias.
        "task": {"path": job.name, "backend": job.task_backend} if job.task_backend else None,
    }
    if attempts:
        data["attempts_detail"] = [
            {
                "number": a.number,
                "outcome": a.outcome,
                "node": a.node,
                "started_at": iso(a.started_at),
                "finished_at": iso(a.finished_at),
                "duration_ms": round(a.duration.total_seconds() * 1000, 3),
                "error_class": a.error_class,
                "error_message": a.error_message,
                "traceback": a.traceback,
                "log": a.log,
            }
            for a in job.attempt_set.order_by("id")
        ]
    return data


def queues() -> list[dict[str, Any]]:
    """Every known queue: paused or not, its limits, waiting and leased counts, live nodes."""
    rows = {q.name: q for q in Queue.objects.all()}
    counts: dict[str, dict[str, int]] = {}
    for row in (
        Job.objects.filter(state__in=UNFINISHED)
        .values("queue", "state")
        .annotate(n=Count("pk"))
        .order_by()
    ):
        entry = counts.setdefault(row["queue"], {"waiting": 0, "leased": 0})
        entry["leased" if row["state"] == State.LEASED else "waiting"] += row["n"]
    serving = serving_nodes()
    out = []
    for name in known():
        control = rows.get(name)
        out.append(
            {
                "name": name,
                "paused": bool(control and control.paused),
                "paused_at": iso(control.paused_at) if control else None,
                "rate": control.rate if control else "",
                "global_concurrency": control.global_concurrency if control else None,
                **counts.get(name, {"waiting": 0, "leased": 0}),
                "live_nodes": len(serving.get(name, [])),
            }
        )
    return out


def batch_to_dict(batch: Batch) -> dict[str, Any]:
    """A batch's progress: jobs per state while open, final counts once finished."""
    per_state = batch.counts if batch.is_finished else progress(batch)
    done = sum(n for state, n in per_state.items() if state in FINAL)
    return {
        "id": batch.pk,
        "name": batch.name,
        "status": "finished" if batch.is_finished else "open",
        "total": batch.total,
        "done": done,
        "counts": dict(sorted(per_state.items())),
        "callback": batch.callback_name or None,
        "callback_job_id": batch.callback_job_id,
        "created_at": iso(batch.created_at),
        "finished_at": iso(batch.finished_at),
    }


def filtered(
    *,
    state: list[str] | None = None,
    queue: str | None = None,
    name: str | None = None,
    since: datetime.datetime | None = None,
    batch: int | None = None,
) -> QuerySet[Job]:
    jobs = Job.objects.all()
    if batch:
        jobs = jobs.filter(batch_id=batch)
    if state:
        jobs = jobs.filter(state__in=state)
    if queue:
        jobs = jobs.filter(queue=queue)
    if name:
        jobs = jobs.filter(name=name)
    if since:
        jobs = jobs.filter(created_at__gte=since)
    return jobs
