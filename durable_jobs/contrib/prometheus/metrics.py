"""The counters of one process: the attempts it finished and the jobs it enqueued.

They live on ``prometheus_client``'s default registry, beside the process metrics and
any metrics of the project's own, so whatever already exposes that registry exposes
these too. Each process counts only what it did itself: a worker the attempts it
finished (and the lost attempts its rescuer recorded), any process the jobs it
enqueued. Prometheus sums them over the scrape targets.

Importing this module connects the counters to the signals
:data:`durable_jobs.signals.attempt_finished` and :data:`durable_jobs.signals.job_enqueued`
(once: the receivers have a ``dispatch_uid``). The metrics view and
``runworker --metrics-port`` import it before anything is counted; a project that
exposes the default registry some other way adds ``"durable_jobs.contrib.prometheus"``
to ``INSTALLED_APPS``, which imports it at start-up.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter, Histogram

from durable_jobs import signals
from durable_jobs.models import Attempt, Job, Outcome

#: Attempt durations, in seconds: from a web hook's tens of milliseconds to an hour's report.
DURATION_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
    30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, float("inf"),
)  # fmt: skip

ATTEMPTS = Counter(
    "durable_jobs_attempts",
    "Attempts this process finished, by outcome",
    ["queue", "name", "outcome"],
)
ATTEMPT_DURATION = Histogram(
    "durable_jobs_attempt_duration_seconds",
    "How long the attempts this process ran took (lost attempts left out)",
    ["queue", "name"],
    buckets=DURATION_BUCKETS,
)
ENQUEUED = Counter(
    "durable_jobs_enqueued",
    "Jobs this process enqueued (an existing job returned for a duplicate key not counted)",
    ["queue", "name"],
)


def count_attempt(sender: Any, job: Job, attempt: Attempt, **kwargs: Any) -> None:
    """Count one finished attempt and, unless it was lost, observe its duration."""
    outcome = str(attempt.outcome)
    ATTEMPTS.labels(job.queue, job.name, outcome).inc()
    # A lost attempt is recorded by the rescuer, which did not run it: its duration is
    # how long its lease took to expire, not how long the handler ran.
    if outcome != Outcome.LOST:
        ATTEMPT_DURATION.labels(job.queue, job.name).observe(attempt.duration.total_seconds())


def count_enqueued(sender: Any, job: Job, **kwargs: Any) -> None:
    ENQUEUED.labels(job.queue, job.name).inc()


signals.attempt_finished.connect(count_attempt, dispatch_uid="durable_jobs.prometheus.attempts")
signals.job_enqueued.connect(count_enqueued, dispatch_uid="durable_jobs.prometheus.enqueued")
