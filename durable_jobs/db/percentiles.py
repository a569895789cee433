"""Nearest-rank percentiles of durations per handler, computed in the database.

Both builders take a query of ``(handler, duration, failure)`` rows and return SQL that
yields one row per handler: ``handler, n, failures, p<P>...`` for each percentile P.
The p-th percentile of n durations is the ``ceil(p * n / 100)``-th smallest of them,
always a duration that was measured.

:func:`ranked` is portable (window functions, which SQLite, PostgreSQL and MySQL 8
share) but sorts every row by handler name and duration, comparing text. Where the
database has SQL's ordered-set aggregates, :func:`ordered_set` groups first (hashing
the names) and sorts each handler's durations alone: ``percentile_disc(p / 100)`` is
the nearest-rank percentile by definition.
"""

from __future__ import annotations

from collections.abc import Sequence


def ranked(rows_sql: str, percents: Sequence[int]) -> str:
    # rank = ceil(p * n / 100), written as 100 * (rank - 1) < p * n <= 100 * rank, so that
    # it needs integer arithmetic only. One window, so one sort: the counts take the
    # whole partition as their frame.
    picks = ", ".join(
        f"MAX(CASE WHEN 100 * (position - 1) < {p} * n AND {p} * n <= 100 * position "
        f"THEN duration END) AS p{p}"
        for p in percents
    )
    return f"""
        SELECT handler, MAX(n), MAX(failures), {picks} FROM (
            SELECT handler, duration,
                ROW_NUMBER() OVER by_duration AS position,
                COUNT(*) OVER whole AS n,
                SUM(failure) OVER whole AS failures
            FROM ({rows_sql}) AS recent
            WINDOW by_duration AS (PARTITION BY handler ORDER BY duration),
                whole AS (by_duration ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)
        ) AS ranked
        GROUP BY handler
    """


def ordered_set(rows_sql: str, percents: Sequence[int]) -> str:
    picks = ", ".join(
        f"percentile_disc({p / 100}) WITHIN GROUP (ORDER BY duration) AS p{p}" for p in percents
    )
    return f"""
        SELECT handler, COUNT(*), SUM(failure), {picks}
        FROM ({rows_sql}) AS recent
        GROUP BY handler
    """
