"""``Scheduler``: the Python API over durable schedules."""

from __future__ import annotations

import builtins
import datetime
from collections.abc import Callable
from typing import Any

from django.db.models import Count, F, Min, Q, Sum
from django.utils import timezone

from durable_jobs.db import engine_for
from durable_jobs.exceptions import DurableJobsError
from durable_jobs.handlers import JobHandler
from durable_jobs.maintenance.base import MaintenanceContext, MaintenanceRunner
from durable_jobs.maintenance.schedule_tick import ScheduleTick
from durable_jobs.models import CatchUp, Job, Schedule
from durable_jobs.schedules import saving, tick
from durable_jobs.schedules.definitions import ScheduleSpec, build_spec
from durable_jobs.schedules.expressions import Once, get_zone, parse, upcoming
from durable_jobs.validate import text_problem


class ScheduleNotFound(DurableJobsError, LookupError):
    """No schedule has this id."""

    def __init__(self, schedule_id: str) -> None:
        super().__init__(
            f"No schedule with id {schedule_id!r}; list them with Scheduler().list() or "
            "`manage.py schedules list`."
        )


class Scheduler:
    """Create, inspect and control durable schedules; run the heartbeat in-process.

    ``clock`` returns the current time (default ``timezone.now``); tests inject one.
    """

    def __init__(
        self,
        *,
        using: str | None = None,
        clock: Callable[[], datetime.datetime] | None = None,
    ) -> None:
        self.alias = engine_for(using).alias
        self.clock = clock or timezone.now
        self._runner: MaintenanceRunner | None = None

    # -- defining ---------------------------------------------------------------------------

    def schedule(
        self,
        id: str,
        *,
        name: str | JobHandler,
        expression: str | datetime.timedelta | None = None,
        interval: str | datetime.timedelta | None = None,
        run_at: datetime.datetime | None = None,
        timezone: str = "UTC",
        queue: str | None = None,
        payload: dict[str, Any] | None = None,
        priority: int | None = None,
        enabled: bool = True,
        max_consecutive_fails: int = 5,
        catch_up: str = CatchUp.LATEST,
        catch_up_limit: int = 10,
        metadata: dict[str, Any] | None = None,
    ) -> Schedule:
        """Create schedule ``id``, or update it (keeping ``created_at`` and its counters)."""
        spec = build_spec(
            id,
            name=name,
            expression=expression,
            interval=interval,
            run_at=run_at,
            timezone=timezone,
            queue=queue,
            payload=payload,
            priority=priority,
            enabled=enabled,
            max_consecutive_fails=max_consecutive_fails,
            catch_up=catch_up,
            catch_up_limit=catch_up_limit,
            metadata=metadata,
        )
        return self.save_spec(spec)

    def schedule_interval(
        self, id: str, interval: str | datetime.timedelta, *, name: str | JobHandler, **options: Any
    ) -> Schedule:
        """Every ``interval`` (``"30s"``, ``"5m"``, ``"2h"``, ``"1d"`` or a timedelta)."""
        return self.schedule(id, name=name, interval=interval, **options)

    def schedule_once(
        self, id: str, run_at: datetime.datetime, *, name: str | JobHandler, **options: Any
    ) -> Schedule:
        """Once, at the aware datetime ``run_at``; the schedule is disabled after it ran."""
        return self.schedule(id, name=name, run_at=run_at, **options)

    def save_spec(self, spec: ScheduleSpec, *, declared_in_settings: bool = False) -> Schedule:
        return saving.save_spec(
            spec, now=self.clock(), using=self.alias, declared_in_settings=declared_in_settings
        )

    # -- reading ----------------------------------------------------------------------------

    def get(self, id: str) -> Schedule | None:
        """The schedule, or None if no schedule has this id."""
        if not isinstance(id, str) or text_problem(id):
            # No schedule can have such an id (build_spec refuses it), and PostgreSQL
            # would refuse the query itself, aborting the caller's transaction.
            return None
        return Schedule.objects.using(self.alias).filter(pk=id).first()

    def existing(self, id: str) -> Schedule:
        """The schedule, or :class:`ScheduleNotFound`: for the operations that need one."""
        schedule = self.get(id)
        if schedule is None:
            raise ScheduleNotFound(id)
        return schedule

    def list(self, *, enabled: bool | None = None) -> list[Schedule]:
        schedules = Schedule.objects.using(self.alias).order_by("pk")
        if enabled is not None:
            schedules = schedules.filter(enabled=enabled)
        return list(schedules)

    def stats(self) -> dict[str, Any]:
        """Counts over all schedules, from one aggregate query.

        Keys: ``total``, ``active`` and ``enabled`` (the same count), ``paused``,
        ``disabled`` (by failures), ``due``, ``failing``, ``runs``, ``failures``,
        ``next_run_at``, and ``next_run``: ``{"id", "at"}`` of the soonest enabled
        schedule, or None.
        """
        now = self.clock()
        row = Schedule.objects.using(self.alias).aggregate(
            total=Count("pk"),
            active=Count("pk", filter=Q(enabled=True)),
            disabled=Count("pk", filter=Q(enabled=False, last_status="disabled")),
            due=Count("pk", filter=Q(enabled=True, next_run_at__lte=now)),
            failing=Count("pk", filter=Q(consecutive_fails__gt=0)),
            runs=Sum("run_count"),
            failures=Sum("fail_count"),
            next_run_at=Min("next_run_at", filter=Q(enabled=True)),
        )
        # Not enabled and not disabled by failures: paused by an operator (or a finished one-off).
        row["paused"] = row["total"] - row["active"] - row["disabled"]
        row["runs"] = row["runs"] or 0
        row["failures"] = row["failures"] or 0
        row["enabled"] = row["active"]
        soonest = (
            Schedule.objects.using(self.alias)
            .filter(enabled=True, next_run_at__isnull=False)
            .order_by("next_run_at", "pk")
            .values_list("pk", "next_run_at")
            .first()
        )
        row["next_run"] = {"id": soonest[0], "at": soonest[1]} if soonest else None
        return row

    def preview(self, id: str, count: int = 5) -> builtins.list[datetime.datetime]:
        """The next ``count`` run times (UTC), from ``next_run_at`` on."""
        schedule = self.existing(id)
        start = schedule.next_run_at or self.clock()
        expression = parse(schedule.expression)
        zone = get_zone(schedule.timezone)
        first = [start] if schedule.next_run_at else []
        rest = upcoming(expression, zone, start, count - len(first), anchor=start)
        return (first + rest)[:count]

    # -- controlling --------------------------------------------------------------------------

    def pause(self, id: str) -> Schedule:
        """Stop new occurrences. Jobs already enqueued are left to run."""
        schedule = self.existing(id)
        Schedule.objects.using(self.alias).filter(pk=id).update(
            enabled=False, last_status="paused", updated_at=self.clock()
        )
        schedule.refresh_from_db()
        return schedule

    def resume(self, id: str) -> Schedule:
        """Enable again, with ``next_run_at`` computed from now (missed runs are not replayed)."""
        schedule = self.existing(id)
        now = self.clock()
        expression = parse(schedule.expression)
        if isinstance(expression, Once):
            # A one-off that already ran stays done; one that did not runs (late if need be).
            next_run_at = None if schedule.run_count else expression.at
        else:
            next_run_at = expression.next_after(now, get_zone(schedule.timezone), anchor=now)
        Schedule.objects.using(self.alias).filter(pk=id).update(
            enabled=next_run_at is not None,
            next_run_at=next_run_at,
            consecutive_fails=0,
            retry_at=None,
            last_status=""
            if schedule.last_status in ("paused", "disabled")
            else schedule.last_status,
            updated_at=now,
        )
        schedule.refresh_from_db()
        return schedule

    def run(self, id: str) -> Job:
        """Enqueue one occurrence now, whether or not the schedule is enabled."""
        schedule = self.existing(id)
        now = self.clock()
        job, created = tick.enqueue_occurrence(schedule, now, now, using=self.alias)
        Schedule.objects.using(self.alias).filter(pk=id).update(
            last_run_at=now,
            run_count=F("run_count") + int(created),
            last_status="enqueued",
            last_job_id=job.pk,
            updated_at=now,
        )
        return job

    def remove(self, id: str) -> bool:
        """Delete the schedule (its jobs stay). False if there was none."""
        if not isinstance(id, str) or text_problem(id):
            return False  # as in get(): no schedule has it, and the query would fail
        deleted, _ = Schedule.objects.using(self.alias).filter(pk=id).delete()
        return bool(deleted)

    # -- the tick ---------------------------------------------------------------------------

    def tick(self, now: datetime.datetime | None = None) -> tick.TickResult:
        """One tick: enqueue every due occurrence."""
        return tick.tick(now or self.clock(), using=self.alias)

    def start(self, interval: float | None = None) -> None:
        """Tick in a background thread of this process until :meth:`stop` (the first tick
        syncs ``DURABLE_JOBS["SCHEDULES"]``)."""
        if self._runner is not None and self._runner.running:
            return
        self._runner = self._tick_runner(interval)
        self._runner.start()

    def is_started(self) -> bool:
        """Whether this scheduler's heartbeat runs (``start()`` or ``serve()``, not yet
        stopped)."""
        return self._runner is not None and self._runner.running

    def stop(self, timeout: float = 10.0) -> None:
        if self._runner is not None:
            self._runner.stop()
            self._runner.join(timeout)

    def serve(self, interval: float | None = None) -> None:
        """Tick in this thread until :meth:`stop` (``schedules serve``)."""
        self._runner = self._tick_runner(interval)
        self._runner.serve()

    def _tick_runner(self, interval: float | None) -> MaintenanceRunner:
        # The same service every worker runs, in the same harness.
        return MaintenanceRunner(
            [ScheduleTick(interval=interval, clock=self.clock)],
            MaintenanceContext(self.alias),
            thread_name="durable-jobs-scheduler",
        )
