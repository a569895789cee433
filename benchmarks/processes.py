"""More than one core: ``runworker --processes`` and the process executor, against threads.

    python benchmarks/processes.py [--db sqlite|postgres|both] [--cpu-jobs N] [--loops N]
                                   [--noop-jobs N] [--write docs/benchmarks.md]

Every figure comes from real ``runworker --burst`` processes draining jobs enqueued
beforehand, on one database per phase (a fresh SQLite file, or a PostgreSQL database
created and dropped again; ``--pg-host``, ``--pg-port`` and ``--pg-user`` as for
``run.py``):

* **CPU-bound work**: ``bench.spin``, a pure-Python loop that holds the GIL, drained by
  one worker process on threads (concurrency 2), by ``--processes 2`` (each on threads,
  concurrency 2), and by one worker process whose queue has the process executor
  (concurrency 2). The ideal for N cores is N jobs at a time; the handler's own time,
  measured in the phase, gives that ceiling.
* **What the process executor costs per job**: no-op jobs on threads and on processes, at
  concurrency 10 (throughput) and 1 (the time each job takes end to end), and with
  ``max_jobs_per_child = 1`` (a new child for every job).
* **Start-up and memory of a child**: spawning one and waiting until Django is set up in
  it, and its resident memory then.

Rates run from the first job's start to the last one's finish (the workers' own start-up
left out; the wall time, start-up included, is beside it). CPU is the worker processes'
user and system time, their children included, per 1,000 jobs.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    # Run as a script: the repository's root must be importable for ``benchmarks.harness``.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import harness

SETTINGS_MODULE = "benchmarks.settings"
MANAGE = Path(__file__).resolve().parent / "manage.py"
PHASE_TIMEOUT = 1800
MARKERS = harness.Markers("processes")
TIMES = "\N{MULTIPLICATION SIGN}"


class Phase:
    """One database: every run of the table, in a process where Django is set up."""

    def __init__(self, options: argparse.Namespace) -> None:
        self.options = options
        harness.setup_django()
        from django.db import connection

        self.connection = connection

    def close(self) -> None:
        pass

    def run(self) -> dict[str, Any]:
        o = self.options
        spin = {"loops": o.loops}
        cpu = [
            self.drain("1 process, threads", "bench.spin", o.cpu_jobs, spin, 2, "thread"),
            self.drain(
                "--processes 2, threads", "bench.spin", o.cpu_jobs, spin, 2, "thread", processes=2
            ),
            self.drain("1 process, process executor", "bench.spin", o.cpu_jobs, spin, 2, "process"),
        ]
        noop = [
            self.drain("threads", "bench.noop", o.noop_jobs, {}, 10, "thread"),
            self.drain("process executor", "bench.noop", o.noop_jobs, {}, 10, "process"),
            self.drain("threads", "bench.noop", o.noop_jobs // 2, {}, 1, "thread"),
            self.drain("process executor", "bench.noop", o.noop_jobs // 2, {}, 1, "process"),
            self.drain(
                "process executor, max_jobs_per_child = 1",
                "bench.noop",
                o.recycle_jobs,
                {},
                2,
                "process",
                max_jobs_per_child=1,
            ),
        ]
        return {
            "vendor": self.connection.vendor,
            "spin_seconds": self.spin_seconds(o.loops),
            "cpu": cpu,
            "noop": noop,
            "child": self.child_start(),
        }

    def spin_seconds(self, loops: int) -> float:
        """The handler's own time per job, here, on one core (the median of five)."""
        from benchmarks.benchapp.jobs import spin

        times = []
        for _ in range(5):
            started = time.perf_counter()
            spin.func(loops=loops)
            times.append(time.perf_counter() - started)
        return statistics.median(times)

    def reset(self) -> None:
        from durable_jobs.models import Attempt, Job

        quote = self.connection.ops.quote_name
        with self.connection.cursor() as cursor:
            for model in (Attempt, Job):
                cursor.execute(f"DELETE FROM {quote(model._meta.db_table)}")

    def drain(
        self,
        label: str,
        name: str,
        jobs: int,
        payload: dict[str, Any],
        concurrency: int,
        executor: str,
        *,
        processes: int = 1,
        max_jobs_per_child: int | None = None,
    ) -> dict[str, Any]:
        from django.db.models import Count, Max, Min

        import durable_jobs
        from durable_jobs.models import Job
        from durable_jobs.registry import get_handler

        self.reset()
        handler = get_handler(name)
        durable_jobs.enqueue_many([handler.prepare(**payload) for _ in range(jobs)])
        extra = {
            "DURABLE_JOBS_BENCH_CONCURRENCY": str(concurrency),
            "DURABLE_JOBS_BENCH_EXECUTOR": executor,
        }
        if max_jobs_per_child is not None:
            extra["DURABLE_JOBS_BENCH_MAX_JOBS_PER_CHILD"] = str(max_jobs_per_child)
        command = [sys.executable, str(MANAGE), "runworker", "--burst"]
        command += ["--queues", f"default:{concurrency}"]
        if processes > 1:
            command += ["--processes", str(processes)]
        harness.log(
            f"{self.connection.vendor}: {jobs:,} {TIMES} {name}, {label}, conc {concurrency}"
        )
        cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.time()
        with tempfile.TemporaryFile() as output:
            worker = subprocess.Popen(
                command,
                cwd=harness.REPO,
                env=harness.child_env(SETTINGS_MODULE, self.options.phase, self.options, **extra),
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
            )
            try:
                code = worker.wait(timeout=max(300.0, jobs / 5))
            finally:
                if worker.poll() is None:
                    worker.kill()
                    worker.wait()
            output.seek(0)
            log = output.read().decode(errors="replace")
        exited = time.time()
        cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
        stats = Job.objects.filter(state="completed").aggregate(
            n=Count("id"), first=Min("attempted_at"), last=Max("finished_at")
        )
        if code != 0 or stats["n"] != jobs:
            raise SystemExit(
                f"{label}: runworker exited {code}, {stats['n']} of {jobs} jobs completed\n"
                + log[-3000:]
            )
        cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (
            cpu_after.ru_stime - cpu_before.ru_stime
        )
        steady = stats["last"].timestamp() - stats["first"].timestamp()
        return {
            "label": label,
            "jobs": jobs,
            "concurrency": concurrency,
            "rate": jobs / steady,
            "ms_per_job": steady / jobs * 1000,
            "wall_rate": jobs / (exited - started),
            "cpu_per_1000": cpu / jobs * 1000,
        }

    def child_start(self) -> dict[str, Any]:
        """Spawn a process-executor child five times: seconds until Django is set up in it,
        and its resident memory then."""
        from django.conf import settings
        from django.db import connections

        from durable_jobs.worker.process_pool import ChildProcess, ProcessSetup

        setup = ProcessSetup(
            settings=os.environ["DJANGO_SETTINGS_MODULE"],
            databases={alias: connections[alias].settings_dict["NAME"] for alias in connections},
            alias="default",
            node="benchmark",
            lease_seconds=300.0,
        )
        assert settings.configured
        seconds, rss = [], []
        for i in range(5):
            started = time.perf_counter()
            child = ChildProcess.spawn(setup, f"benchmark-{i}")
            try:
                child.wait_ready()
                seconds.append(time.perf_counter() - started)
                rss.append(resident_bytes(child.pid))
            finally:
                child.stop(5.0)
        return {"start_s": statistics.median(seconds), "rss_mb": statistics.median(rss) / 2**20}


