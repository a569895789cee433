"""Drain the same no-op jobs with two source trees of durable_jobs, taking turns.

For telling whether a change costs anything on the worker's hot path: each round
fills the queue with N jobs (``enqueue_many``) and drains them with one
``runworker --burst`` started from tree A, then the same with tree B, on one database
that is emptied between drains, so both trees meet the same machine load in turn. A
tree is a checkout of the repository (``git worktree add /tmp/before <commit>``).

Reported per tree: the median over the rounds of the drain rate from the first
attempt's start to the last one's end (read from the Attempt rows, so process start-up
is left out), and the ratio B/A. Run it on a quiet machine; on a shared one, compare
the ratio across a few runs rather than trusting one.

    python benchmarks/trees.py /tmp/before . --db postgres --jobs 10000 --rounds 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

FILL = """
import django, sys
django.setup()
from django.core.management import call_command
call_command("migrate", verbosity=0, interactive=False)
from durable_jobs import enqueue_many
from durable_jobs.models import Attempt, Job
Attempt.objects.all().delete()
Job.objects.all().delete()
from benchmarks.benchapp.jobs import noop
n = int(sys.argv[1])
for start in range(0, n, 1000):
    enqueue_many([noop.prepare(n=i) for i in range(start, min(n, start + 1000))])
"""

MEASURE = """
import django
django.setup()
from django.db.models import Max, Min
from durable_jobs.models import Attempt, Job
done = Job.objects.filter(state="completed").count()
span = Attempt.objects.aggregate(first=Min("started_at"), last=Max("finished_at"))
print(done, (span["last"] - span["first"]).total_seconds())
"""


def env_for(tree: Path, options: argparse.Namespace, database: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree.resolve())
    env["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"
    env["DURABLE_JOBS_BENCH_DB"] = options.db
    env["DURABLE_JOBS_BENCH_SQLITE_PATH"] = f"{database}.sqlite3"
    env["DURABLE_JOBS_BENCH_PG_NAME"] = Path(database).name
    env["DURABLE_JOBS_BENCH_CONCURRENCY"] = str(options.concurrency)
    env["DURABLE_JOBS_LOG_LEVEL"] = "WARNING"
    return env


def drain(tree: Path, options: argparse.Namespace, database: str) -> float:
    """Jobs per second of one drain with ``tree``'s code, on ``tree``'s own database (each
    tree migrates its own, so that neither drains over the other's schema)."""
    env = env_for(tree, options, database)
    python = [sys.executable, "-c"]
    subprocess.run([*python, FILL, str(options.jobs)], env=env, cwd=tree, check=True)
    subprocess.run(
        [sys.executable, "-m", "django", "runworker", "--burst", "--queues",
         f"default:{options.concurrency}"],
        env=env, cwd=tree, check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    out = subprocess.run(
        [*python, MEASURE], env=env, cwd=tree, check=True, capture_output=True, text=True
    ).stdout.split()
    done, seconds = int(out[0]), float(out[1])
    if done != options.jobs:
        raise SystemExit(f"{tree}: {done} of {options.jobs} jobs completed")
    return done / seconds


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tree_a", type=Path)
    parser.add_argument("tree_b", type=Path)
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="postgres")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--pg-dbname", default="durable_jobs_trees")
    options = parser.parse_args(argv)
    trees = [options.tree_a, options.tree_b]
    names = {tree: f"{options.pg_dbname}_{index}" for index, tree in enumerate(trees)}
    if options.db == "postgres":
        for name in names.values():
            # Fresh: a database another tree migrated may have a schema this one lacks.
            for command in ("dropdb", "createdb"):
                extra = ["--if-exists"] if command == "dropdb" else []
                subprocess.run([command, *extra, "-h", "127.0.0.1", "-U", "postgres", name])
    rates: dict[Path, list[float]] = {tree: [] for tree in trees}
    with tempfile.TemporaryDirectory() as tmp:
        for round_number in range(options.rounds):
            # Alternate which tree goes first, so neither always meets a warmer cache.
            for tree in trees if round_number % 2 == 0 else trees[::-1]:
                rate = drain(tree, options, str(Path(tmp) / names[tree]))
                rates[tree].append(rate)
                print(f"round {round_number + 1}: {tree}: {rate:,.0f} jobs/s", flush=True)
    a, b = (statistics.median(rates[t]) for t in (options.tree_a, options.tree_b))
    print(f"\n{options.db}, {options.jobs:,} jobs, concurrency {options.concurrency}, "
          f"{options.rounds} rounds, median of each:")  # fmt: skip
    print(f"  A {options.tree_a}: {a:,.0f} jobs/s")
    print(f"  B {options.tree_b}: {b:,.0f} jobs/s")
    print(f"  B/A: {b / a:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
