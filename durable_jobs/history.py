"""Per handler, how its recent attempts went: how many, how many failed, how long they took.

Read like every figure of the overview (:mod:`durable_jobs.overview`), with a bounded
cost: the attempts finished in the window (the last 24 hours), through the index on
``Attempt.finished_at``, narrowed to the newest ``cap`` when the window holds more
(:class:`~durable_jobs.windows.Window`, which then says so). Each attempt row carries
its handler's name, so no job row is read.

Durations are summarised by percentiles of the **nearest-rank** kind: the p-th
percentile of n durations is the ``ceil(p * n / 100)``-th smallest of them, so it is
always a duration that was measured (of 1, 2, … 100 ms, p50 is 50 ms and p95 95 ms).
It needs no interpolation, so the database computes it in one query
(:mod:`durable_jobs.db.percentiles`), and one row per handler comes back, however
many attempts the window holds.
"""

from __future__ import annotations

import datetime
import math
from typing import Any

from django.db import connections
from django.db.models import Case, F, IntegerField, Value, When

from durable_jobs.db import engine_for
from durable_jobs.models import FAILED_OUTCOMES, Attempt
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
    # Each attempt carries its handler's name, so no job row is read (migration 0010
    # filled it in for the attempts of the day before it).
    failure = Case(
        When(outcome__in=FAILED_OUTCOMES, then=Value(1)),
        default=Value(0),
        output_field=IntegerField(),
    )
    read = (
        window.rows(attempts)
        .order_by()
        .annotate(handler=F("name"), failure=failure)
        .values("handler", "duration", "failure")[:cap]
    )
    sql, params = read.query.get_compiler(using=read.db).as_sql()
    # One row per handler: its count, its failures and its percentiles, computed by the
    # database (the engine knows its best way, see durable_jobs.db.percentiles).
    summary = engine_for(read.db).percentiles_sql(sql, PERCENTILES)
    handlers: list[dict[str, Any]] = []
    with connections[read.db].cursor() as cursor:
        cursor.execute(summary, params)
        for handler, n, failures, *durations in cursor.fetchall():
            row = {"name": handler, "attempts": int(n), "failed": int(failures)}
            for p, duration in zip(PERCENTILES, durations, strict=True):
                row[f"p{p}_ms"] = milliseconds(duration)
            handlers.append(row)
    return {
        **window.as_dict(),
        "handlers": sorted(handlers, key=lambda row: (-row["attempts"], row["name"])),
    }
