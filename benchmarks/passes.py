"""Where a worker's loop pass goes: statements, commit, and the worker's own Python.

    python benchmarks/passes.py [--db sqlite|postgres|both] [--jobs N] [--concurrency C]
                                [--synchronous-commit on|off]

One worker (in the phase's own process, so that its functions can be timed) drains N
no-op jobs with ``--burst`` at concurrency C, on a fresh SQLite file or a PostgreSQL
database created and dropped again (``--pg-host``, ``--pg-port``, ``--pg-user`` as for
``run.py``). Every call of the loop's database work is timed:

* **outcome statement**: writing the finished jobs' outcomes (the transaction's first
  statement, so it includes starting the transaction);
* **claim statement**: leasing jobs for the free slots;
* **commit**;
* **database pass**: all of the above, as the loop waits for it;
* **waiting for the server** (PostgreSQL): the part of the pass spent in psycopg waiting
  for the server's answers (round trips and the server's work); the rest is Python;
* **loop, not waiting on the database**: the rest of the loop's time (collecting
  results, dispatching jobs to the pool, heartbeats, and waiting for a job to finish).

With no-op jobs a concurrency-10 worker is bound by its database pass: its rate is about
the jobs per pass divided by the time between passes. For comparison, the phase times a
round trip (``SELECT 1``) and the commit of a one-row update on its own connection.
To see where the worker's own time goes, sample it:
``py-spy record --subprocesses --format raw -o profile.txt -- python benchmarks/passes.py``.
"""

from __future__ import annotations

import argparse
import functools
import signal
import statistics
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    # Run as a script: the repository's root must be importable for ``benchmarks.harness``.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import harness

SETTINGS_MODULE = "benchmarks.settings"
PHASE_TIMEOUT = 900


