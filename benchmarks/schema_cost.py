"""What the full indexes and the CHECK constraints of the job tables cost a drain, on
PostgreSQL.

    python benchmarks/schema_cost.py [--jobs N] [--rounds N] [--pg-dbname NAME]

A drained job's row is written twice (leased, then settled) and an attempt row is
inserted. Both updates change the state, which every claim-side index depends on, so
neither can be a HOT update: each adds an entry to every full index of the job table,
and to each partial index whose condition the new row meets. The indexes the worker
needs are partial and small; the full ones serve the admin, the ``jobs`` command and
enqueue-time uniqueness. Each write also evaluates the table's CHECK constraints. This
benchmark measures the write side of "does each index earn its write": the schema as
migrated, then without each full index in turn (the idempotency key's unique index made
partial, over non-NULL keys, rather than dropped), then without all of them, then
without the CHECK constraints. For each, one worker process at concurrency 10
(``runworker --burst``) drains N no-op jobs enqueued beforehand, and the report gives
the PostgreSQL server's CPU time per 1,000 jobs (every ``postgres`` process, read from
``/proc`` as ``compare.py`` does, from the worker's start to its exit; nothing else
queries the database meanwhile) and the drain's rate (jobs over the time from the first
lease to the last finish). Each figure is the median of R rounds, the variants taking
turns; each drain runs in a database of its own, created (migrated, the variant's
indexes changed, the jobs enqueued, ``VACUUM ANALYZE``) and dropped again
(``--pg-host``, ``--pg-port`` and ``--pg-user`` as for ``run.py``).
"""

from __future__ import annotations

import argparse
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    # Run as a script: the repository's root must be importable for ``benchmarks.harness``.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import cpu, harness

SETTINGS_MODULE = "benchmarks.settings"
#: Seconds allowed to prepare a database, and to drain it.
PHASE_TIMEOUT = 600

JOB = "durable_jobs_job"
ATTEMPT = "durable_jobs_attempt"
PARTIAL_KEY = (
    f"ALTER TABLE {JOB} DROP CONSTRAINT durable_job_idempotency_key",
    f"CREATE UNIQUE INDEX durable_job_idempotency_key_partial ON {JOB} (idempotency_key) "
    "WHERE idempotency_key IS NOT NULL",
)
DROPPED = {
    "durable_job_created_idx": "the admin's created-at filter and its age column's sort",
    "durable_job_name_idx": "the admin's and the jobs command's filter by handler",
    "durable_job_state_queue_idx": "the admin's state and queue filters, a queue's lag",
    "durable_attempt_finished_idx": "the overview's per-handler history",
}
#: The idempotency index made partial and the other four dropped: "all five".
LEAN_INDEXES = PARTIAL_KEY + tuple(f"DROP INDEX {name}" for name in DROPPED)
CHECKS = {
    JOB: (
        "durable_job_priority_range",
        "durable_job_state_valid",
        "durable_jobs_job_attempts_check",
        "durable_jobs_job_concurrency_limit_check",
        "durable_jobs_job_max_retries_check",
    ),
    ATTEMPT: ("durable_jobs_attempt_number_check",),
}
DROP_CHECKS = tuple(
    f"ALTER TABLE {table} " + ", ".join(f"DROP CONSTRAINT {name}" for name in names)
    for table, names in CHECKS.items()
)
CHECKS_SERVE = "the database's own guard on states, priorities and counts"
#: Each variant: the statements run after migrating, and what it takes away.
VARIANTS: dict[str, tuple[tuple[str, ...], str]] = {
    "as migrated": ((), ""),
    # Keyless jobs only: every insert of the library but COPY names the key's conflict
    # target, which a partial index would match only with its condition added.
    "idempotency key index partial": (PARTIAL_KEY, "nothing for keyless jobs"),
    **{f"without {name}": ((f"DROP INDEX {name}",), use) for name, use in DROPPED.items()},
    "without all five above": (LEAN_INDEXES, ""),
    "without the CHECK constraints": (DROP_CHECKS, CHECKS_SERVE),
    "without the five indexes and the CHECK constraints": (LEAN_INDEXES + DROP_CHECKS, ""),
}


def prepare(variant: str, jobs: int) -> dict[str, Any]:
    """In a phase: migrate, change the variant's indexes, enqueue ``jobs`` no-op jobs."""
    harness.setup_django()
    from django.db import connection

    from benchmarks.benchapp.jobs import noop
    from durable_jobs import enqueue_many

    with connection.cursor() as cursor:
        for statement in VARIANTS[variant][0]:
            cursor.execute(statement)
    # One call: COPY, the only insert that names no conflict target (see VARIANTS).
    enqueue_many([noop.prepare(n=n) for n in range(jobs)])
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    return {"variant": variant}


