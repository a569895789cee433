"""Duration of one scheduler heartbeat over 10,000 schedules of which 1,000 are due.

    python benchmarks/heartbeat.py [--db sqlite|postgres|both] [--schedules N] [--due N]

Each database is measured in its own process (the settings differ). The heartbeat
selects due schedules through the partial index on ``next_run_at`` (enabled rows
only), so an idle heartbeat costs one indexed read whatever the table's size; the
figures show that beside the busy one. On PostgreSQL the plan of the due query is
printed too.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PG_DB = "durable_jobs_bench_heartbeat"


def measure(schedules: int, due: int, rounds: int) -> None:
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from durable_jobs.models import Job, Schedule
    from durable_jobs.schedules.heartbeat import tick

    call_command("migrate", verbosity=0)
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
    print(
        f"| {connection.vendor} | {schedules:,} | {due:,} | "
        f"{statistics.median(busy):,.0f} ms ({due / statistics.median(busy) * 1000:,.0f} "
        f"schedules/s) | {statistics.median(idle):.2f} ms |"
    )
    if connection.vendor == "postgresql":
        due_query = Schedule.objects.filter(enabled=True, next_run_at__lte=now).order_by(
            "next_run_at", "pk"
        )[:100]
        print("\nPlan of the due query (PostgreSQL):\n")
        print("    " + due_query.explain().replace("\n", "\n    "))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--due", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        measure(options.schedules, options.due, options.rounds)
        return
    print("| database | schedules | due | one heartbeat (median) | idle heartbeat |")
    print("|---|---:|---:|---:|---:|")
    vendors = ["sqlite", "postgres"] if options.db == "both" else [options.db]
    for vendor in vendors:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "benchmarks.settings",
            "PYTHONPATH": str(ROOT),
            "DURABLE_JOBS_BENCH_DB": vendor,
        }
        with tempfile.TemporaryDirectory() as tmp:
            env["DURABLE_JOBS_BENCH_SQLITE_PATH"] = str(Path(tmp) / "heartbeat.sqlite3")
            if vendor == "postgres":
                env["DURABLE_JOBS_BENCH_PG_NAME"] = PG_DB
                subprocess.run(
                    ["dropdb", "-h", "127.0.0.1", "-U", "postgres", "--if-exists", PG_DB],
                    check=True,
                )
                subprocess.run(["createdb", "-h", "127.0.0.1", "-U", "postgres", PG_DB], check=True)
            try:
                subprocess.run(
                    [sys.executable, __file__, "--child", "--schedules", str(options.schedules),
                     "--due", str(options.due), "--rounds", str(options.rounds)],
                    env=env, check=True, timeout=600,
                )  # fmt: skip
            finally:
                if vendor == "postgres":
                    subprocess.run(
                        ["dropdb", "-h", "127.0.0.1", "-U", "postgres", "--if-exists", PG_DB],
                        check=False,
                    )


if __name__ == "__main__":
    main()
