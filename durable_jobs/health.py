"""Health checks: the database answers, a worker is alive, the queues keep up.

:func:`run_checks` returns a :class:`HealthReport`; ``manage.py jobs health`` prints it
and exits 0 or 1, and a web view or a monitoring script can call it the same way::

    from durable_jobs.health import run_checks

    report = run_checks(max_lag=300)
    report.ok                   # False if any check failed
    report.as_dict()            # {"ok": ..., "checks": [{"name", "ok", "detail", ...}]}

Each figure is read with a bounded cost, as on the admin's overview: the nodes are one
small table, and a queue's lag is one probe of the ``(state, queue, available_at)``
index (``durable_jobs.overview.lag_seconds``). Nothing counts the job table.

The rules, the same as everywhere else in the package:

- A node is **live** while its last heartbeat is more recent than one lease
  (:ref:`LEASE_SECONDS <setting-LEASE_SECONDS>`, ``Node.live_after()``); past that,
  its jobs are rescued by others.
- A **stopping** node (finishing its running jobs after ``SIGTERM``) claims nothing
  more: it does not count as a live node of the cluster, but a named node that is
  stopping passes, since it is alive and doing what it was told.
- A queue's **lag** is how long its oldest ``queued`` job that is available now has
  waited (the ``LAG`` of ``jobs stats``): jobs delayed to a later time are not late,
  and jobs waiting for a retry (``retrying``) are not counted. **Paused** queues are
  not held to the maximum lag: their jobs are meant to wait.
"""

from __future__ import annotations

import dataclasses
import datetime
import time
from typing import Any

from django.db import Error, connections
from django.utils import timezone

from durable_jobs.conf import get_settings
from durable_jobs.db import job_db_alias
from durable_jobs.flow.queues import declared
from durable_jobs.models import Node, Queue
from durable_jobs.overview import lag_seconds
from durable_jobs.serializers import iso

#: The most node names a detail line lists.
NAMES_SHOWN = 5


@dataclasses.dataclass(frozen=True)
class HealthCheck:
    """One check: its ``name`` (``database``, ``nodes``, ``node <name>``, ``queue <name>``),
    whether it passed, a sentence saying why, and the figures behind it."""

    name: str
    ok: bool
    detail: str
    figures: dict[str, Any] = dataclasses.field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """``name``, ``ok``, ``detail`` and the figures, as ``--json`` prints them."""
        return {"name": self.name, "ok": self.ok, "detail": self.detail, **self.figures}

    def line(self) -> str:
        """The line ``jobs health`` prints: ``ok`` or ``failed``, the name, the detail."""
        return f"{'ok' if self.ok else 'failed':<6}  {self.name}: {self.detail}"


@dataclasses.dataclass(frozen=True)
class HealthReport:
    """The checks that ran, in order. When the database does not answer, that is the
    only check: the others could not be made."""

    checks: tuple[HealthCheck, ...]

    @property
    def ok(self) -> bool:
        """Whether every check passed."""
        return all(check.ok for check in self.checks)

    @property
    def failed(self) -> list[HealthCheck]:
        """The checks that failed."""
        return [check for check in self.checks if not check.ok]

    def as_dict(self) -> dict[str, Any]:
        """``{"ok": bool, "checks": [...]}``, JSON-ready."""
        return {"ok": self.ok, "checks": [check.as_dict() for check in self.checks]}

    def summary(self) -> str:
        """The last line ``jobs health`` prints: healthy, or which checks failed."""
        if self.ok:
            return f"healthy: {len(self.checks)} checks passed"
        names = ", ".join(check.name for check in self.failed)
        return f"unhealthy: {len(self.failed)} of {len(self.checks)} checks failed ({names})"


def run_checks(
    *,
    node: str | None = None,
    max_lag: float | None = None,
    using: str | None = None,
    now: datetime.datetime | None = None,
) -> HealthReport:
    """Check that the database answers; that at least one node is live (or, given
    ``node``, that this node is); and, given ``max_lag`` (seconds), that no running queue
    has waited longer than that. Database errors are reported, never raised.

    ``using`` is the database alias (default: the one the jobs are written to).
    """
    alias = using or job_db_alias()
    database = check_database(alias)
    if not database.ok:
        return HealthReport((database,))
    try:
        now = now or timezone.now()
        checks = [
            database,
            check_node(node, alias, now) if node is not None else check_nodes(alias, now),
        ]
        if max_lag is not None:
            checks.extend(check_queues(max_lag, alias, now))
    except Error as exc:  # it answered, then failed: a failover, a restart, a lost table
        detail = f"{where(alias)} failed during the checks: {one_line(exc)}"
        return HealthReport((HealthCheck("database", False, detail),))
    return HealthReport(tuple(checks))


def check_database(alias: str) -> HealthCheck:
    """Connect (or reuse the connection) and read the node table: the database answers
    and holds durable_jobs' tables."""
    connection = connections[alias]
    started = time.monotonic()
    try:
        connection.ensure_connection()
    except Error as exc:
        return HealthCheck(
            "database",
            False,
            f"{where(alias)} did not answer: {one_line(exc)}. Is it running, and reachable "
            f"with the settings of DATABASES[{alias!r}]?",
        )
    try:
        Node.objects.using(alias).exists()
    except Error as exc:
        return HealthCheck(
            "database",
            False,
            f"{where(alias)} answered, but durable_jobs' tables could not be read: "
            f"{one_line(exc)}. Has `manage.py migrate` been run?",
        )
    milliseconds = round((time.monotonic() - started) * 1000, 1)
    return HealthCheck(
        "database",
        True,
        f"{where(alias)} answered in {milliseconds:g} ms",
        {"alias": alias, "vendor": connection.vendor, "milliseconds": milliseconds},
    )