def resident_bytes(pid: int | None) -> int:
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


# ================================================================================================
# Parent: databases, phases, the report
# ================================================================================================


def run_database(vendor: str, options: argparse.Namespace) -> dict[str, Any]:
    args = ["--cpu-jobs", str(options.cpu_jobs), "--loops", str(options.loops)]
    args += ["--noop-jobs", str(options.noop_jobs), "--recycle-jobs", str(options.recycle_jobs)]
    args += harness.postgres_argv(options)
    return harness.run_in_fresh_database(
        __file__, vendor, options, args, settings_module=SETTINGS_MODULE, timeout=PHASE_TIMEOUT
    )


def render(results: list[dict[str, Any]], options: argparse.Namespace, argv: list[str]) -> str:
    machine = [harness.cpu_fact(), harness.memory_fact(), *harness.software_facts()]
    machine.append(("Load average before the run", options.load_before))
    lines = harness.report_heading("processes.py", argv, machine)
    for result in results:
        vendor = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}[result["vendor"]]
        spin_ms = result["spin_seconds"] * 1000
        cpu = result["cpu"]
        base = cpu[0]["rate"]
        lines += ["", f"**{vendor}: CPU-bound jobs** ({cpu[0]['jobs']:,} {TIMES} `bench.spin`, "]
        lines[-1] += f"{options.loops:,} loops, {spin_ms:.0f} ms of Python each on one core)"
        lines += [
            "",
            f"| workers | jobs/s | {TIMES} 1 process on threads | of the ideal | wall job/s |",
        ]
        lines += ["|---|---:|---:|---:|---:|"]
        for row, cores in zip(cpu, (1, 2, 2), strict=True):
            ideal = cores / result["spin_seconds"]
            lines.append(
                f"| {row['label']} (concurrency {row['concurrency']}) | {row['rate']:,.1f} | "
                f"{row['rate'] / base:.2f}{TIMES} | {row['rate'] / ideal:.0%} of {cores} core"
                f"{'s' if cores > 1 else ''} | {row['wall_rate']:,.1f} |"
            )
        lines += ["", f"**{vendor}: no-op jobs**, one worker process", ""]
        lines += [
            "| executor | concurrency | jobs | jobs/s | ms per job (1 / rate) "
            "| worker CPU per 1,000 jobs |"
        ]
        lines += ["|---|---:|---:|---:|---:|---:|"]
        for row in result["noop"]:
            lines.append(
                f"| {row['label']} | {row['concurrency']} | {row['jobs']:,} | {row['rate']:,.0f} | "
                f"{row['ms_per_job']:.2f} | {row['cpu_per_1000']:.2f} s |"
            )
        child = result["child"]
        lines += [
            "",
            f"A process-executor child on {vendor}: {child['start_s'] * 1000:,.0f} ms from "
            f"spawn to ready (Django set up), {child['rss_mb']:.0f} MB resident then "
            "(medians of five).",
        ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--cpu-jobs", type=int, default=240)
    parser.add_argument("--loops", type=int, default=1_000_000, help="bench.spin's loop count")
    parser.add_argument("--noop-jobs", type=int, default=5_000)
    parser.add_argument("--recycle-jobs", type=int, default=200)
    parser.add_argument("--write", type=Path, help="Replace the report's block in this page.")
    harness.add_postgres_arguments(
        parser,
        dbname="durable_jobs_bench_processes",
        dbname_help="The benchmark's own database, dropped and created again "
        "(default durable_jobs_bench_processes).",
    )
    parser.add_argument("--phase", choices=["sqlite", "postgres"], help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.phase:
        raise SystemExit(harness.serve_phase(lambda: Phase(options)))
    signal.signal(signal.SIGTERM, harness.raise_system_exit)
    options.load_before = harness.load_average()
    vendors = ["sqlite", "postgres"] if options.db == "both" else [options.db]
    results = [run_database(vendor, options) for vendor in vendors]
    block = render(results, options, sys.argv[1:])
    print(block, end="", flush=True)
    if options.write is not None:
        text = options.write.read_text()
        replaced = MARKERS.replace_in(text, block)
        if replaced is None:
            raise SystemExit(f"{options.write} has no {MARKERS.start} … {MARKERS.end} block")
        options.write.write_text(replaced)


if __name__ == "__main__":
    main()
