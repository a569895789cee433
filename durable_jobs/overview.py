"""The figures of the overview page (and ``jobs stats``), each read with a bounded cost.

A dashboard that counts a large table on every request is the one that takes seconds
once the table holds millions of finished jobs. Here nothing reads more than ``cap``
index entries per figure, however large the tables grow:

- waiting and running jobs are counted per queue through the ``(state, queue, …)``
  index, at most ``cap`` per state (past that, per queue, each capped);
- finished jobs are counted over a recent window through the ``(state, finished_at,
  queue)`` index; when the window holds more than ``cap`` jobs it is narrowed to the
  newest ``cap`` and says so (``since`` moves, ``capped`` is true);
- throughput and the failure rate use the same windows (the last hour), failures
  through a partial index over failed attempts only;
- a queue's lag is one probe of the ``(state, queue, available_at)`` index;
- the per-handler history (:mod:`durable_jobs.history`) reads the last 24 hours of
  attempts through the index on their ``finished_at``, narrowed the same way.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from typing import Any

from django.db import connections
from django.db.models import Count, F, Max, Q, QuerySet
from django.db.models.functions import TruncMinute
from django.utils import timezone

from durable_jobs.flow.queues import declared
from durable_jobs.history import handler_history
from durable_jobs.lifecycle.states import FINAL, UNFINISHED, State
from durable_jobs.models import FAILED_OUTCOMES, Attempt, Job, Node, Queue
from durable_jobs.serializers import iso
from durable_jobs.windows import CAP, Window

#: Finished jobs and error groups are counted over this recent window.
FINISHED_WINDOW = datetime.timedelta(hours=24)
ERROR_GROUPS = 10


def per_queue(rows: QuerySet[Job], cap: int = CAP) -> tuple[dict[str, int], set[str]]:
    """Rows per queue, reading at most ``cap`` + 1 rows; and the queues whose count is capped.

    One grouped query over a LIMITed read (the LIMIT also keeps SQLite from flattening
    the subquery, so the inner read keeps its own index). When that read is cut short,
    each queue is counted on its own, each up to ``cap`` + 1, and a capped count is
    reported as ``cap`` ("more than cap").
    """
    limited = rows.order_by().values("queue")[: cap + 1]
    sql, params = limited.query.get_compiler(using=rows.db).as_sql()
    with connections[rows.db].cursor() as cursor:
        cursor.execute(f"SELECT queue, COUNT(*) FROM ({sql}) capped GROUP BY queue", params)
        counts = {queue: int(n) for queue, n in cursor.fetchall()}
    if sum(counts.values()) <= cap:
        return counts, set()
    # The read stopped at cap + 1 rows, in index order: counts past the first queues are
    # missing. Count each queue separately, each read bounded.
    exact = {q: rows.filter(queue=q)[: cap + 1].count() for q in declared_queues(counts)}
    over = {q for q, n in exact.items() if n > cap}
    return {q: min(n, cap) for q, n in exact.items()}, over


def declared_queues(seen: Iterable[str] = ()) -> list[str]:
    """The queues of the settings, the queue table and the nodes, plus ``seen``.

    Not :func:`durable_jobs.flow.queues.known`, which also reads every waiting job's
    queue: a backlog of millions would make that the slowest read of the page.
    """
    return sorted(set(declared()) | set(seen))


def queue_table(now: datetime.datetime, cap: int = CAP) -> tuple[list[dict[str, Any]], dict]:
    """Per queue: waiting and running counts, recently finished counts, lag, paused.

    Returns the rows and, per finished state, the window its counts cover.
    """
    counts: dict[str, dict[str, int]] = {}
    capped: dict[str, set[str]] = {}
    for state in UNFINISHED:
        found, over = per_queue(Job.objects.filter(state=state), cap)
        for queue, n in found.items():
            counts.setdefault(queue, {})[state] = n
        for queue in over:
            capped.setdefault(queue, set()).add(state)
    windows: dict[str, Window] = {}
    for state in sorted(FINAL):
        jobs = Job.objects.filter(state=state)
        window = windows[state] = Window.newest(jobs, "finished_at", now - FINISHED_WINDOW, cap)
        # The window holds at most cap jobs, so per_queue is exact here.
        for queue, n in per_queue(window.rows(jobs), cap)[0].items():
            counts.setdefault(queue, {})[state] = n
    paused = set(Queue.objects.filter(paused=True).values_list("name", flat=True))
    rows = []
    for name in declared_queues(counts):
        rows.append(
            {
                "name": name,
                "paused": name in paused,
                **{s.value: counts.get(name, {}).get(s.value, 0) for s in State},
                "capped": sorted(capped.get(name, ())),
                "lag_seconds": lag_seconds(name, now),
            }
        )
    return rows, {state: w.as_dict() for state, w in windows.items()}


def lag_seconds(queue: str, now: datetime.datetime, using: str | None = None) -> float | None:
    """How long the oldest ``queued`` job of ``queue`` available at ``now`` has waited,
    or None when none is: one probe of the ``(state, queue, available_at)`` index."""
    oldest = (
        Job.objects.using(using)
        .filter(state=State.QUEUED, queue=queue, available_at__lte=now)
        .order_by("available_at")
        .values_list("available_at", flat=True)
        .first()
    )
    return round((now - oldest).total_seconds(), 3) if oldest else None


def completed_in_last_hour(now: datetime.datetime, cap: int = CAP) -> Window:
    """The window of the last hour's completed jobs, shared by throughput and failure rate."""
    completed = Job.objects.filter(state=State.COMPLETED)
    return Window.newest(completed, "finished_at", hour_start(now), cap)


