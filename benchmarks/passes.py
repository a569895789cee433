"""Where a worker's loop pass goes: its statements, its commit, the worker's own Python.

    python benchmarks/passes.py [--db sqlite|postgres|both] [--jobs N] [--concurrency C]
                                [--synchronous-commit on|off]

One worker (in the phase's own process, so that its functions can be timed) drains N
no-op jobs with ``--burst`` at concurrency C, on a fresh SQLite file or a PostgreSQL
database created and dropped again (``--pg-host``, ``--pg-port``, ``--pg-user`` as for
``run.py``). A pass (:mod:`durable_jobs.worker.passes`) runs on the worker's pass thread;
each one is timed there:

* **database pass**: all of a pass, as the pass thread runs it;
* **statements**: writing the outcomes and claiming (on PostgreSQL, with one queue, one
  statement that also commits);
* **commit**: a commit of its own, where the pass is a transaction (SQLite; PostgreSQL
  with relaxed commits);
* **waiting for the server** (PostgreSQL): the part of the pass spent in psycopg waiting
  for the server's answer (the round trip, the server's work and the commit's flush);
  the rest of the pass is the pass thread's Python;
* **loop busy**: the loop thread's time not spent waiting for a wake-up (collecting
  results, recording outcomes, dispatching jobs), per pass;
* **handlers**: the pool threads' time running jobs (the handler and what the worker does
  around it), per pass;
* **turn**: the loop's whole run divided by the passes: the time between one pass's
  start and the next's. When every pass claims every slot (jobs per claim equal to the
  concurrency, as with no-op jobs), no job runs while a pass is in flight and the pieces
  above take turns for the GIL rather than overlap. The turn less the pass, the loop's
  work and the handlers is then what no timer covers: the threads handing over to each
  other (a wake-up, the GIL changing hands) and the pool's own bookkeeping around each
  job. Otherwise jobs overlap the passes, and that figure shrinks or goes negative. The
  timers are wall-clock: a wait for the GIL inside a timed call counts in that call.

With no-op jobs a concurrency-10 worker is bound by its passes and its Python: its rate
is about the jobs per pass divided by the time between passes. For comparison, the
phase times a round trip (``SELECT 1``) and the commit of a one-row update on its own
connection. To see where the worker's own time goes, sample it:
``py-spy record --gil --format raw -o profile.txt -- python benchmarks/passes.py --db postgres``.
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
    """Seconds spent in each timed call, and how many calls, by name (from any thread)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        # The pool threads add to the same timer: ``+=`` on a dict item is not atomic.
        self._lock = threading.Lock()

    def wrap(self, name: str, func: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(func)
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return func(*args, **kwargs)
            finally:
                spent = time.perf_counter() - started
                with self._lock:
                    self.seconds[name] += spent
                    self.calls[name] += 1

        return timed


def measure(jobs: int, concurrency: int) -> dict[str, Any]:
    """In a phase: drain ``jobs`` no-op jobs with one timed worker."""
    harness.setup_django()
    from django.db import connection
    from django.db.backends.base.base import BaseDatabaseWrapper

    import durable_jobs
    from benchmarks.benchapp.jobs import noop
    from durable_jobs.models import Attempt, Job
    from durable_jobs.worker import Worker
    from durable_jobs.worker import passes as passes_module
    from durable_jobs.worker.wakeups import LoopWake

    Attempt.objects.all().delete()
    Job.objects.all().delete()
    for start in range(0, jobs, 1000):
        durable_jobs.enqueue_many(
            [noop.prepare(n=i) for i in range(start, min(jobs, start + 1000))]
        )
    reference = round_trips(connection)

    timers = Timers()
    worker = Worker({"default": concurrency}, burst=True, scheduler=False)
    pass_thread: dict[str, int] = {}
    write_pass = worker._write_pass

    def timed_pass(work: Any) -> None:
        pass_thread["id"] = threading.get_ident()
        write_pass(work)

    worker._write_pass = timers.wrap("database pass", timed_pass)  # type: ignore[method-assign]
    # Both looked up when the worker starts: the loop, and the pool threads' work.
    worker._loop = timers.wrap("loop", worker._loop)  # type: ignore[method-assign]
    worker._work = timers.wrap("handlers", worker._work)  # type: ignore[method-assign]
    restore = [
        patch_on_thread(passes_module, "settle_and_claim", "statements", pass_thread, timers),
        patch_on_thread(BaseDatabaseWrapper, "commit", "commit", pass_thread, timers),
        patch_on_thread(LoopWake, "wait", "loop waiting", {"id": threading.get_ident()}, timers),
    ]
    if connection.vendor == "postgresql":
        import psycopg

        restore.append(
            patch_on_thread(
                psycopg.Connection, "wait", "waiting for the server", pass_thread, timers
            )
        )
    started = time.perf_counter()
    try:
        worker.run()
    finally:
        for undo in restore:
            undo()
    elapsed = time.perf_counter() - started
    done = Job.objects.filter(state="completed").count()
    if done != jobs:
        raise SystemExit(f"{done} of {jobs} jobs completed")
    passes = timers.calls["database pass"]
    per_pass = {name: seconds / passes * 1000 for name, seconds in timers.seconds.items()}
    per_pass["loop busy"] = per_pass["loop"] - per_pass.get("loop waiting", 0.0)
    return {
        "vendor": connection.vendor,
        "jobs": jobs,
        "concurrency": concurrency,
        "rate": jobs / elapsed,
        "passes": passes,
        "claims": worker.stats.claims,
        "jobs_per_claim": jobs / max(worker.stats.claims, 1),
        "outcomes_per_write": jobs / max(worker.stats.flushes, 1),
        "per_pass_ms": per_pass,
        "reference": reference,
    }


def patch_on_thread(
    owner: Any, name: str, timer: str, thread: dict[str, int], timers: Timers
) -> Callable[[], None]:
    """Time ``owner.name`` (a function of a module, or a method) under ``timer`` when it
    runs on ``thread["id"]``; return the function that undoes it."""
    original = getattr(owner, name)
    timed = timers.wrap(timer, original)

    def on_thread(*args: Any, **kwargs: Any) -> Any:
        if threading.get_ident() == thread.get("id"):
            return timed(*args, **kwargs)
        return original(*args, **kwargs)

    setattr(owner, name, on_thread)
    return lambda: setattr(owner, name, original)


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
    names = ["database pass", "statements", "commit"]
    if "waiting for the server" in per_pass:
        names.append("waiting for the server")
    for name in names:
        print(f"| {name} | {per_pass.get(name, 0.0):.3f} |")
    if "waiting for the server" in per_pass:
        python = per_pass["database pass"] - per_pass["waiting for the server"]
        print(f"| the pass thread's Python | {python:.3f} |")
    print(f"| loop thread busy | {per_pass['loop busy']:.3f} |")
    handlers, turn = per_pass.get("handlers", 0.0), per_pass["loop"]
    print(f"| handlers, on the pool threads | {handlers:.3f} |")
    print(f"| turn: from a pass's start to the next's | {turn:.3f} |")
    rest = turn - per_pass["database pass"] - per_pass["loop busy"] - handlers
    print(f"| the turn less the pass, the loop's work and the handlers | {rest:.3f} |")
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
    if options.jobs < 1 or options.concurrency < 1:
        parser.error("--jobs and --concurrency must be at least 1")
    if options.phase:
        harness.print_phase_result(measure(options.jobs, options.concurrency))
        return
    signal.signal(signal.SIGTERM, harness.raise_system_exit)
    vendors = ["sqlite", "postgres"] if options.db == "both" else [options.db]
    for vendor in vendors:
        print_result(run_database(vendor, options))


if __name__ == "__main__":
    main()
