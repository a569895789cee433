#!/usr/bin/env python
"""Pickup latency of an idle worker while its pruner works through a backlog.

    python benchmarks/pruning_pickup.py [--db postgres|sqlite|both] [--backlog N]
                                        [--samples N] [--write FILE]

Why: while the pruner is behind it deletes finished jobs 1,000 per transaction for up
to 0.2 s a run, a run every second. A pickup must not wait behind those runs: the worker
runs its maintenance services (rescuer, pruner, batch sweeper, schedule tick) on a thread
of their own, beside the loop that claims jobs. This script measures a job's pickup while
the pruner is busy, next to the same worker with nothing to prune; run from an older
checkout, where maintenance ran on the loop thread, it gives the figures to compare with.
On SQLite an enqueue also waits for a prune transaction's write lock, whichever thread
holds it (see below).

For each database (PostgreSQL: a database of its own, created for the run and dropped
afterwards; SQLite: a file in a temporary directory):

1. migrate it, and write a backlog of N finished jobs (``completed``, finished 30 days
   ago, one ``Attempt`` each; N is 300,000 on PostgreSQL and 100,000 on SQLite by
   default) with one ``INSERT ... SELECT`` per table (admin_pages.py's SQL dialect),
   then ``VACUUM ANALYZE`` / ``ANALYZE``. ``PRUNE_AFTER_DAYS`` is durable_jobs' default
   (7 days; benchmarks/settings.py turns pruning off, so the phase and its worker use
   a settings module that removes that key again), so the whole backlog is due;
2. start one ``manage.py runworker --queues default:10`` of the benchmark project, as
   run.py does (scheduler on, ``POLL_INTERVAL`` 1 s), wait until it has registered, is
   listening (PostgreSQL) and has run three warm-up jobs, and until the pruner's first
   delete;
3. enqueue M single ``bench.record_start`` jobs (default 200), one transaction each, at
   random spacing (run.py's ``LATENCY_SPACING``); a job's pickup latency is the time its
   handler started (the handler returns ``time.time()``) minus the time ``delay()``
   returned (the commit), on the same clock. The backlog rows left are counted when
   the first job is enqueued, when the last is, and when all have run: if the pruner
   ran out of backlog before the end, the backlog was too small and the report says so;
4. keep the worker running until the pruner has deleted the whole backlog (at most
   ``--clear-timeout`` seconds), to tell how long that took;
5. empty the tables and measure the same M jobs on a new worker with nothing to prune:
   the baseline.

A trigger on the job table records each ``DELETE`` statement (PostgreSQL: a statement
trigger, with the rows it deleted and its transaction's start; SQLite: row triggers on
the job and attempt tables that keep one row per value of ``'now'``, which is one value
per statement). DELETE statements less than 0.5 s apart make one prune *run* (on SQLite
it is measured from the end of its first DELETE, so it misses the read that precedes
it). A job *waited behind the pruner* if a prune DELETE ended between its commit and
the start of its claim (``attempted_at``); the report gives the latency of those jobs
and of the others apart. On SQLite a job cannot be committed while a prune transaction
holds the write lock: ``delay()`` waits for it instead, so the report also gives the
time of the ``delay()`` call, and from the call to the handler's start. (The commit is
taken as the moment ``delay()`` returned, a little after the job became visible: on
PostgreSQL a woken worker may begin its claim first, so commit → claim can be negative.)

It prints a Markdown block (``--write FILE`` also puts it between the
``<!-- pruning-pickup:start -->`` and ``<!-- pruning-pickup:end -->`` markers of FILE,
or appends a section with them). Each database is measured in a child process
(``--phase``) bounded by ``--timeout``; every process it starts is ended on the way out.
"""

from __future__ import annotations

import argparse
import bisect
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    # Run as a script: the repository's root must be importable for ``benchmarks.harness``.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import admin_pages, harness, run
from benchmarks.harness import log, percentile