def throughput(
    now: datetime.datetime, cap: int = CAP, window: Window | None = None
) -> dict[str, Any]:
    """Jobs completed per minute over the last hour (the newest ``cap`` at most)."""
    completed = Job.objects.filter(state=State.COMPLETED)
    window = window if window is not None else completed_in_last_hour(now, cap)
    per_minute = {
        row["minute"]: row["n"]
        for row in window.rows(completed)
        .annotate(minute=TruncMinute("finished_at", tzinfo=datetime.UTC))
        .order_by()
        .values("minute")
        .annotate(n=Count("*"))
    }
    minutes = [hour_start(now) + datetime.timedelta(minutes=i) for i in range(60)]
    # Minutes wholly before a narrowed window were not counted: None, not zero.
    first_counted = window.since.replace(second=0, microsecond=0)
    if window.capped:
        first_counted += datetime.timedelta(minutes=1)
    series = [
        {
            "minute": iso(m),
            "completed": per_minute.get(m, 0) if m >= first_counted else None,
        }
        for m in minutes
    ]
    counted = [point["completed"] for point in series if point["completed"] is not None]
    return {
        **window.as_dict(),
        "per_minute": series,
        "total": sum(per_minute.values()),
        "peak": max(counted, default=0),
    }


def hour_start(now: datetime.datetime) -> datetime.datetime:
    """The start of the last hour's 60 minute buckets, the current minute being the last."""
    return now.replace(second=0, microsecond=0) - datetime.timedelta(minutes=59)


def failure_rate(
    now: datetime.datetime, cap: int = CAP, completed: Window | None = None
) -> dict[str, Any]:
    """Failed attempts ÷ (failed attempts + completed jobs), over the last hour.

    Every completed job had exactly one successful attempt, so completed jobs count the
    successful attempts. Both are counted over one window: the narrower of the two
    when either holds more than ``cap`` rows.
    """
    failed_rows = Attempt.objects.filter(outcome__in_constants=FAILED_OUTCOMES)
    completed_rows = Job.objects.filter(state=State.COMPLETED)
    start = hour_start(now)
    window = max(
        Window.newest(failed_rows, "finished_at", start, cap),
        completed if completed is not None else completed_in_last_hour(now, cap),
        key=lambda w: (w.since, w.capped),
    )
    failed = window.rows(failed_rows).count()
    succeeded = window.rows(completed_rows).count()
    total = failed + succeeded
    return {
        **window.as_dict(),
        "failed": failed,
        "completed": succeeded,
        "rate": round(failed / total, 4) if total else None,
    }