def drain(variant: str, options: argparse.Namespace) -> dict[str, float]:
    """One round of ``variant``: a fresh database, drained by one worker process."""
    harness.create_postgres_database(options, replace=True)
    try:
        env = harness.child_env(SETTINGS_MODULE, "postgres", options)
        script = str(Path(__file__).resolve())
        command = [sys.executable, script, "--phase", variant, "--jobs", str(options.jobs)]
        harness.run_phase_process(command, vendor="postgres", env=env, timeout=PHASE_TIMEOUT)
        worker = [sys.executable, str(harness.REPO / "benchmarks" / "manage.py"), "runworker"]
        worker += ["--burst", "--queues", "default:10"]
        started: list[int] = []
        with cpu.DrainMeter(cpu.tree(lambda: started), cpu.server("postgres")) as meter:
            process = subprocess.Popen(
                worker,
                cwd=harness.REPO,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                start_new_session=True,  # its own process group, for kill_group
            )
            started.append(process.pid)
            try:
                process.wait(timeout=PHASE_TIMEOUT)
            except subprocess.TimeoutExpired:
                raise SystemExit(f"the drain took longer than {PHASE_TIMEOUT}s") from None
            finally:
                harness.kill_group(process)
        if process.returncode != 0:
            raise SystemExit(f"the worker failed (exit {process.returncode})")
        database = meter.whole()["db_cpu_s"]
        assert database is not None  # a server group is sampled for PostgreSQL
        return {"db_cpu_s": database, **drained(options)}
    finally:
        harness.drop_postgres_database(options)


def drained(options: argparse.Namespace) -> dict[str, float]:
    """The drain's rate, from its jobs' own times; the run stops if any job is left."""
    connection = harness.pg_connect(options, options.pg_dbname)
    try:
        done, seconds = connection.execute(
            f"SELECT count(*), extract(epoch FROM max(finished_at) - min(attempted_at)) "
            f"FROM {JOB} WHERE state = 'completed'"
        ).fetchone()
    finally:
        connection.close()
    if done != options.jobs:
        raise SystemExit(f"the worker completed {done} jobs of {options.jobs}")
    return {"rate": done / float(seconds)}


def at_least(least: int) -> Callable[[str], int]:
    """An argparse type: an integer of at least ``least`` (the enqueue is one COPY from
    COPY_FROM rows; a median needs a round)."""

    def parse(text: str) -> int:
        value = int(text)
        if value < least:
            raise argparse.ArgumentTypeError(f"must be at least {least:,}")
        return value

    return parse


def change(seconds: float, base: float) -> str:
    return f"{seconds / base - 1:+.0%}".replace("%", " %")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=at_least(1000), default=30_000)
    parser.add_argument("--rounds", type=at_least(1), default=3)
    harness.add_postgres_arguments(
        parser,
        dbname="durable_jobs_bench_schema_cost",
        dbname_help="The benchmark's own database, dropped and created again "
        "(default durable_jobs_bench_schema_cost).",
    )
    parser.add_argument("--phase", choices=list(VARIANTS), help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.phase:
        harness.print_phase_result(prepare(options.phase, options.jobs))
        return
    signal.signal(signal.SIGTERM, harness.raise_system_exit)
    harness.compile_sources()
    rounds: dict[str, list[dict[str, float]]] = {variant: [] for variant in VARIANTS}
    began = time.monotonic()
    for round_number in range(1, options.rounds + 1):
        for variant in VARIANTS:
            rounds[variant].append(drain(variant, options))
        harness.log(f"round {round_number} of {options.rounds} done")
    print(
        f"\n{options.jobs:,} no-op jobs per drain, one worker process at concurrency 10, "
        f"median of {options.rounds} rounds ({(time.monotonic() - began) / 60:.1f} minutes)."
    )
    baseline = rounds["as migrated"]
    base = statistics.median(r["db_cpu_s"] for r in baseline)
    print("\n| Schema | PostgreSQL CPU per 1,000 jobs (s) | vs. as migrated | Drain (jobs/s) "
          "| What it serves |")  # fmt: skip
    print("| --- | ---: | ---: | ---: | --- |")
    for variant, results in rounds.items():
        seconds = statistics.median(r["db_cpu_s"] for r in results)
        rate = statistics.median(r["rate"] for r in results)
        versus = "" if results is baseline else change(seconds, base)
        print(
            f"| {variant} | {seconds / options.jobs * 1000:.4f} | {versus} "
            f"| {rate:,.0f} | {VARIANTS[variant][1]} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