MARKERS = harness.Markers("pruning-pickup")
SECTION_TITLE = "Pickup latency while the pruner works"
LABELS = {"postgres": "PostgreSQL", "sqlite": "SQLite"}
DEFAULT_BACKLOG = {"postgres": 300_000, "sqlite": 100_000}
#: Threads of the worker's one queue (``--queues default:10``).
CONCURRENCY = 10
#: Age of the backlog's jobs: well past PRUNE_AFTER_DAYS.
BACKLOG_AGE_DAYS = 30
#: Warm-up jobs run before each measurement.
WARM_UP_JOBS = 3
#: DELETE statements closer together than this belong to one prune run.
RUN_GAP_SECONDS = 0.5
#: The settings module of the phase and its worker: benchmarks/settings.py with pruning on.
SETTINGS_NAME = "durable_jobs_pruning_pickup_settings"
SETTINGS_TEXT = '''"""benchmarks/settings.py with PRUNE_AFTER_DAYS at durable_jobs' default (from
benchmarks/pruning_pickup.py, which writes this file into a temporary directory)."""

from benchmarks.settings import *  # noqa: F403
from benchmarks.settings import DURABLE_JOBS as _BENCH_DURABLE_JOBS

DURABLE_JOBS = {k: v for k, v in _BENCH_DURABLE_JOBS.items() if k != "PRUNE_AFTER_DAYS"}
'''
#: Where the trigger records the DELETE statements on the job table.
LOG_TABLE = "bench_prune_log"
MS = admin_pages.SECOND // 1000
NONE = "-"


# ================================================================================================
# Phase: one database, inside a Django-configured child process
# ================================================================================================


