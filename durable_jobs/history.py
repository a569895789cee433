"""Per handler, how its recent attempts went: how many, how many failed, how long they took.

Read like every figure of the overview (:mod:`durable_jobs.overview`), with a bounded
cost: the attempts finished in the window (the last 24 hours), through the index on
``Attempt.finished_at``, narrowed to the newest ``cap`` when the window holds more
(:class:`~durable_jobs.windows.Window`, which then says so). Each attempt row carries
its handler's name, so no job row is read.

Durations are summarised by percentiles of the **nearest-rank** kind: the p-th
percentile of n durations is the ``ceil(p * n / 100)``-th smallest of them, so it is
always a duration that was measured (of 1, 2, … 100 ms, p50 is 50 ms and p95 95 ms).
It needs no interpolation, so the database computes it in one query with window
functions that SQLite, PostgreSQL and MySQL share, and only two rows per handler
come back, however many attempts the window holds.
"""

from __future__ import annotations

import datetime
import math
from typing import Any

from django.db import connections
from django.db.models import Case, F, IntegerField, OuterRef, Subquery, Value, When

from durable_jobs.models import FAILED_OUTCOMES, Attempt, Job
from durable_jobs.windows import CAP, Window

#: The percentiles of each handler's durations, in percent.
PERCENTILES = (50, 95)


def nearest_rank(percent: int, count: int) -> int:
    """The 1-based rank of the ``percent``-th percentile among ``count`` sorted values."""
    return max(1, math.ceil(percent * count / 100))


def percentile(values: list[float], percent: int) -> float:
    """The nearest-rank percentile of ``values`` (the definition the overview uses)."""
    if not values:
        raise ValueError("percentile() of no values: pass at least one")
    return sorted(values)[nearest_rank(percent, len(values)) - 1]


def milliseconds(value: datetime.timedelta | int) -> float:
    """A stored duration in milliseconds: PostgreSQL returns an interval, the databases
    without one (SQLite, MySQL) the bigint of microseconds that Django stores."""
    if isinstance(value, datetime.timedelta):
        return round(value / datetime.timedelta(milliseconds=1), 3)
    return round(int(value) / 1000, 3)


def handler_history(since: datetime.datetime, cap: int = CAP) -> dict[str, Any]:
    """Per handler, its attempts finished since ``since`` (the newest ``cap`` at most):
    ``attempts``, ``failed`` (failed, timed out, lost or discarded, as in the failure
    rate) and the nearest-rank ``p50_ms`` and ``p95_ms`` of their durations, whatever
    their outcome; the busiest handler first."""
    attempts = Attempt.objects.all()
    window = Window.newest(attempts, "finished_at", since, cap)
    # Each attempt carries its handler's name. Attempts written before it did (by an
    # older version) take their job's, by a correlated primary-key probe rather than a
    # join: a join leaves the planner free to hash the whole job table. CASE evaluates
    # the probe only for those rows.
    from_job = Job.objects.filter(pk=OuterRef("job_id")).order_by().values("name")[:1]
    name = Case(When(name="", then=Subquery(from_job)), default=F("name"))
    failure = Case(
        When(outcome__in=FAILED_OUTCOMES, then=Value(1)),
        default=Value(0),
        output_field=IntegerField(),
    )
    read = (
        window.rows(attempts)
        .order_by()
        .annotate(handler=name, failure=failure)
        .values("handler", "duration", "failure")[:cap]
    )
    sql, params = read.query.get_compiler(using=read.db).as_sql()
    # Of each handler's attempts, sorted by duration, only the rows at the percentiles'
    # ranks: rank = ceil(p * n / 100), written as 100 * (rank - 1) < p * n <= 100 * rank
    # so that it needs integer arithmetic only.
    at_a_rank = " OR ".join(
        f"(100 * (position - 1) < {p} * n AND {p} * n <= 100 * position)" for p in PERCENTILES
    )
    # One window, so one sort: the counts take the whole partition as their frame.
    ranking = f"""
        SELECT handler, duration, position, n, failures FROM (
            SELECT handler, duration,
                ROW_NUMBER() OVER by_duration AS position,
                COUNT(*) OVER whole AS n,
                SUM(failure) OVER whole AS failures
            FROM ({sql}) AS recent
            WINDOW by_duration AS (PARTITION BY handler ORDER BY duration),
                whole AS (by_duration ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)
        ) AS ranked
        WHERE {at_a_rank}
    """
    handlers: dict[str, dict[str, Any]] = {}
    with connections[read.db].cursor() as cursor:
        cursor.execute(ranking, params)
        for handler, duration, position, n, failures in cursor.fetchall():
            row = handlers.setdefault(
                handler, {"name": handler, "attempts": int(n), "failed": int(failures)}
            )
            for p in PERCENTILES:
                if nearest_rank(p, int(n)) == position:
                    row[f"p{p}_ms"] = milliseconds(duration)
    return {
        **window.as_dict(),
        "handlers": sorted(handlers.values(), key=lambda row: (-row["attempts"], row["name"])),
    }
