"""Helpers for testing code that uses durable_jobs, in your own test suite.

``drain`` and ``perform`` run jobs in the calling thread, on the calling thread's
database connection, so they work inside a test's transaction (pytest-django's
``db`` fixture, ``django.test.TestCase``).
"""

from __future__ import annotations

import collections
from typing import Any

from django.utils import timezone

from durable_jobs.context import JobContext
from durable_jobs.flow import queues as flow_queues
from durable_jobs.handlers import JobHandler
from durable_jobs.lifecycle import outcomes, recording
from durable_jobs.lifecycle.states import CLAIMABLE, State
from durable_jobs.lifecycle.transitions import claim
from durable_jobs.logging import JobLoggerAdapter, job_fields
from durable_jobs.models import Job
from durable_jobs.worker.execute import call_handler, execute

__all__ = ["assert_enqueued", "drain", "enqueued_jobs", "perform", "refute_enqueued"]

TEST_NODE = "test-drain"


def drain(
    queue: str | None = None, *, with_scheduled: bool = False, limit: int = 10_000
) -> collections.Counter[str]:
    """Run every available job (of ``queue``, or of all queues) until none is left.

    ``with_scheduled=True`` also runs jobs whose ``available_at`` is in the future,
    including retries waiting for their backoff, as if the time had come. Returns a
    count of outcomes, e.g. ``Counter({"completed": 3, "failed": 1})``.

    A handler that raises ``SystemExit`` or ``KeyboardInterrupt`` fails its job, as in a
    worker; a ``KeyboardInterrupt`` (which may be Ctrl-C) then also stops the drain.
    """
    counts: collections.Counter[str] = collections.Counter()
    while sum(counts.values()) < limit:
        waiting = Job.objects.filter(state__in=sorted(CLAIMABLE))
        if queue is not None:
            waiting = waiting.filter(queue=queue)
        if with_scheduled:
            waiting.filter(available_at__gt=timezone.now()).update(available_at=timezone.now())
        queues = sorted(
            set(waiting.filter(available_at__lte=timezone.now()).values_list("queue", flat=True))
        )
        if not queues:
            break
        limited = flow_queues.limited(queues)
        ran = 0
        for name in queues:
            # A worker's steps, one job at a time: claim, run, decide, write.
            claimed = claim(
                queue=name, limit=100, node_id=None, lease_seconds=300, limited=name in limited
            )
            for job in claimed:
                result = execute(job, node=TEST_NODE)
                recording.write_now([outcomes.decide(result, node=TEST_NODE)])
                counts[result.outcome.value] += 1
                if isinstance(result.error, KeyboardInterrupt):
                    # Here, unlike in a worker's pool thread, it may be the developer's
                    # Ctrl-C: recorded as the job's failure, it stops the drain.
                    raise result.error
            ran += len(claimed)
        if not ran:
            break  # what is left waits on a paused queue, a rate limit or a held key
    return counts


def perform(handler: JobHandler, **kwargs: Any) -> Any:
    """Run ``handler`` as a worker would (argument checks, JSON round trip, context) and return
    its result, without enqueuing. ``Snooze``, ``Cancel`` and ``Discard`` propagate."""
    payload = handler.check_arguments((), kwargs)
    job = Job(
        name=handler.name, queue=handler.queue, payload=payload, attempts=1, state=State.LEASED
    )
    args: tuple[Any, ...] = ()
    if handler.takes_context:
        args = (_PerformContext(job=job, logger=JobLoggerAdapter(job_fields(job, node=TEST_NODE))),)
    return call_handler(handler, handler.timeout, args, payload)


class _PerformContext(JobContext):
    """A context for a job that has no row: progress is kept in memory, the lease always holds."""

    def progress(self, percent: float) -> None:
        self.job.progress = max(0.0, min(100.0, float(percent)))

    def heartbeat(self) -> bool:
        return True


def enqueued_jobs(handler: JobHandler | str | Any, **payload_subset: Any) -> list[Job]:
    """Jobs of ``handler`` (a ``@job`` handler, a Task of Django's Tasks framework, or a
    name) still waiting to run (queued or retrying) whose payload contains
    ``payload_subset`` (a Task's: its keyword arguments)."""
    name = _name_of(handler)
    jobs = Job.objects.filter(name=name, state__in=[State.QUEUED, State.RETRYING]).order_by("id")
    return [j for j in jobs if _contains(_arguments_of(j), payload_subset)]


def assert_enqueued(handler: JobHandler | str | Any, **payload_subset: Any) -> Job:
    """Assert a matching job is waiting to run, and return it."""
    found = enqueued_jobs(handler, **payload_subset)
    if not found:
        name = _name_of(handler)
        waiting = list(
            Job.objects.filter(name=name, state__in=[State.QUEUED, State.RETRYING]).values_list(
                "payload", flat=True
            )[:10]
        )
        raise AssertionError(
            f"Expected a waiting {name} job with payload containing {payload_subset!r}; "
            f"waiting {name} jobs have payloads {waiting!r}"
        )
    return found[0]


def refute_enqueued(handler: JobHandler | str | Any, **payload_subset: Any) -> None:
    """Assert no matching job is waiting to run."""
    found = enqueued_jobs(handler, **payload_subset)
    if found:
        raise AssertionError(
            f"Expected no waiting job matching {payload_subset!r}, found {[j.pk for j in found]}"
        )


def _name_of(handler: Any) -> str:
    """A handler's name; a Task of Django's Tasks framework is named by its module path."""
    if isinstance(handler, str):
        return handler
    return getattr(handler, "module_path", None) or handler.name


def _arguments_of(job: Job) -> Any:
    return (
        job.payload.get("kwargs")
        if job.task_backend and isinstance(job.payload, dict)
        else job.payload
    )


def _contains(payload: Any, subset: dict[str, Any]) -> bool:
    return isinstance(payload, dict) and all(
        k in payload and payload[k] == v for k, v in subset.items()
    )