class PickupPhase:
    """The measurements on one database, with run.py's phase for its workers."""

    def __init__(self, options: argparse.Namespace) -> None:
        self.options = options
        self.vendor: str = options.phase
        settings = argparse.Namespace(**vars(options))
        settings.concurrency = CONCURRENCY
        self.phase = run.Phase(settings)  # start_worker, stop_workers, reset, _listening
        self.rng = random.Random(4321)
        # run.py's bench_env names benchmarks/settings.py; the workers need this module.
        self.worker_env = {"DJANGO_SETTINGS_MODULE": os.environ["DJANGO_SETTINGS_MODULE"]}

    def close(self) -> None:
        self.phase.close()

    # -- set-up -----------------------------------------------------------------------------

    def setup(self) -> dict[str, Any]:
        self.phase.setup()
        import durable_jobs
        from durable_jobs.conf import get_settings

        self.db = admin_pages.Database()
        prune_days = get_settings().prune_after_days
        log(
            f"[{self.vendor}] durable_jobs imported from {durable_jobs.__file__}; "
            f"PRUNE_AFTER_DAYS={prune_days}"
        )
        if prune_days is None or prune_days >= BACKLOG_AGE_DAYS:
            raise SystemExit(f"PRUNE_AFTER_DAYS is {prune_days}: the backlog would not be due")
        return {"durable_jobs": durable_jobs.__file__, "prune_after_days": prune_days}

    def fill_backlog(self, count: int) -> dict[str, Any]:
        """Write ``count`` completed jobs finished BACKLOG_AGE_DAYS ago (1 ms apart, in id
        order) and one attempt each, with set-based SQL; then VACUUM ANALYZE / ANALYZE."""
        from django.db.models import Max
        from django.utils import timezone

        from durable_jobs.models import Attempt, Job

        self.phase.reset()
        dialect = admin_pages.Dialect(self.db.vendor)
        quote = self.db.connection.ops.quote_name
        ref = int(timezone.now().timestamp()) * admin_pages.SECOND
        finished = f"({ref - BACKLOG_AGE_DAYS * admin_pages.DAY - count * MS} + s.i * {MS})"
        log(f"[{self.vendor}] writing a backlog of {count:,} finished jobs")
        started = time.perf_counter()
        columns = {
            "queue": "'default'",
            "name": "'bench.noop'",
            "payload": dialect.json_literal('{"n": 0}'),
            "state": "'completed'",
            "attempts": "1",
            "available_at": dialect.ts(f"{finished} - {60 * MS}"),
            "created_at": dialect.ts(f"{finished} - {60 * MS}"),
            "attempted_at": dialect.ts(f"{finished} - {20 * MS}"),
            "updated_at": dialect.ts(finished),
            "finished_at": dialect.ts(finished),
        }
        admin_pages.complete_columns(Job, columns, ref, dialect)
        admin_pages.insert_counted(
            self.db,
            Job,
            f"WITH RECURSIVE {dialect.series(count)} "
            f"INSERT INTO {quote(Job._meta.db_table)} ({', '.join(quote(c) for c in columns)}) "
            f"SELECT {', '.join(columns.values())} FROM s",
        )
        columns = {
            "job_id": "j.id",
            "number": "1",
            "node": "'bench-old-worker'",
            "started_at": "j.attempted_at",
            "finished_at": "j.finished_at",
            "duration": dialect.duration(str(20 * MS)),
            "outcome": "'completed'",
        }
        admin_pages.complete_columns(Attempt, columns, ref, dialect)
        admin_pages.insert_counted(
            self.db,
            Attempt,
            f"INSERT INTO {quote(Attempt._meta.db_table)} "
            f"({', '.join(quote(c) for c in columns)}) "
            f"SELECT {', '.join(columns.values())} FROM {quote(Job._meta.db_table)} j",
        )
        self.db.analyze(vacuum=True)
        seconds = time.perf_counter() - started
        max_id = Job.objects.aggregate(last=Max("pk"))["last"]
        self.backlog_max_id = int(max_id)
        return {"jobs": count, "seconds": seconds}

    def install_delete_log(self) -> None:
        """The triggers that record every DELETE statement on the job table (and, on
        SQLite, on the attempt table)."""
        from durable_jobs.models import Attempt, Job

        table = self.db.connection.ops.quote_name(Job._meta.db_table)
        self.db.execute(f"DROP TABLE IF EXISTS {LOG_TABLE}")
        if self.vendor == "postgres":
            self.db.execute(
                f"CREATE TABLE {LOG_TABLE} (started double precision NOT NULL, "
                "ended double precision NOT NULL, rows integer NOT NULL)"
            )
            self.db.execute(
                "CREATE OR REPLACE FUNCTION bench_prune_mark() RETURNS trigger "
                "LANGUAGE plpgsql AS $$ BEGIN "
                f"INSERT INTO {LOG_TABLE} SELECT extract(epoch FROM now()), "
                "extract(epoch FROM clock_timestamp()), count(*) FROM old_rows; "
                "RETURN NULL; END $$"
            )
            self.db.execute(
                f"CREATE TRIGGER bench_prune_mark AFTER DELETE ON {table} "
                "REFERENCING OLD TABLE AS old_rows "
                "FOR EACH STATEMENT EXECUTE FUNCTION bench_prune_mark()"
            )
        else:
            # 'now' is one value per statement (per sqlite3_step): one row per DELETE, which
            # counts the jobs it deleted. The attempts' DELETE comes first in a prune
            # transaction: its row (0 jobs) marks the start of a run more closely.
            self.db.execute(f"CREATE TABLE {LOG_TABLE} (ended REAL PRIMARY KEY, rows INTEGER)")
            attempts = self.db.connection.ops.quote_name(Attempt._meta.db_table)
            for name, target, rows in (("job", table, 1), ("attempt", attempts, 0)):
                self.db.execute(
                    f"CREATE TRIGGER bench_prune_mark_{name} AFTER DELETE ON {target} BEGIN "
                    f"INSERT INTO {LOG_TABLE} (ended, rows) "
                    f"VALUES ((julianday('now') - 2440587.5) * 86400.0, {rows}) "
                    f"ON CONFLICT (ended) DO UPDATE SET rows = rows + {rows}; END"
                )

    def deletes(self) -> list[tuple[float, float, int]]:
        """(transaction start or statement end, statement end, jobs deleted) of each
        DELETE, in the order they ended."""
        started = "started" if self.vendor == "postgres" else "ended"
        rows = self.db.execute(f"SELECT {started}, ended, rows FROM {LOG_TABLE} ORDER BY ended")
        return [(float(a), float(b), int(n)) for a, b, n in rows]

    def backlog_left(self) -> int:
        from durable_jobs.models import Job

        return Job.objects.filter(pk__lte=self.backlog_max_id).count()

    # -- one measurement ----------------------------------------------------------------------

    def measure(self, count: int, *, busy: bool) -> dict[str, Any]:
        """Start a worker, and measure the pickup of ``count`` jobs enqueued one by one."""
        from benchmarks.benchapp.jobs import record_start
        from durable_jobs.models import Job, Node

        phase, name = self.phase, f"[{self.vendor}] {'busy' if busy else 'idle'}:"
        process = phase.start_worker(env=self.worker_env)

        def alive() -> bool:
            if process.poll() is not None:
                raise RuntimeError(f"runworker exited early: {phase.worker_log(process)}")
            return True

        def done(ids: list[int]) -> bool:
            return alive() and Job.objects.filter(pk__in=ids, state="completed").count() == len(ids)

        called: dict[int, float] = {}  # when delay() was called
        committed: dict[int, float] = {}  # when it returned
        left: dict[str, int] = {}
        clear: dict[str, Any] = {}
        try:
            run.wait_until(
                lambda: alive() and Node.objects.filter(pid=process.pid).exists(),
                60,
                "the worker to register",
            )
            if self.vendor == "postgres":
                run.wait_until(lambda: alive() and phase._listening(), 60, "the worker to LISTEN")
            warm = [record_start.delay(n=-1 - i).pk for i in range(WARM_UP_JOBS)]
            run.wait_until(lambda: done(warm), 120, "the warm-up jobs")
            if busy:
                try:
                    run.wait_until(lambda: alive() and self.deletes(), 60, "the first prune")
                except TimeoutError:
                    log(f"{name} the pruner has deleted nothing yet; measuring anyway")
                left["start"] = self.backlog_left()
            time.sleep(0.5)
            log(f"{name} {count} jobs" + (f", {left['start']:,} backlog rows left" if busy else ""))
            for i in range(count):
                before = time.time()
                job = record_start.delay(n=i)  # autocommit: committed when delay() returns
                committed[job.pk] = time.time()
                called[job.pk] = before
                time.sleep(self.rng.uniform(*run.LATENCY_SPACING))
            if busy:
                left["last_enqueue"] = self.backlog_left()
            run.wait_until(lambda: done(list(committed)), 120, "the measured jobs", interval=0.1)
            if busy:
                left["end"] = self.backlog_left()
                log(f"{name} measured; {left['end']:,} backlog rows left")
                clear = self.wait_for_clear(alive)
        finally:
            phase.stop_workers()
        warnings = [line for line in phase.worker_log(process).splitlines() if line.strip()]
        if warnings:
            log(f"{name} the worker logged {len(warnings)} lines; the last: {warnings[-1][:300]}")
        result = self.figures(called, committed, busy=busy)
        result.update(busy=busy, backlog_left=left, clear=clear, worker_log_lines=len(warnings))
        if busy:
            # The backlog ran out too early if none was left at the last enqueue, or if the
            # DELETE that cleared it came before the last measured job had started.
            result["prune"]["ran_out"] = left.get("last_enqueue") == 0 or (
                bool(clear.get("cleared"))
                and clear.get("last_delete", 0.0) < result["prune"]["window_end"]
            )
        log(
            f"{name} p50 {result['p50_ms']:.1f} ms, p95 {result['p95_ms']:.1f} ms, "
            f"p99 {result['p99_ms']:.1f} ms, max {result['max_ms']:.1f} ms"
        )
        return result

    def wait_for_clear(self, alive: Any) -> dict[str, Any]:
        """Let the pruner go on until the backlog is gone, or ``--clear-timeout`` passes."""
        timeout = self.options.clear_timeout
        try:
            run.wait_until(
                lambda: alive() and self.backlog_left() == 0,
                timeout,
                "the pruner to clear the backlog",
                interval=1.0,
            )
        except TimeoutError:
            log(f"[{self.vendor}] the pruner had not cleared the backlog after {timeout:g} s more")
        deletes = self.deletes()
        left = self.backlog_left()
        out: dict[str, Any] = {"cleared": left == 0, "left": left}
        if deletes:
            seconds = deletes[-1][1] - deletes[0][0]
            rows = sum(n for _, _, n in deletes)
            out.update(seconds=seconds, rows=rows, rows_per_s=rows / max(seconds, 1e-9))
            out["last_delete"] = deletes[-1][1]
            log(f"[{self.vendor}] pruner: {rows:,} rows deleted in {seconds:.1f} s, left {left:,}")
        return out

    def figures(
        self, called: dict[int, float], committed: dict[int, float], *, busy: bool
    ) -> dict[str, Any]:
        from durable_jobs.models import Job

        enqueue_ms = [(committed[pk] - called[pk]) * 1000 for pk in committed]
        from_call = []

        samples = []  # (commit, claim began, handler started), wall-clock seconds
        for pk, started, claimed in Job.objects.filter(pk__in=list(committed)).values_list(
            "pk", "result", "attempted_at"
        ):
            samples.append((committed[pk], claimed.timestamp(), float(started)))
            from_call.append((float(started) - called[pk]) * 1000)
        latencies = [(start - commit) * 1000 for commit, _, start in samples]
        to_claim = [(claim - commit) * 1000 for commit, claim, _ in samples]
        claim_to_start = [(start - claim) * 1000 for _, claim, start in samples]
        out: dict[str, Any] = {
            "jobs": len(samples),
            **spread(latencies),
            "min_ms": min(latencies),
            "to_claim_p50_ms": percentile(to_claim, 50),
            "to_claim_p95_ms": percentile(to_claim, 95),
            "claim_to_start_p50_ms": percentile(claim_to_start, 50),
            "claim_to_start_p95_ms": percentile(claim_to_start, 95),
            "enqueue_p50_ms": percentile(enqueue_ms, 50),
            "enqueue_p99_ms": percentile(enqueue_ms, 99),
            "enqueue_max_ms": max(enqueue_ms),
            # What the enqueuing code sees on SQLite, where delay() waits for the write
            # lock while a prune transaction holds it (and commits only after it).
            "from_call": spread(from_call),
        }
        if busy:
            out["prune"] = prune_figures(self.deletes(), samples)
        return out

    # -- the whole phase ----------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        out: dict[str, Any] = {"vendor": self.vendor, **self.setup()}
        out["database"] = self.phase.database_facts()
        out["backlog"] = self.fill_backlog(self.options.backlog)
        self.install_delete_log()
        out["busy"] = self.measure(self.options.samples, busy=True)
        # The baseline: nothing to prune (SQLite's DELETE fires the trigger: empty its log).
        self.phase.reset()
        self.db.execute(f"DELETE FROM {LOG_TABLE}")
        self.db.analyze(vacuum=False)
        out["idle"] = self.measure(self.options.samples, busy=False)
        return out


