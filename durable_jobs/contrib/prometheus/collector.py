"""Gauges read from the database on each scrape: jobs per queue and state, lag, nodes.

The figures are the admin overview's (:mod:`durable_jobs.overview`), read with the same
bounded queries, so a scrape costs what a look at the overview page costs however large
the job table grows: waiting and running jobs are counted exactly (up to
:data:`durable_jobs.overview.CAP` per queue and state), finished ones over the
overview's recent window (the last 24 hours, at most ``CAP`` per state).

These gauges describe the whole database, not one process: register the collector in
one place only (the web view does), or every scrape target reports the same numbers.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator

from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily, Metric

from durable_jobs import overview
from durable_jobs.lifecycle.states import State

JOBS = "durable_jobs_jobs"
QUEUE_LAG = "durable_jobs_queue_lag_seconds"
NODES = "durable_jobs_nodes"

JOBS_HELP = (
    "Jobs per queue and state: queued, leased and retrying exactly, completed, dead "
    "and cancelled over the last 24 hours"
)
QUEUE_LAG_HELP = "Age of the oldest queued job available to run, 0 when none waits"
NODES_HELP = "Worker nodes by status: live (heartbeat within a lease period) or stale"


class DatabaseCollector:
    """A ``prometheus_client`` collector of the database-wide gauges.

    The web view (:func:`durable_jobs.contrib.prometheus.views.metrics`) uses it. A
    project that already exposes the default registry (django-prometheus, say) may
    register it there instead::

        from prometheus_client import REGISTRY
        REGISTRY.register(DatabaseCollector())

    Each scrape then reads the database from the thread that serves it.
    """

    def describe(self) -> list[Metric]:
        # The families without samples: registering the collector reads no rows.
        return list(self.families())

    def collect(self) -> Iterator[Metric]:
        now = timezone.now()
        yield from self.families(now)

    def families(self, now: datetime.datetime | None = None) -> Iterator[Metric]:
        jobs = GaugeMetricFamily(JOBS, JOBS_HELP, labels=["queue", "state"])
        lag = GaugeMetricFamily(QUEUE_LAG, QUEUE_LAG_HELP, labels=["queue"], unit="seconds")
        nodes = GaugeMetricFamily(NODES, NODES_HELP, labels=["status"])
        if now is not None:
            rows, _windows = overview.queue_table(now)
            for row in rows:
                for state in State:
                    jobs.add_metric([row["name"], state.value], row[state.value])
                lag.add_metric([row["name"]], row["lag_seconds"] or 0.0)
            for status, found in overview.nodes(now).items():
                nodes.add_metric([status], len(found))
        yield jobs
        yield lag
        yield nodes
