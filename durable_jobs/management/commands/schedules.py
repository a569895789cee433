"""``manage.py schedules``: list, inspect and control durable schedules; run the heartbeat."""

from __future__ import annotations

import datetime
import json
import signal
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import OperationalError, ProgrammingError

from durable_jobs.exceptions import DurableJobsError
from durable_jobs.management.output import emit_json, printable_output, table
from durable_jobs.models import CatchUp, Schedule
from durable_jobs.redaction import redact
from durable_jobs.schedules.expressions import get_zone
from durable_jobs.serializers import iso


def schedule_to_dict(schedule: Schedule) -> dict[str, Any]:
    """The stable JSON form of a schedule (``--json``)."""
    return {
        "id": schedule.pk,
        "expression": schedule.expression,
        "timezone": schedule.timezone,
        "job": schedule.name,
        "queue": schedule.queue,
        "payload": redact(schedule.payload),
        "enabled": schedule.enabled,
        "next_run_at": iso(schedule.next_run_at),
        "last_run_at": iso(schedule.last_run_at),
        "last_status": schedule.last_status,
        "last_error": schedule.last_error,
        "last_duration_ms": schedule.last_duration_ms,
        "run_count": schedule.run_count,
        "fail_count": schedule.fail_count,
        "consecutive_fails": schedule.consecutive_fails,
        "max_consecutive_fails": schedule.max_consecutive_fails,
        "catch_up": schedule.catch_up,
        "catch_up_limit": schedule.catch_up_limit,
        "declared_in_settings": schedule.declared_in_settings,
        "created_at": iso(schedule.created_at),
        "updated_at": iso(schedule.updated_at),
        "metadata": schedule.metadata,
    }