def spread(latencies: list[float]) -> dict[str, float]:
    return {
        "p50_ms": percentile(latencies, 50),
        "p95_ms": percentile(latencies, 95),
        "p99_ms": percentile(latencies, 99),
        "max_ms": max(latencies),
    }


def prune_runs(deletes: list[tuple[float, float, int]]) -> list[tuple[float, float, int]]:
    """Group DELETE statements into runs: (start, end, rows) of each."""
    runs: list[list[Any]] = []
    for started, ended, rows in deletes:
        if runs and started - runs[-1][1] < RUN_GAP_SECONDS:
            runs[-1][1] = max(runs[-1][1], ended)
            runs[-1][2] += rows
        else:
            runs.append([started, ended, rows])
    return [(a, b, n) for a, b, n in runs]


def prune_figures(
    deletes: list[tuple[float, float, int]], samples: list[tuple[float, float, float]]
) -> dict[str, Any]:
    """What the pruner did while the jobs were measured, and the latency of the jobs that
    waited for their claim while it deleted (a DELETE ended between the job's commit and
    the start of its claim) against the others'."""
    first = min(commit for commit, _, _ in samples)
    last = max(start for _, _, start in samples)
    runs = [r for r in prune_runs(deletes) if r[1] >= first and r[0] <= last]
    ends = sorted(ended for _, ended, _ in deletes)
    waited, others = [], []
    for commit, claim, start in samples:
        overlapped = bisect.bisect_right(ends, commit) < bisect.bisect_right(ends, claim)
        (waited if overlapped else others).append((start - commit) * 1000)
    lengths = [(b - a) * 1000 for a, b, _ in runs]
    busy = sum(min(b, last) - max(a, first) for a, b, _ in runs)
    out: dict[str, Any] = {
        "window_s": last - first,
        "runs": len(runs),
        "rows": sum(n for _, _, n in runs),
        "busy_fraction": busy / max(last - first, 1e-9),
        "waited": len(waited),
        "others": len(others),
        "window_end": last,
    }
    if runs:
        out["run_p50_ms"] = percentile(lengths, 50)
        out["run_max_ms"] = max(lengths)
        out["rows_per_run"] = out["rows"] / len(runs)
    if waited:
        out["waited_spread"] = spread(waited)
    if others:
        out["others_spread"] = spread(others)
    return out