def error_groups(
    since: datetime.datetime, limit: int = ERROR_GROUPS, cap: int = CAP
) -> dict[str, Any]:
    """Failed attempts since ``since``, grouped by error class and message, newest first.

    The message holds the whole cause chain; its last link is the root cause. Each
    group names its newest attempt (``example_attempt``), by which the job list filters.
    """
    failed_rows = Attempt.objects.filter(outcome__in_constants=FAILED_OUTCOMES)
    window = Window.newest(failed_rows, "finished_at", since, cap)
    rows = list(
        window.rows(failed_rows)
        .values("error_class", "error_message")
        .annotate(count=Count("*"), last_seen=Max("finished_at"), example_attempt=Max("pk"))
        .order_by("-last_seen")[:limit]
    )
    # The job of each group's newest attempt (one query for the page of groups).
    job_of = dict(
        Attempt.objects.filter(pk__in=[row["example_attempt"] for row in rows]).values_list(
            "pk", "job_id"
        )
    )
    return {
        **window.as_dict(),
        "groups": [
            {
                "error_class": row["error_class"],
                "root_cause": root_cause(row["error_message"]),
                "message": (row["error_message"].splitlines() or [""])[0],
                "count": row["count"],
                "last_seen": iso(row["last_seen"]),
                "example_attempt": row["example_attempt"],
                "example_job": job_of.get(row["example_attempt"]),
            }
            for row in rows
        ],
    }


def root_cause(error_message: str) -> str:
    """The last link of a stored cause chain (links are joined by 'caused by: ')."""
    return error_message.split("\ncaused by: ")[-1].strip()


def jobs_with_error(example_attempt: Attempt, cap: int = CAP) -> QuerySet[Job]:
    """Jobs that failed with the same error as ``example_attempt``, within the error window
    before it: at most the jobs of its newest ``cap`` such attempts, read through the
    partial index over failed attempts. The window is bounded by a time (found with one
    probe of that index), not by a LIMIT inside ``IN (...)``, which MySQL refuses."""
    attempts = Attempt.objects.filter(
        outcome__in_constants=FAILED_OUTCOMES,
        finished_at__lte=example_attempt.finished_at,
        error_class=example_attempt.error_class,
        error_message=example_attempt.error_message,
    )
    since = example_attempt.finished_at - FINISHED_WINDOW
    window = Window.newest(attempts, "finished_at", since, cap)
    return Job.objects.filter(pk__in=window.rows(attempts).values("job_id"))


def nodes(now: datetime.datetime) -> dict[str, list[dict[str, Any]]]:
    """Worker nodes, live or stale by their last heartbeat, with their running jobs."""
    live_after = Node.live_after(now)
    found: dict[str, list[dict[str, Any]]] = {"live": [], "stale": []}
    rows = Node.objects.annotate(
        running=Count("jobs", filter=Q(jobs__state=State.LEASED))
    ).order_by(F("last_heartbeat_at").desc())
    for node in rows:
        group = "live" if node.last_heartbeat_at >= live_after else "stale"
        found[group].append(
            {
                "name": node.name,
                "pid": node.pid,
                "queues": node.queues,
                "concurrency": node.concurrency,
                "running": node.running,
                "stopping": node.stopping,
                "started_at": iso(node.started_at),
                "last_heartbeat_at": iso(node.last_heartbeat_at),
            }
        )
    return found


def overview(now: datetime.datetime | None = None, cap: int = CAP) -> dict[str, Any]:
    """Everything the overview page shows, as JSON-ready data (the keys are stable)."""
    now = now or timezone.now()
    queues, finished = queue_table(now, cap)
    # One read of the completed window serves both figures.
    completed = completed_in_last_hour(now, cap)
    rate = throughput(now, cap, completed)
    return {
        "generated_at": iso(now),
        "queues": queues,
        "finished_windows": finished,
        "throughput": rate,
        "failure_rate": failure_rate(now, cap, completed),
        "nodes": nodes(now),
        "errors": error_groups(now - FINISHED_WINDOW, ERROR_GROUPS, cap),
        "history": handler_history(now - FINISHED_WINDOW, cap),
    }