class Command(BaseCommand):
    help = "List, inspect and control durable schedules, or run the scheduler heartbeat."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", metavar="ACTION")
        listing = sub.add_parser("list", help="List schedules (the default).")
        listing.add_argument("--json", action="store_true")
        show = sub.add_parser("show", help="One schedule, with its next 5 run times.")
        show.add_argument("id")
        show.add_argument("--json", action="store_true")
        stats = sub.add_parser("stats", help="Counts over all schedules.")
        stats.add_argument("--json", action="store_true")
        add = sub.add_parser("add", help="Create or update a schedule.")
        add.add_argument("id")
        when = add.add_mutually_exclusive_group(required=True)
        when.add_argument("--cron", help="A 5-field (or 6-field, seconds first) cron expression.")
        when.add_argument("--every", help="An interval: 30s, 5m, 2h, 1d.")
        when.add_argument("--once", help="An aware ISO 8601 time, e.g. 2026-12-24T18:00:00+01:00.")
        add.add_argument("--job", required=True, help="The handler's registered name.")
        add.add_argument("--payload", default="{}", help="Keyword arguments as a JSON object.")
        add.add_argument("--timezone", default="UTC", help="IANA timezone the cron is read in.")
        add.add_argument("--queue", default=None)
        add.add_argument("--catch-up", choices=CatchUp.values, default=CatchUp.LATEST)
        add.add_argument("--catch-up-limit", type=int, default=10)
        add.add_argument("--max-consecutive-fails", type=int, default=5)
        add.add_argument("--disabled", action="store_true", help="Create it paused.")
        for action in ("pause", "resume", "run", "remove"):
            sub.add_parser(action, help=f"{action.capitalize()} a schedule.").add_argument("id")
        sync = sub.add_parser("sync", help='Sync DURABLE_JOBS["SCHEDULES"] to the table.')
        sync.add_argument("--json", action="store_true")
        serve = sub.add_parser("serve", help="Run the scheduler heartbeat alone (no worker).")
        serve.add_argument("--interval", type=float, default=None, help="Seconds between beats.")

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout = printable_output(self.stdout)
        from durable_jobs.schedules.scheduler import Scheduler

        self.scheduler = Scheduler()
        action = options.get("action") or "list"
        try:
            getattr(self, f"do_{action}")(options)
        except DurableJobsError as exc:
            raise CommandError(str(exc)) from None
        except (OperationalError, ProgrammingError) as exc:
            raise CommandError(
                f"Database error: {exc}. Has `manage.py migrate` been run for durable_jobs?"
            ) from None

    # -- reads ------------------------------------------------------------------------------

    def do_list(self, options: dict[str, Any]) -> None:
        schedules = self.scheduler.list()
        if options.get("json"):
            emit_json(self.stdout, [schedule_to_dict(s) for s in schedules])
            return
        rows = [
            [
                s.pk,
                "on" if s.enabled else "off",
                s.expression,
                s.timezone,
                s.name,
                _when(s.next_run_at),
                s.last_status or "-",
                str(s.run_count),
                str(s.fail_count),
            ]
            for s in schedules
        ]
        headers = [
            "ID",
            "ON",
            "EXPRESSION",
            "TIMEZONE",
            "JOB",
            "NEXT RUN (UTC)",
            "LAST",
            "RUNS",
            "FAILS",
        ]
        table(self.stdout, headers, rows) if rows else self.stdout.write("No schedules.")

    def do_show(self, options: dict[str, Any]) -> None:
        schedule = self.scheduler.existing(options["id"])
        upcoming = self.scheduler.preview(schedule.pk, 5) if schedule.enabled else []
        zone = get_zone(schedule.timezone)
        if options.get("json"):
            data = schedule_to_dict(schedule)
            data["upcoming"] = [
                {"utc": t.isoformat(), "local": t.astimezone(zone).isoformat()} for t in upcoming
            ]
            emit_json(self.stdout, data)
            return
        data = schedule_to_dict(schedule)
        width = max(len(k) for k in data)
        for key, value in data.items():
            shown = json.dumps(value) if isinstance(value, dict | list) else value
            self.stdout.write(f"{key.ljust(width)}  {'' if shown is None else shown}")
        self.stdout.write("")
        self.stdout.write(f"Next {len(upcoming)} runs:")
        table(
            self.stdout,
            ["UTC", schedule.timezone],
            [[_when(t), t.astimezone(zone).strftime("%Y-%m-%d %H:%M:%S %Z")] for t in upcoming],
        )

    def do_stats(self, options: dict[str, Any]) -> None:
        stats = self.scheduler.stats()
        stats["next_run_at"] = iso(stats["next_run_at"])
        if options.get("json"):
            emit_json(self.stdout, stats)
            return
        width = max(len(k) for k in stats)
        for key, value in stats.items():
            self.stdout.write(f"{key.ljust(width)}  {'-' if value is None else value}")

    # -- writes -----------------------------------------------------------------------------

    def do_add(self, options: dict[str, Any]) -> None:
        try:
            payload = json.loads(options["payload"])
        # ValueError beyond JSONDecodeError: an integer of more than 4,300 digits;
        # RecursionError: arrays nested thousands deep.
        except (ValueError, RecursionError) as exc:
            raise CommandError(
                f"--payload is not valid JSON ({exc}); pass an object like '{{\"a\": 1}}'"
            ) from None
        if not isinstance(payload, dict):
            raise CommandError("--payload must be a JSON object of keyword arguments")
        when: dict[str, Any] = {}
        if options["cron"]:
            when["expression"] = options["cron"]
        elif options["every"]:
            when["interval"] = options["every"]
        else:
            try:
                when["run_at"] = datetime.datetime.fromisoformat(options["once"])
            except ValueError:
                raise CommandError(f"--once {options['once']!r} is not an ISO 8601 time") from None
        schedule = self.scheduler.schedule(
            options["id"],
            name=options["job"],
            payload=payload,
            timezone=options["timezone"],
            queue=options["queue"],
            catch_up=options["catch_up"],
            catch_up_limit=options["catch_up_limit"],
            max_consecutive_fails=options["max_consecutive_fails"],
            enabled=not options["disabled"],
            **when,
        )
        self.stdout.write(
            f"Saved schedule {schedule.pk}; next run {_when(schedule.next_run_at)} UTC."
        )

    def do_pause(self, options: dict[str, Any]) -> None:
        self.scheduler.pause(options["id"])
        self.stdout.write(f"Paused {options['id']}; jobs already enqueued will still run.")

    def do_resume(self, options: dict[str, Any]) -> None:
        schedule = self.scheduler.resume(options["id"])
        self.stdout.write(f"Resumed {schedule.pk}; next run {_when(schedule.next_run_at)} UTC.")

    def do_run(self, options: dict[str, Any]) -> None:
        job = self.scheduler.run(options["id"])
        self.stdout.write(f"Enqueued job {job.pk} ({job.name}) for schedule {options['id']}.")

    def do_remove(self, options: dict[str, Any]) -> None:
        if not self.scheduler.remove(options["id"]):
            raise CommandError(f"No schedule with id {options['id']!r}.")
        self.stdout.write(f"Removed {options['id']}; its jobs are kept.")

    def do_sync(self, options: dict[str, Any]) -> None:
        from durable_jobs.schedules.sync import sync_schedules

        result = sync_schedules()
        data = {"created": result.created, "updated": result.updated, "removed": result.removed}
        if options.get("json"):
            emit_json(self.stdout, data)
            return
        for key, ids in data.items():
            self.stdout.write(f"{key}: {', '.join(ids) if ids else '-'}")

    def do_serve(self, options: dict[str, Any]) -> None:
        # Scheduler.serve syncs DURABLE_JOBS["SCHEDULES"] before its first heartbeat.
        def stop(signum: int, frame: Any) -> None:
            self.scheduler.stop(timeout=0)

        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
        self.stdout.write("Scheduler heartbeat running; Ctrl-C to stop.")
        self.scheduler.serve(options["interval"])


def _when(value: datetime.datetime | None) -> str:
    return value.astimezone(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S") if value else "-"