class Timers:
    """Seconds spent in each timed call, and how many calls, by name."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)

    def wrap(self, name: str, func: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(func)
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return func(*args, **kwargs)
            finally:
                self.seconds[name] += time.perf_counter() - started
                self.calls[name] += 1

        return timed


def measure(jobs: int, concurrency: int) -> dict[str, Any]:
    """In a phase: drain ``jobs`` no-op jobs with one timed worker."""
    harness.setup_django()
    from django.db import connection

    import durable_jobs
    from benchmarks.benchapp.jobs import noop
    from durable_jobs.models import Attempt, Job
    from durable_jobs.worker import Worker
    from durable_jobs.worker import outbox as outbox_module
    from durable_jobs.worker import worker as worker_module

    Attempt.objects.all().delete()
    Job.objects.all().delete()
    for start in range(0, jobs, 1000):
        durable_jobs.enqueue_many(
            [noop.prepare(n=i) for i in range(start, min(jobs, start + 1000))]
        )
    reference = round_trips(connection)

    timers = Timers()
    worker = Worker({"default": concurrency}, burst=True, scheduler=False)
    originals = (outbox_module.recording.write, worker_module.claim, connection.commit)
    outbox_module.recording.write = timers.wrap("outcome statement", originals[0])  # type: ignore[assignment]
    worker_module.claim = timers.wrap("claim statement", originals[1])  # type: ignore[assignment]
    connection.commit = timers.wrap("commit", originals[2])  # type: ignore[method-assign]
    worker._write_and_claim = timers.wrap("database pass", worker._write_and_claim)  # type: ignore[method-assign]
    waiting = wait_timer(connection, timers)
    started = time.perf_counter()
    try:
        worker.run()
    finally:
        outbox_module.recording.write, worker_module.claim = originals[:2]  # type: ignore[assignment]
        del connection.commit
        waiting()
    elapsed = time.perf_counter() - started
    done = Job.objects.filter(state="completed").count()
    if done != jobs:
        raise SystemExit(f"{done} of {jobs} jobs completed")
    passes = timers.calls["database pass"]
    return {
        "vendor": connection.vendor,
        "jobs": jobs,
        "concurrency": concurrency,
        "rate": jobs / elapsed,
        "passes": passes,
        "claims": worker.stats.claims,
        "jobs_per_claim": jobs / max(worker.stats.claims, 1),
        "outcomes_per_write": jobs / max(worker.stats.flushes, 1),
        "per_pass_ms": {name: s / passes * 1000 for name, s in timers.seconds.items()},
        "loop_ms": (elapsed - timers.seconds["database pass"]) / passes * 1000,
        "reference": reference,
    }


def wait_timer(connection: Any, timers: Timers) -> Callable[[], None]:
    """On PostgreSQL, time psycopg's waits for the server (its answer to a statement or a
    commit: the round trip and the server's work) on the loop's connection; return the
    function that stops timing. A no-op elsewhere."""
    if connection.vendor != "postgresql":
        return lambda: None
    import psycopg

    original = psycopg.Connection.wait
    loop_thread = threading.get_ident()
    timed = timers.wrap("waiting for the server", original)

    def wait(self: Any, *args: Any, **kwargs: Any) -> Any:
        if threading.get_ident() == loop_thread:
            return timed(self, *args, **kwargs)
        return original(self, *args, **kwargs)

    psycopg.Connection.wait = wait  # type: ignore[method-assign]

    def stop() -> None:
        psycopg.Connection.wait = original  # type: ignore[method-assign]

    return stop


def round_trips(connection: Any) -> dict[str, float]:
    """The median round trip (``SELECT 1``) and one-row write-and-commit, in ms."""
    from django.db import transaction

    from durable_jobs.models import Job

    pk = Job.objects.values_list("pk", flat=True).first()
    trip, commit = [], []
    with connection.cursor() as cursor:
        for _ in range(200):
            started = time.perf_counter()
            cursor.execute("SELECT 1")
            cursor.fetchone()
            trip.append(time.perf_counter() - started)
        table = connection.ops.quote_name(Job._meta.db_table)
        for _ in range(200):
            started = time.perf_counter()
            with transaction.atomic():
                cursor.execute(f"UPDATE {table} SET priority = priority WHERE id = %s", [pk])
            commit.append(time.perf_counter() - started)
    return {
        "round_trip_ms": statistics.median(trip) * 1000,
        "update_and_commit_ms": statistics.median(commit) * 1000,
    }


def print_result(result: dict[str, Any]) -> None:
    vendor = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}[result["vendor"]]
    per_pass = result["per_pass_ms"]
    print(
        f"\n**{vendor}**: {result['jobs']:,} no-op jobs, one worker at concurrency "
        f"{result['concurrency']}: {result['rate']:,.0f} jobs/s over {result['passes']:,} "
        f"database passes ({result['jobs_per_claim']:.1f} jobs per claim, "
        f"{result['outcomes_per_write']:.1f} outcomes per write)\n"
    )
    print("| per database pass | ms |")
    print("|---|---:|")
    names = ["outcome statement", "claim statement", "commit", "database pass"]
    if "waiting for the server" in per_pass:
        names.append("waiting for the server")
    for name in names:
        print(f"| {name} | {per_pass.get(name, 0.0):.3f} |")
    print(f"| loop, not waiting on the database | {result['loop_ms']:.3f} |")
    ref = result["reference"]
    print(
        f"\nOn the same connection: a round trip (`SELECT 1`) takes "
        f"{ref['round_trip_ms']:.3f} ms, a one-row update and its commit "
        f"{ref['update_and_commit_ms']:.3f} ms (medians of 200).",
        flush=True,
    )


def run_database(vendor: str, options: argparse.Namespace) -> dict[str, Any]:
    args = ["--jobs", str(options.jobs), "--concurrency", str(options.concurrency)]
    return harness.run_in_fresh_database(
        __file__,
        vendor,
        options,
        args,
        settings_module=SETTINGS_MODULE,
        timeout=PHASE_TIMEOUT,
        DURABLE_JOBS_BENCH_SYNCHRONOUS_COMMIT=options.synchronous_commit,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument(
        "--synchronous-commit",
        choices=["on", "off"],
        default="on",
        help='DURABLE_JOBS["SYNCHRONOUS_COMMIT"] (default on, the library\'s default).',
    )
    harness.add_postgres_arguments(
        parser,
        dbname="durable_jobs_bench_passes",
        dbname_help="The benchmark's own database, dropped and created again "
        "(default durable_jobs_bench_passes).",
    )
    parser.add_argument("--phase", choices=["sqlite", "postgres"], help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.phase:
        harness.print_phase_result(measure(options.jobs, options.concurrency))
        return
    signal.signal(signal.SIGTERM, harness.raise_system_exit)
    vendors = ["sqlite", "postgres"] if options.db == "both" else [options.db]
    for vendor in vendors:
        print_result(run_database(vendor, options))


if __name__ == "__main__":
    main()