def run_phase(options: argparse.Namespace) -> int:
    return harness.serve_phase(lambda: PickupPhase(options))


# ================================================================================================
# Parent: databases, phases, the report
# ================================================================================================


def run_database(vendor: str, options: argparse.Namespace) -> dict[str, Any]:
    tmpdir = Path(tempfile.mkdtemp(prefix="durable_jobs_pruning_pickup_"))
    created = False
    try:
        (tmpdir / f"{SETTINGS_NAME}.py").write_text(SETTINGS_TEXT)
        if vendor == "sqlite":
            options.sqlite_path = str(tmpdir / "bench.sqlite3")
        else:
            harness.create_postgres_database(options, replace=False)
            created = True
        backlog = options.backlog if options.backlog is not None else DEFAULT_BACKLOG[vendor]
        command = [sys.executable, str(Path(__file__).resolve()), "--phase", vendor]
        command += ["--backlog", str(backlog), "--samples", str(options.samples)]
        command += ["--clear-timeout", str(options.clear_timeout)]
        command += harness.postgres_argv(options)
        settings = argparse.Namespace(**vars(options))
        settings.concurrency = CONCURRENCY
        env = run.bench_env(vendor, settings)
        env["DJANGO_SETTINGS_MODULE"] = SETTINGS_NAME
        env["PYTHONPATH"] += os.pathsep + str(tmpdir)
        log(f"[{vendor}] backlog {backlog:,}, {options.samples} jobs per measurement")
        return harness.run_phase_process(command, vendor=vendor, env=env, timeout=options.timeout)
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
        if created:
            harness.drop_postgres_database(options)


