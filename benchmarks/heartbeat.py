"""Duration of one scheduler heartbeat over 10,000 schedules of which 1,000 are due.

    python benchmarks/heartbeat.py [--db sqlite|postgres|both] [--schedules N] [--due N]
                                   [--rounds N] [--pg-dbname NAME]

Each database is measured in its own process (the settings differ); on PostgreSQL in
a database of its own, created and dropped again (``--pg-host``, ``--pg-port`` and
``--pg-user`` as for ``run.py``). The heartbeat selects due schedules through the
partial index on ``next_run_at`` (enabled rows only), so an idle heartbeat costs one
indexed read whatever the table's size; the figures show that beside the busy one. On
PostgreSQL the plan of the due query is printed too.
"""

from __future__ import annotations

import argparse
import datetime
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    # Run as a script: the repository's root must be importable for ``benchmarks.harness``.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import harness

SETTINGS_MODULE = "benchmarks.settings"
#: Seconds allowed per database.
PHASE_TIMEOUT = 600


def measure(schedules: int, due: int, rounds: int) -> dict[str, Any]:
    """In a phase: the heartbeat's durations, median of ``rounds``, busy and then idle."""
    harness.setup_django()
    from django.db import connection

    from durable_jobs.models import Job, Schedule
    from durable_jobs.schedules.tick import tick

    now = datetime.datetime(2026, 6, 1, 12, 0, tzinfo=datetime.UTC)
    later = now + datetime.timedelta(days=7)
    Schedule.objects.all().delete()
    Schedule.objects.bulk_create(
        [
            Schedule(
                id=f"s{i:05d}",
                expression="*/5 * * * *",
                timezone="Europe/Paris" if i % 2 else "UTC",
                name="bench.noop",
                payload={"n": i},
                next_run_at=now if i < due else later,
            )
            for i in range(schedules)
        ],
        batch_size=1000,
    )
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE durable_jobs_schedule")
    busy, idle = [], []
    for _ in range(rounds):
        Job.objects.all().delete()
        Schedule.objects.filter(pk__lt=f"s{due:05d}").update(next_run_at=now, retry_at=None)
        start = time.perf_counter()
        result = tick(now)
        busy.append((time.perf_counter() - start) * 1000)
        assert result.enqueued == due, result
        start = time.perf_counter()
        assert tick(now).enqueued == 0
        idle.append((time.perf_counter() - start) * 1000)
    plan = None
    if connection.vendor == "postgresql":
        due_query = Schedule.objects.filter(enabled=True, next_run_at__lte=now).order_by(
            "next_run_at", "pk"
        )[:100]
        plan = due_query.explain()
    return {
        "vendor": connection.vendor,
        "busy_ms": statistics.median(busy),
        "idle_ms": statistics.median(idle),
        "plan": plan,
    }


def print_row(result: dict[str, Any], schedules: int, due: int) -> None:
    busy = result["busy_ms"]
    print(
        f"| {result['vendor']} | {schedules:,} | {due:,} | "
        f"{busy:,.0f} ms ({due / busy * 1000:,.0f} schedules/s) | {result['idle_ms']:.2f} ms |",
        flush=True,
    )
    if result["plan"] is not None:
        print("\nPlan of the due query (PostgreSQL):\n")
        print("    " + result["plan"].replace("\n", "\n    "), flush=True)


def run_database(vendor: str, options: argparse.Namespace) -> dict[str, Any]:
    args = ["--schedules", str(options.schedules), "--due", str(options.due)]
    args += ["--rounds", str(options.rounds)]
    return harness.run_in_fresh_database(
        __file__, vendor, options, args, settings_module=SETTINGS_MODULE, timeout=PHASE_TIMEOUT
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--due", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=3)
    harness.add_postgres_arguments(
        parser,
        dbname="durable_jobs_bench_heartbeat",
        dbname_help="The benchmark's own database, dropped and created again "
        "(default durable_jobs_bench_heartbeat).",
    )
    parser.add_argument("--phase", choices=["sqlite", "postgres"], help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.phase:
        harness.print_phase_result(measure(options.schedules, options.due, options.rounds))
        return
    signal.signal(signal.SIGTERM, harness.raise_system_exit)
    print("| database | schedules | due | one heartbeat (median) | idle heartbeat |")
    print("|---|---:|---:|---:|---:|", flush=True)
    vendors = ["sqlite", "postgres"] if options.db == "both" else [options.db]
    for vendor in vendors:
        print_row(run_database(vendor, options), options.schedules, options.due)


if __name__ == "__main__":
    main()