def check_nodes(alias: str, now: datetime.datetime) -> HealthCheck:
    """At least one node is live and not stopping."""
    live_after = Node.live_after(now)
    live: list[str] = []
    stopping: list[str] = []
    stale: list[tuple[str, datetime.datetime]] = []
    rows = Node.objects.using(alias).order_by("-last_heartbeat_at", "name")
    for name, beat, is_stopping in rows.values_list("name", "last_heartbeat_at", "stopping"):
        if beat < live_after:
            stale.append((name, beat))
        else:
            (stopping if is_stopping else live).append(name)
    figures = {
        "live": live,
        "stopping": stopping,
        "stale": [name for name, _ in stale],
        "stale_after_seconds": stale_after(),
    }
    others = [f"{len(stopping)} stopping ({names(stopping)})"] if stopping else []
    if stale:
        beats = [f"{name}: last heartbeat {ago(now, beat)}" for name, beat in stale]
        others.append(f"{len(stale)} stale ({names(beats)}; stale after {stale_after():g} s)")
    if live:
        detail = "; ".join([f"{len(live)} live ({names(live)})", *others])
        return HealthCheck("nodes", True, detail, figures)
    if not others:
        return HealthCheck("nodes", False, "no node is registered: is a worker running?", figures)
    return HealthCheck("nodes", False, "no live node: " + "; ".join(others), figures)


def check_node(name: str, alias: str, now: datetime.datetime) -> HealthCheck:
    """The node called ``name`` is live (stopping or not)."""
    label = f"node {name}"
    found = Node.objects.using(alias).filter(name=name).first()
    if found is None:
        registered = list(Node.objects.using(alias).order_by("name").values_list("name", flat=True))
        detail = "no such node is registered " + (
            f"(registered: {names(registered)})" if registered else "(none is)"
        )
        if "$" in name:
            detail += "; the name looks like a variable reference that was not expanded"
        return HealthCheck(label, False, detail, {"node": name})
    fresh = found.last_heartbeat_at >= Node.live_after(now)
    detail = f"last heartbeat {ago(now, found.last_heartbeat_at)} (stale after {stale_after():g} s)"
    if fresh and found.stopping:
        detail += "; stopping: finishing its running jobs"
    figures = {
        "node": name,
        "last_heartbeat_at": iso(found.last_heartbeat_at),
        "seconds_since_heartbeat": round((now - found.last_heartbeat_at).total_seconds(), 3),
        "stale_after_seconds": stale_after(),
        "stopping": found.stopping,
    }
    return HealthCheck(label, fresh, detail, figures)


def check_queues(max_lag: float, alias: str, now: datetime.datetime) -> list[HealthCheck]:
    """Per known queue (settings, the queue table, the nodes' queues): its lag is at
    most ``max_lag`` seconds, unless it is paused."""
    paused = set(Queue.objects.using(alias).filter(paused=True).values_list("name", flat=True))
    checks = []
    for queue in declared(using=alias):
        lag = lag_seconds(queue, now, using=alias)
        is_paused = queue in paused
        figures = {"lag_seconds": lag, "max_lag_seconds": max_lag, "paused": is_paused}
        label = f"queue {queue}"
        if lag is None:
            checks.append(HealthCheck(label, True, "no job is waiting to start", figures))
        elif is_paused:
            detail = f"paused, so its lag ({lag:.0f} s) is not held to the maximum"
            checks.append(HealthCheck(label, True, detail, figures))
        elif lag > max_lag:
            detail = f"lag {lag_text(lag, max_lag)} s exceeds the maximum lag of {max_lag:g} s"
            checks.append(HealthCheck(label, False, detail, figures))
        else:
            detail = f"lag {lag_text(lag, max_lag)} s, within the maximum lag of {max_lag:g} s"
            checks.append(HealthCheck(label, True, detail, figures))
    return checks


# -- wording --------------------------------------------------------------------------------


def stale_after() -> float:
    return get_settings().lease_seconds


def where(alias: str) -> str:
    return f"{alias!r} ({connections[alias].vendor})"


def one_line(exc: BaseException) -> str:
    """A driver's message on one line (psycopg's run over several)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def lag_text(lag: float, max_lag: float) -> str:
    """Whole seconds, unless they would read as the maximum itself ("lag 300 s exceeds
    the maximum lag of 300 s" for 300.4 s): then to the millisecond."""
    whole = f"{lag:.0f}"
    return f"{lag:.3f}" if whole == f"{max_lag:g}" else whole


def ago(now: datetime.datetime, then: datetime.datetime) -> str:
    # A clock a little ahead of this one must not print "-1 s ago".
    return f"{max((now - then).total_seconds(), 0):.0f} s ago"


def names(found: list[str]) -> str:
    shown = ", ".join(found[:NAMES_SHOWN])
    return shown + (f" and {len(found) - NAMES_SHOWN} more" if len(found) > NAMES_SHOWN else "")