def milliseconds(value: float | None) -> str:
    return NONE if value is None else f"{value:.0f}" if value >= 10 else f"{value:.1f}"


def render(
    results: dict[str, dict[str, Any]], argv: list[str], load_at_start: str
) -> tuple[str, list[str]]:
    """The Markdown block, and the warnings (a backlog that ran out) to print as well."""
    facts = run.machine_facts(results)
    facts.insert(1, harness.memory_fact())
    facts.insert(2, ("Load average (1, 5, 15 min) at the start of the run", load_at_start))
    lines = harness.report_heading("pruning_pickup.py", argv, facts)
    lines += [
        "",
        "Pickup latency (enqueue commit → handler start) of one `runworker --queues "
        "default:10`, single jobs enqueued one at a time:",
        "",
        "| Database | Worker | Jobs | p50 (ms) | p95 (ms) | p99 (ms) | max (ms) "
        "| Backlog rows left: first enqueue → last enqueue → all run |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    warnings = []
    notes = []
    for vendor, result in results.items():
        label = LABELS[vendor]
        backlog = result["backlog"]["jobs"]
        for key, what in (
            ("busy", f"pruning a backlog of {backlog:,} jobs"),
            ("idle", "nothing to prune"),
        ):
            entry = result[key]
            left = entry["backlog_left"]
            left_cell = (
                f"{left['start']:,} → {left['last_enqueue']:,} → {left['end']:,}" if left else NONE
            )
            cells = [label, what, str(entry["jobs"])]
            cells += [milliseconds(entry[f"{p}_ms"]) for p in ("p50", "p95", "p99", "max")]
            lines.append("| " + " | ".join([*cells, left_cell]) + " |")
        busy, idle = result["busy"], result["idle"]
        prune, clear = busy["prune"], busy["clear"]
        if busy["backlog_left"].get("last_enqueue", 1) == 0 or prune["ran_out"]:
            warnings.append(
                f"{label}: the pruner cleared the backlog of {backlog:,} before the last "
                "measured job: the backlog is too small, pass a larger --backlog."
            )
        note = f"- {label}: during the busy measurement ({prune['window_s']:.0f} s) the pruner "
        if prune["runs"]:
            note += (
                f"ran {prune['runs']} times, {prune['rows_per_run']:,.0f} rows a run, each run "
                f"{milliseconds(prune['run_p50_ms'])} ms (median; max "
                f"{milliseconds(prune['run_max_ms'])} ms): busy "
                f"{prune['busy_fraction']:.0%} of the time. "
            )
        else:
            note += "deleted nothing. "
        what = "waited for their claim while the pruner deleted rows"
        for part in ("waited", "others"):
            figures = prune.get(f"{part}_spread")
            if figures is None:
                note += f"No job {what}. " if part == "waited" else ""
                continue
            note += (
                f"{prune[part]} job{'' if prune[part] == 1 else 's'} "
                f"{what if part == 'waited' else 'did not'}: p50 "
                f"{milliseconds(figures['p50_ms'])} ms, max {milliseconds(figures['max_ms'])} ms"
                f"{'; ' if part == 'waited' else '. '}"
            )
        if clear.get("cleared"):
            note += (
                f"It deleted the whole backlog in {clear['seconds']:.0f} s "
                f"({clear['rows_per_s']:,.0f} rows/s, first DELETE to last)."
            )
        elif clear:
            note += f"{clear['left']:,} backlog rows were still there when the worker stopped."
        notes.append(note)
        notes.append(
            f"- {label}, in ms, busy worker vs idle: commit → claim, p50 / p95, "
            f"{pair(busy, 'to_claim')} vs {pair(idle, 'to_claim')}; claim → handler start "
            f"{pair(busy, 'claim_to_start')} vs {pair(idle, 'claim_to_start')}; the `delay()` "
            f"call itself, p50 / p99 / max, {triple(busy)} vs {triple(idle)}; from the "
            f"`delay()` call to handler start, p50 / p95 / p99 / max, {four(busy['from_call'])} "
            f"vs {four(idle['from_call'])}."
        )
    lines += ["", *notes]
    if warnings:
        lines += ["", *(f"**Warning**: {warning}" for warning in warnings)]
    return "\n".join(lines) + "\n", warnings


def pair(entry: dict[str, Any], key: str) -> str:
    return f"{milliseconds(entry[f'{key}_p50_ms'])} / {milliseconds(entry[f'{key}_p95_ms'])}"


def triple(entry: dict[str, Any]) -> str:
    return " / ".join(milliseconds(entry[f"enqueue_{p}_ms"]) for p in ("p50", "p99", "max"))


def four(figures: dict[str, float]) -> str:
    return " / ".join(milliseconds(figures[f"{p}_ms"]) for p in ("p50", "p95", "p99", "max"))


def write_report(path: Path, block: str) -> None:
    """Replace the block between the markers of ``path``, or append a section with them."""
    text = path.read_text() if path.exists() else ""
    replaced = MARKERS.replace_in(text, block)
    if replaced is None:
        section = f"## {SECTION_TITLE}\n\n" + MARKERS.wrap(block) + "\n"
        replaced = (text.rstrip("\n") + "\n\n" if text else "") + section
    path.write_text(replaced)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--db",
        choices=["postgres", "sqlite", "both"],
        default="both",
        help="Databases to measure (default both).",
    )
    parser.add_argument(
        "--backlog",
        type=int,
        default=None,
        help="Finished jobs due for pruning (default 300,000 on PostgreSQL, 100,000 on SQLite).",
    )
    parser.add_argument(
        "--samples", type=int, default=200, help="Jobs measured per worker (default 200)."
    )
    parser.add_argument(
        "--clear-timeout",
        type=float,
        default=600,
        help="Seconds to let the pruner go on after the busy measurement, to tell how long "
        "the backlog took to clear (default 600; 0: do not wait).",
    )
    parser.add_argument(
        "--write", type=Path, default=None, help="Also write the results into this Markdown file."
    )
    harness.add_postgres_arguments(
        parser,
        dbname="durable_jobs_bench_pruning",
        dbname_help="Database to create for the run and drop afterwards (must not exist; "
        "default durable_jobs_bench_pruning).",
    )
    parser.add_argument(
        "--timeout", type=float, default=1800, help="Seconds allowed per database (default 1800)."
    )
    parser.add_argument("--phase", choices=["sqlite", "postgres"], help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.backlog is not None and options.backlog < 1:
        parser.error("--backlog must be at least 1")
    if options.samples < 1:
        parser.error("--samples must be at least 1")
    return options


def main(argv: list[str]) -> int:
    options = parse_args(argv)
    if options.phase:
        return run_phase(options)
    signal.signal(signal.SIGTERM, harness.raise_system_exit)
    load_at_start = harness.load_average()
    vendors = ["postgres", "sqlite"] if options.db == "both" else [options.db]
    results = {vendor: run_database(vendor, options) for vendor in vendors}
    block, warnings = render(results, argv, load_at_start)
    print(block)
    for warning in warnings:
        log(f"WARNING: {warning}")
    if options.write is not None:
        write_report(options.write, block)
        log(f"wrote {options.write}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
