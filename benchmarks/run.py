#!/usr/bin/env python
"""Benchmarks for durable_jobs on SQLite and PostgreSQL.

    python benchmarks/run.py [--db sqlite|postgres|both] [--jobs N] [--quick]
                             [--only enqueue] [--write docs/benchmarks.md]

Measures, on each database:

1. enqueue rate, one job per transaction (``noop.delay()`` in autocommit);
2. enqueue rate, 1,000 ``noop.delay()`` calls inside one ``transaction.atomic()``;
2b. enqueue rate of ``durable_jobs.enqueue_many()`` with N prepared jobs in one call;
3. drain throughput of N no-op jobs with 1 and with 2 ``manage.py runworker --burst``
   processes, from process start to the last job's ``finished_at``;
4. pickup latency of an idle ``runworker``: enqueue commit -> handler start;

and, on PostgreSQL, the same operations as plain SQL through psycopg on a minimal
table (one job per statement, ``FOR UPDATE SKIP LOCKED``; multi-row ``INSERT`` for
2b): a ceiling to read the durable_jobs figures against.

``--only enqueue`` measures 1, 2 and 2b only (no worker processes), in about a minute.

Each database is benchmarked in a child process (``--phase``) that configures Django
for it; the parent creates and removes the databases, bounds every phase with a
timeout, and kills whatever a phase left running.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    # Run as a script: the repository's root must be importable for ``benchmarks.harness``.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import cpu, harness
from benchmarks.harness import log, percentile

BENCH_DIR = harness.REPO / "benchmarks"
SETTINGS_MODULE = "benchmarks.settings"
MARKERS = harness.Markers("benchmark-results")
#: Markers of the block that ``--only enqueue --write FILE`` replaces.
ENQUEUE_MARKERS = harness.Markers("benchmark-enqueue-results")

#: ``.delay()`` calls per transaction in the bulk enqueue measurement and when filling queues.
BULK_BATCH = 1000
#: Rounds of the ``enqueue_many`` measurement (N jobs in one call each).
MANY_ROUNDS = 3
#: Rows per multi-row INSERT of the raw SQL counterpart of ``enqueue_many`` (durable_jobs
#: writes at most 500 rows per statement too).
RAW_ROWS_PER_INSERT = 500
#: Spacing between the enqueues of the latency measurement, in seconds.
LATENCY_SPACING = (0.05, 0.10)
#: POLL_INTERVAL of the second SQLite latency measurement.
SQLITE_FAST_POLL = 0.05
#: A table cell with nothing to show.
NONE = "-"


def wait_until(predicate: Any, timeout: float, what: str, interval: float = 0.02) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


def wait_all(processes: list[subprocess.Popen[bytes]], seconds: float) -> bool:
    """Wait up to ``seconds`` for every process to exit; whether they all have."""
    deadline = time.monotonic() + seconds
    try:
        for process in processes:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return False
    return True


def bench_env(vendor: str, options: argparse.Namespace, **extra: str) -> dict[str, str]:
    """Environment for a phase or worker process: benchmark settings, this database, and
    the ``--concurrency`` of the workers' queue."""
    concurrency = str(options.concurrency)
    return harness.child_env(
        SETTINGS_MODULE, vendor, options, DURABLE_JOBS_BENCH_CONCURRENCY=concurrency, **extra
    )


# ================================================================================================
# Phase: one database, inside a Django-configured child process
# ================================================================================================


class RawCeiling:
    """The same operations as plain SQL through psycopg on a minimal table, one job per
    statement: what the database and driver allow, to read durable_jobs' figures against."""

    TABLE = "bench_raw_job"
    INSERT = f"INSERT INTO {TABLE} (queue, state, payload) VALUES ('default', 'queued', %s)"
    # The claim has the shape of durable_jobs' own (per queue, by priority, then FIFO,
    # through a partial index that holds only the waiting jobs), and acknowledges the
    # job in the same statement.
    CLAIM_AND_ACK = f"""
        UPDATE {TABLE} SET state = 'done', finished_at = clock_timestamp()
        WHERE id = (
            SELECT id FROM {TABLE}
            WHERE queue = 'default' AND state = 'queued' AND available_at <= clock_timestamp()
            ORDER BY priority DESC, available_at, id
            LIMIT 1
            FOR UPDATE SKIP LOCKED
        )
        RETURNING id
    """

    @classmethod
    def claim_and_ack_many(cls, limit: int) -> str:
        """The claim-and-ack of up to ``limit`` jobs in one statement: the same claim,
        feeding an ``UPDATE`` through a CTE (a ``WHERE id IN (subquery LIMIT n)`` may be
        run again by the planner)."""
        return f"""
            WITH claimed AS (
                SELECT id FROM {cls.TABLE}
                WHERE queue = 'default' AND state = 'queued' AND available_at <= clock_timestamp()
                ORDER BY priority DESC, available_at, id
                LIMIT {int(limit)}
                FOR UPDATE SKIP LOCKED
            )
            UPDATE {cls.TABLE} SET state = 'done', finished_at = clock_timestamp()
            FROM claimed WHERE {cls.TABLE}.id = claimed.id
        """

    def __init__(self, options: argparse.Namespace, dbname: str) -> None:
        self.options = options
        self.dbname = dbname
        self.conn = harness.pg_connect(options, dbname)
        self.conn.execute(f"DROP TABLE IF EXISTS {self.TABLE}")
        self.conn.execute(
            f"CREATE TABLE {self.TABLE} (id bigserial PRIMARY KEY, queue text NOT NULL, "
            "state text NOT NULL, priority smallint NOT NULL DEFAULT 0, "
            "payload jsonb NOT NULL, "
            "available_at timestamptz NOT NULL DEFAULT clock_timestamp(), "
            "finished_at timestamptz)"
        )
        self.conn.execute(
            f"CREATE INDEX ON {self.TABLE} (queue, priority DESC, available_at, id) "
            "WHERE state = 'queued'"
        )

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.execute(f"DROP TABLE IF EXISTS {self.TABLE}")
        self.conn.close()

    def reset(self) -> None:
        self.conn.execute(f"TRUNCATE {self.TABLE}")

    def enqueue_single(self, count: int) -> float:
        started = time.perf_counter()
        for i in range(count):
            self.conn.execute(self.INSERT, (json.dumps({"n": i}),))
        return time.perf_counter() - started

    def enqueue_bulk(self, count: int) -> float:
        started = time.perf_counter()
        done = 0
        while done < count:
            batch = min(BULK_BATCH, count - done)
            with self.conn.transaction():
                for i in range(done, done + batch):
                    self.conn.execute(self.INSERT, (json.dumps({"n": i}),))
            done += batch
        return time.perf_counter() - started

    def enqueue_many(self, count: int) -> float:
        """``count`` rows in one transaction, RAW_ROWS_PER_INSERT rows per INSERT statement:
        the counterpart of ``enqueue_many`` (which also writes multi-row INSERTs)."""
        started = time.perf_counter()
        with self.conn.transaction():
            for start in range(0, count, RAW_ROWS_PER_INSERT):
                rows = range(start, min(count, start + RAW_ROWS_PER_INSERT))
                values = ", ".join(["('default', 'queued', %s)"] * len(rows))
                self.conn.execute(
                    f"INSERT INTO {self.TABLE} (queue, state, payload) VALUES {values}",
                    [json.dumps({"n": i}) for i in rows],
                )
        return time.perf_counter() - started

    def analyze(self) -> None:
        self.conn.execute(f"ANALYZE {self.TABLE}")

    def drain(self, jobs: int, workers: int) -> dict[str, Any]:
        """Run the claim-and-ack statement until it finds nothing, on ``workers`` connections."""
        connections = [harness.pg_connect(self.options, self.dbname) for _ in range(workers)]
        done = [0] * workers
        errors: list[BaseException] = []

        def loop(index: int, connection: Any) -> None:
            try:
                while connection.execute(self.CLAIM_AND_ACK).fetchone() is not None:
                    done[index] += 1
            except BaseException as exc:
                errors.append(exc)

        threads = [
            threading.Thread(target=loop, args=(i, c), daemon=True)
            for i, c in enumerate(connections)
        ]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + max(120.0, jobs / 10)
        for thread in threads:
            thread.join(timeout=max(0.1, deadline - time.monotonic()))
        elapsed = time.perf_counter() - started
        if any(thread.is_alive() for thread in threads):
            errors.append(TimeoutError("the raw drain did not finish in time"))
        for connection in connections:
            with contextlib.suppress(Exception):
                connection.close()
        if errors or sum(done) != jobs:
            return {"workers": workers, "error": f"{sum(done)} of {jobs} jobs: {errors}"}
        return {"workers": workers, "rate": jobs / elapsed, "seconds": elapsed}


class Phase:
    def __init__(self, options: argparse.Namespace) -> None:
        self.options = options
        self.vendor: str = options.phase
        self.workers: list[subprocess.Popen[bytes]] = []
        self.logdir = Path(tempfile.mkdtemp(prefix="durable_jobs_bench_logs_"))
        self.rng = random.Random(1234)
        self.raw: RawCeiling | None = None

    # -- set-up -----------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the workers this phase started and remove their logs."""
        self.stop_workers()
        shutil.rmtree(self.logdir, ignore_errors=True)

    def setup(self) -> None:
        harness.setup_django()
        from django.db import connection

        self.connection = connection
        from durable_jobs.models import Attempt, Job

        self.job_table = connection.ops.quote_name(Job._meta.db_table)
        self.attempt_table = connection.ops.quote_name(Attempt._meta.db_table)

    def database_facts(self) -> dict[str, Any]:
        with self.connection.cursor() as cursor:
            if self.vendor == "sqlite":
                cursor.execute("PRAGMA journal_mode")
                journal = cursor.fetchone()[0]
                cursor.execute("PRAGMA synchronous")
                sync = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}.get(cursor.fetchone()[0])
                cursor.execute("SELECT sqlite_version()")
                version = cursor.fetchone()[0]
                mode = self.connection.settings_dict.get("OPTIONS", {}).get("transaction_mode")
                return {
                    "version": f"SQLite {version}",
                    "settings": f"journal_mode={journal}, synchronous={sync}, "
                    f"transaction_mode={mode}",
                }
            if self.vendor == "mysql":
                return mysql_facts(cursor)
            cursor.execute("SHOW server_version")
            version = cursor.fetchone()[0]
            settings = []
            for name in ("synchronous_commit", "fsync", "shared_buffers"):
                cursor.execute(f"SHOW {name}")
                settings.append(f"{name}={cursor.fetchone()[0]}")
            return {"version": f"PostgreSQL {version}", "settings": ", ".join(settings)}

    def reset(self) -> None:
        """Empty the job tables, so each measurement starts from the same state."""
        with self.connection.cursor() as cursor:
            if self.vendor == "postgres":
                # CASCADE: the tables that reference jobs (client requests) go too.
                cursor.execute(f"TRUNCATE {self.attempt_table}, {self.job_table} CASCADE")
            elif self.vendor == "mysql":
                # TRUNCATE refuses a table other tables reference, even when they are
                # empty: the references are left unchecked while every table goes.
                from durable_jobs.models import Job

                tables = {rel.related_model._meta.db_table for rel in Job._meta.related_objects}
                quote = self.connection.ops.quote_name
                cursor.execute("SET FOREIGN_KEY_CHECKS = 0")
                try:
                    for table in [*sorted(tables), Job._meta.db_table]:
                        cursor.execute(f"TRUNCATE TABLE {quote(table)}")
                finally:
                    cursor.execute("SET FOREIGN_KEY_CHECKS = 1")
            else:
                cursor.execute(f"DELETE FROM {self.attempt_table}")
                cursor.execute(f"DELETE FROM {self.job_table}")
                cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def analyze(self) -> None:
        with self.connection.cursor() as cursor:
            if self.vendor == "mysql":
                cursor.execute(f"ANALYZE TABLE {self.job_table}")
                cursor.fetchall()
            else:
                cursor.execute(f"ANALYZE {self.job_table}")

    def commits(self) -> int | None:
        """PostgreSQL: transactions committed in this database so far (None on SQLite).

        Backends report their counts when they exit or at most every second, so callers
        read this a moment after the connections they measure have closed.
        """
        if self.vendor != "postgres":
            return None
        with self.connection.cursor() as cursor:
            cursor.execute(
                "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
            )
            return int(cursor.fetchone()[0])

    def commits_since(self, before: int | None, jobs: int) -> float | None:
        if before is None:
            return None
        time.sleep(1.5)
        after = self.commits()
        assert after is not None
        return (after - before) / jobs

    # -- workers ----------------------------------------------------------------------------

    def start_worker(
        self, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        index = len(self.workers)
        logfile = open(self.logdir / f"worker-{index}.log", "wb")  # noqa: SIM115
        command = [
            sys.executable,
            str(BENCH_DIR / "manage.py"),
            "runworker",
            "--queues",
            f"default:{self.options.concurrency}",
            *args,
        ]
        process = subprocess.Popen(
            command,
            cwd=harness.REPO,
            env=bench_env(self.vendor, self.options, **(env or {})),
            stdin=subprocess.DEVNULL,
            stdout=logfile,
            stderr=subprocess.STDOUT,
        )
        logfile.close()
        process.logfile = self.logdir / f"worker-{index}.log"  # type: ignore[attr-defined]
        self.workers.append(process)
        return process

    def worker_log(self, process: subprocess.Popen[bytes]) -> str:
        try:
            text = process.logfile.read_text(errors="replace")  # type: ignore[attr-defined]
        except OSError:
            return ""
        return text[-3000:]

    def stop_workers(self) -> None:
        """SIGTERM (a graceful stop), then SIGKILL whatever is still running after 15 s."""
        for process in self.workers:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 15
        for process in self.workers:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        self.workers.clear()

    # -- 1 and 2: enqueue -------------------------------------------------------------------

    def enqueue_single(self, count: int) -> float:
        """Enqueue ``count`` no-op jobs, each in its own transaction; return the seconds taken."""
        from benchmarks.benchapp.jobs import noop

        started = time.perf_counter()
        for i in range(count):
            noop.delay(n=i)
        return time.perf_counter() - started

    def enqueue_bulk(self, count: int) -> float:
        """Enqueue ``count`` no-op jobs, BULK_BATCH per transaction; return the seconds taken."""
        from django.db import transaction

        from benchmarks.benchapp.jobs import noop

        started = time.perf_counter()
        done = 0
        while done < count:
            batch = min(BULK_BATCH, count - done)
            with transaction.atomic():
                for i in range(done, done + batch):
                    noop.delay(n=i)
            done += batch
        return time.perf_counter() - started

    def enqueue_many(self, count: int) -> float:
        """Enqueue ``count`` no-op jobs with one ``enqueue_many()`` call (one transaction);
        return the seconds taken, preparing the jobs (argument checks) included."""
        import durable_jobs
        from benchmarks.benchapp.jobs import noop

        started = time.perf_counter()
        jobs = durable_jobs.enqueue_many([noop.prepare(n=i) for i in range(count)])
        seconds = time.perf_counter() - started
        if len(jobs) != count or any(job.pk is None for job in jobs):
            raise RuntimeError(f"enqueue_many returned {len(jobs)} jobs for {count}")
        return seconds

    def rows_per_insert(self) -> int:
        """Rows per multi-row INSERT that ``enqueue_many`` writes on this database."""
        from django.db import connection

        from durable_jobs.db import engine_for

        return engine_for(connection.alias).rows_per_insert()

    # -- 3: drain ----------------------------------------------------------------------------

    def drain(
        self, jobs: int, workers: int, *, after_id: int = 0, timeout: float | None = None
    ) -> dict[str, Any]:
        """Drain the ``jobs`` waiting jobs (those with ids above ``after_id``: older rows
        may be in the table) with ``workers`` ``runworker --burst`` processes, reading
        the done count every ``cpu.POLL_SECONDS`` meanwhile, as the peers' drains do,
        for the CPU figures (``cpu.DrainMeter``)."""
        from django.db.models import Count, Max, Min

        from durable_jobs.models import Attempt, Job

        if timeout is None:
            timeout = max(120.0, jobs / 10)
        done = Job.objects.filter(pk__gt=after_id, state="completed")
        commits_before = self.commits()
        meter = cpu.DrainMeter(
            cpu.tree(lambda: [process.pid for process in self.workers]), cpu.server(self.vendor)
        )
        with meter:
            started = time.time()
            processes = [self.start_worker("--burst") for _ in range(workers)]
            deadline = time.monotonic() + timeout
            error = None
            meter.record(done.count())
            while not wait_all(processes, cpu.POLL_SECONDS):
                meter.record(done.count())
                if time.monotonic() > deadline:
                    error = f"timed out after {timeout:g}s"
                    break
            exited = time.time()
            meter.record(done.count())
            for process in processes:
                if error is None and process.returncode != 0:
                    error = (
                        f"runworker exited with {process.returncode}: {self.worker_log(process)}"
                    )
            self.stop_workers()
        stats = done.aggregate(n=Count("id"), last=Max("finished_at"), first=Min("attempted_at"))
        attempts = Attempt.objects.filter(job_id__gt=after_id).count()
        commits_per_job = self.commits_since(commits_before, jobs)
        completed = stats["n"]
        if error is None and completed != jobs:
            error = f"{completed} of {jobs} jobs completed"
        if error is not None:
            return {"workers": workers, "jobs": jobs, "error": error}
        last = stats["last"].timestamp()
        first = stats["first"].timestamp()
        return {
            "workers": workers,
            "jobs": jobs,
            "attempts": attempts,
            "to_last_finish_s": last - started,
            "rate": jobs / (last - started),
            "startup_s": first - started,
            "steady_rate": jobs / (last - first),
            "wall_s": exited - started,
            "wall_rate": jobs / (exited - started),
            "commits_per_job": commits_per_job,
            **meter.figures(jobs),
        }

    # -- 4: pickup latency --------------------------------------------------------------------

    def pickup_latency(self, count: int, poll_interval: float) -> dict[str, Any]:
        from benchmarks.benchapp.jobs import record_start
        from durable_jobs.models import Job, Node

        self.reset()
        process = self.start_worker(env={"DURABLE_JOBS_BENCH_POLL_INTERVAL": str(poll_interval)})

        def alive() -> bool:
            if process.poll() is not None:
                raise RuntimeError(f"runworker exited early: {self.worker_log(process)}")
            return True

        try:
            wait_until(lambda: alive() and Node.objects.exists(), 60, "the worker to register")
            if self.vendor == "postgres":
                wait_until(lambda: alive() and self._listening(), 60, "the worker to LISTEN")
            # Warm-up jobs (first claim, first handler call), then let the worker go idle.
            warm = [record_start.delay(n=-1 - i).pk for i in range(3)]
            wait_until(
                lambda: (
                    alive()
                    and Job.objects.filter(pk__in=warm, state="completed").count() == len(warm)
                ),
                60,
                "the warm-up jobs",
            )
            time.sleep(0.5)
            committed: dict[int, float] = {}
            for i in range(count):
                job = record_start.delay(n=i)  # autocommit: committed when delay() returns
                committed[job.pk] = time.time()
                time.sleep(self.rng.uniform(*LATENCY_SPACING))
            wait_until(
                lambda: (
                    alive()
                    and Job.objects.filter(pk__in=list(committed), state="completed").count()
                    == count
                ),
                60,
                "the measured jobs to complete",
                interval=0.1,
            )
        finally:
            self.stop_workers()
        rows = Job.objects.filter(pk__in=list(committed)).values_list(
            "pk", "result", "attempted_at"
        )
        idle_write = self.idle_write_ms(count)
        latencies, to_claim, claim_to_start = [], [], []
        for pk, started, claimed in rows:
            # attempted_at is the time the claim began, on the worker's clock (the same one).
            latencies.append((started - committed[pk]) * 1000)
            to_claim.append((claimed.timestamp() - committed[pk]) * 1000)
            claim_to_start.append((started - claimed.timestamp()) * 1000)
        return {
            "jobs": count,
            "poll_interval": poll_interval,
            "p50_ms": percentile(latencies, 50),
            "p95_ms": percentile(latencies, 95),
            "max_ms": max(latencies),
            "min_ms": min(latencies),
            "to_claim_p50_ms": percentile(to_claim, 50),
            "to_claim_p95_ms": percentile(to_claim, 95),
            "claim_to_start_p50_ms": percentile(claim_to_start, 50),
            "claim_to_start_p95_ms": percentile(claim_to_start, 95),
            "idle_write_p50_ms": percentile(idle_write, 50),
        }

    def idle_write_ms(self, count: int) -> list[float]:
        """What a durable write costs the pickup, on this machine, now: a one-row update
        committed in autocommit, each after the probes' idle spacing (client and server
        asleep in between, as before a claim that picks a job up), in ms."""
        from durable_jobs.models import Job

        pk = Job.objects.values_list("pk", flat=True).first()
        times = []
        with self.connection.cursor() as cursor:
            for _ in range(count):
                time.sleep(self.rng.uniform(*LATENCY_SPACING))
                started = time.perf_counter()
                cursor.execute(
                    f"UPDATE {self.job_table} SET priority = priority WHERE id = %s", [pk]
                )
                times.append((time.perf_counter() - started) * 1000)
        return times

    def _listening(self) -> bool:
        with self.connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND query LIKE 'LISTEN %%'"
            )
            return cursor.fetchone()[0] > 0

    # -- the whole phase ----------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        """All measurements on this database. On PostgreSQL each one is followed at once by
        its raw SQL counterpart, so that both see the same load on a shared machine."""
        options = self.options
        jobs, single, latency_jobs = options.jobs, options.single_jobs, options.latency_jobs
        name = self.vendor
        self.setup()
        out: dict[str, Any] = {"vendor": name, "database": self.database_facts()}
        if self.vendor == "postgres":
            self.raw = RawCeiling(options, self.connection.settings_dict["NAME"])
            raw: dict[str, Any] = {}
            out["raw"] = raw
        try:
            self._measure(out, jobs, single, latency_jobs)
        finally:
            if self.raw is not None:
                self.raw.close()
        return out

    def _measure(self, out: dict[str, Any], jobs: int, single: int, latency_jobs: int) -> None:
        name, raw = self.vendor, self.raw

        # 1. One job per transaction, in rounds (alternating with raw SQL on PostgreSQL).
        from benchmarks.benchapp.jobs import noop

        noop.delay(n=-1)  # warm-up: first connection, first compilation of the query
        self.reset()
        log(f"[{name}] enqueue, 1 per transaction: {single} jobs")
        rounds = 5
        seconds = raw_seconds = 0.0
        for index in range(rounds):
            count = single // rounds + (1 if index < single % rounds else 0)
            seconds += self.enqueue_single(count)
            if raw is not None:
                raw_seconds += raw.enqueue_single(count)
        out["enqueue_single"] = {"jobs": single, "rate": single / seconds}
        log(f"[{name}]   {single / seconds:,.0f} jobs/s")
        if raw is not None:
            out["raw"]["enqueue_single"] = single / raw_seconds
            log(f"[{name}]   raw SQL {single / raw_seconds:,.0f} jobs/s")

        # 2b. enqueue_many: N prepared jobs in one call, in rounds (alternating with raw SQL).
        rows = self.rows_per_insert()
        log(f"[{name}] enqueue_many: {MANY_ROUNDS} x {jobs} jobs ({rows} rows per INSERT)")
        seconds = raw_seconds = 0.0
        for _ in range(MANY_ROUNDS):
            self.reset()
            seconds += self.enqueue_many(jobs)
            if raw is not None:
                raw.reset()
                raw_seconds += raw.enqueue_many(jobs)
        out["enqueue_many"] = {
            "jobs": MANY_ROUNDS * jobs,
            "rate": MANY_ROUNDS * jobs / seconds,
            "rows_per_insert": rows,
        }
        log(f"[{name}]   {MANY_ROUNDS * jobs / seconds:,.0f} jobs/s")
        if raw is not None:
            out["raw"]["enqueue_many"] = MANY_ROUNDS * jobs / raw_seconds
            log(f"[{name}]   raw SQL {MANY_ROUNDS * jobs / raw_seconds:,.0f} jobs/s")

        # 2 and 3. Fill the queue in bulk (measured), then drain it with 1, then 2 workers.
        bulk_seconds = raw_bulk_seconds = 0.0
        out["drain"] = []
        for workers in (1, 2):
            self.reset()
            log(f"[{name}] enqueue, {BULK_BATCH} per transaction: {jobs} jobs")
            seconds = self.enqueue_bulk(jobs)
            bulk_seconds += seconds
            log(f"[{name}]   {jobs / seconds:,.0f} jobs/s")
            if raw is not None:
                raw.reset()
                raw_seconds = raw.enqueue_bulk(jobs)
                raw_bulk_seconds += raw_seconds
                log(f"[{name}]   raw SQL {jobs / raw_seconds:,.0f} jobs/s")
                self.analyze()
                raw.analyze()
            if self.options.only == "enqueue":
                continue
            log(f"[{name}] drain {jobs} no-op jobs with {workers} runworker --burst")
            result = self.drain(jobs, workers)
            out["drain"].append(result)
            log(f"[{name}]   {result.get('rate', 0):,.0f} jobs/s {result.get('error', '')}")
            if raw is not None:
                commits_before = self.commits()
                raw_result = raw.drain(jobs, workers)
                raw_result["commits_per_job"] = self.commits_since(commits_before, jobs)
                out["raw"][f"drain_{workers}"] = raw_result
                log(f"[{name}]   raw SQL {raw_result.get('rate', 0):,.0f} jobs/s")
        out["enqueue_bulk"] = {"jobs": 2 * jobs, "rate": 2 * jobs / bulk_seconds}
        if raw is not None:
            out["raw"]["enqueue_bulk"] = 2 * jobs / raw_bulk_seconds
        if self.options.only == "enqueue":
            return

        # 4. Pickup latency.
        polls = [1.0] if self.vendor == "postgres" else [1.0, SQLITE_FAST_POLL]
        out["latency"] = []
        for poll in polls:
            log(f"[{name}] pickup latency, POLL_INTERVAL={poll:g}: {latency_jobs} jobs")
            result = self.pickup_latency(latency_jobs, poll)
            out["latency"].append(result)
            log(f"[{name}]   p50 {result['p50_ms']:.1f} ms, p95 {result['p95_ms']:.1f} ms")


#: Server settings reported with MySQL and MariaDB figures: durability of a commit, the
#: buffer pool, and the isolation level connections get unless they ask for another.
MYSQL_SETTINGS = (
    "innodb_flush_log_at_trx_commit",
    "sync_binlog",
    "log_bin",
    "innodb_buffer_pool_size",
    "transaction_isolation",
)


def mysql_facts(cursor: Any) -> dict[str, str]:
    """The server's product and version, and :data:`MYSQL_SETTINGS`, through ``cursor``
    (DB-API, on any database of the server)."""
    cursor.execute("SELECT VERSION()")
    version = cursor.fetchone()[0]
    settings = []
    for name in MYSQL_SETTINGS:
        cursor.execute("SHOW GLOBAL VARIABLES LIKE %s", [name])
        row = cursor.fetchone()
        if row is None and name == "transaction_isolation":  # MariaDB before 11.1
            cursor.execute("SHOW GLOBAL VARIABLES LIKE %s", ["tx_isolation"])
            row = cursor.fetchone()
        if row is not None:
            value = row[1]
            if name == "innodb_buffer_pool_size" and str(value).isdigit():
                value = f"{int(value) // 1024**2}MB"
            settings.append(f"{name}={value}")
    label = harness.mysql_server_label(version)
    return {"version": f"{label} {version}", "settings": ", ".join(settings)}


def run_phase(options: argparse.Namespace) -> int:
    return harness.serve_phase(lambda: Phase(options))


# ================================================================================================
# Parent: databases, phases, the report
# ================================================================================================


def run_database(vendor: str, options: argparse.Namespace) -> dict[str, Any]:
    tmpdir = None
    created = False
    try:
        if vendor == "sqlite":
            tmpdir = tempfile.mkdtemp(prefix="durable_jobs_bench_")
            options.sqlite_path = str(Path(tmpdir) / "bench.sqlite3")
        else:
            harness.create_postgres_database(options, replace=False)
            created = True
        command = [sys.executable, str(Path(__file__).resolve()), "--phase", vendor]
        command += ["--jobs", str(options.jobs), "--single-jobs", str(options.single_jobs)]
        command += ["--latency-jobs", str(options.latency_jobs)]
        command += ["--concurrency", str(options.concurrency)]
        # The phase's raw SQL ceiling and its workers connect with these.
        command += harness.postgres_argv(options)
        if options.only:
            command += ["--only", options.only]
        return harness.run_phase_process(
            command, vendor=vendor, env=bench_env(vendor, options), timeout=options.timeout
        )
    finally:
        if tmpdir is not None:
            shutil.rmtree(tmpdir, ignore_errors=True)
        if created:
            harness.drop_postgres_database(options)


def machine_facts(results: dict[str, dict[str, Any]]) -> list[tuple[str, str]]:
    facts = [
        harness.cpu_fact(),
        ("Load average (1, 5, 15 min) at the end of the run", harness.load_average()),
        *harness.software_facts(),
    ]
    for vendor in ("postgres", "sqlite"):
        if vendor in results:
            database = results[vendor]["database"]
            product, version = database["version"].split(" ", 1)
            facts.append((product, f"{version} ({database['settings']})"))
    if "sqlite" not in results:
        facts.append(("SQLite", sqlite3.sqlite_version))
    return facts


def render(results: dict[str, dict[str, Any]], options: argparse.Namespace, argv: list[str]) -> str:
    sqlite_r, pg = results.get("sqlite"), results.get("postgres")
    raw = (pg or {}).get("raw", {})
    jobs = options.jobs
    enqueue_only = options.only == "enqueue"

    def rate(value: float | None) -> str:
        return NONE if value is None else f"{value:,.0f}"

    def ratio(value: float | None, ceiling: float | None) -> str:
        if value is None or not ceiling:
            return NONE
        return f"{value / ceiling:.2f}"

    def drain(result: dict[str, Any] | None, workers: int, key: str = "rate") -> float | None:
        if result is None:
            return None
        entry = result["drain"][workers - 1]
        return entry.get(key)

    def drain_cell(result: dict[str, Any] | None, workers: int) -> str:
        if result is None:
            return NONE
        entry = result["drain"][workers - 1]
        return f"failed: {entry['error'][:80]}" if "error" in entry else rate(entry["rate"])

    def raw_rate(key: str) -> float | None:
        value = raw.get(key)
        if isinstance(value, dict):
            return value.get("rate")
        return value

    def latency(result: dict[str, Any] | None, poll: float) -> str:
        if result is None:
            return NONE
        for entry in result["latency"]:
            if entry["poll_interval"] == poll:
                return f"{entry['p50_ms']:.0f} / {entry['p95_ms']:.0f} / {entry['max_ms']:.0f}"
        return NONE

    def per_job(value: float | None) -> str:
        return NONE if value is None else f"{value:.2f}"

    def enq(result: dict[str, Any] | None, key: str) -> float | None:
        return None if result is None else result[key]["rate"]

    def rows_per_insert(result: dict[str, Any] | None) -> str:
        return NONE if result is None else str(result["enqueue_many"]["rows_per_insert"])

    lines = harness.report_heading("run.py", argv, machine_facts(results))
    lines.append("")
    lines.append("| Measurement | SQLite | PostgreSQL | PostgreSQL, raw SQL | PostgreSQL ÷ raw |")
    lines.append("| --- | ---: | ---: | ---: | ---: |")
    rows = [
        (
            "Enqueue, 1 job per transaction (jobs/s)",
            rate(enq(sqlite_r, "enqueue_single")),
            rate(enq(pg, "enqueue_single")),
            raw_rate("enqueue_single"),
            enq(pg, "enqueue_single"),
        ),
        (
            f"Enqueue, {BULK_BATCH:,} jobs per transaction (jobs/s)",
            rate(enq(sqlite_r, "enqueue_bulk")),
            rate(enq(pg, "enqueue_bulk")),
            raw_rate("enqueue_bulk"),
            enq(pg, "enqueue_bulk"),
        ),
        (
            f"Enqueue, `enqueue_many()` of {jobs:,} jobs, 1 transaction (jobs/s)",
            rate(enq(sqlite_r, "enqueue_many")),
            rate(enq(pg, "enqueue_many")),
            raw_rate("enqueue_many"),
            enq(pg, "enqueue_many"),
        ),
    ]
    if not enqueue_only:
        rows += [
            (
                f"Drain {jobs:,} no-op jobs, 1 worker process (jobs/s)",
                drain_cell(sqlite_r, 1),
                drain_cell(pg, 1),
                raw_rate("drain_1"),
                drain(pg, 1),
            ),
            (
                f"Drain {jobs:,} no-op jobs, 2 worker processes (jobs/s)",
                drain_cell(sqlite_r, 2),
                drain_cell(pg, 2),
                raw_rate("drain_2"),
                drain(pg, 2),
            ),
        ]
    for label, sqlite_cell, pg_cell, ceiling, pg_value in rows:
        cells = [label, sqlite_cell, pg_cell, rate(ceiling), ratio(pg_value, ceiling)]
        lines.append("| " + " | ".join(cells) + " |")
    if enqueue_only:
        lines.append("")
        lines.append(enqueue_many_note(sqlite_r, pg, rows_per_insert))
        return "\n".join(lines) + "\n"
    lines.append(
        "| Pickup latency, idle worker, p50 / p95 / max (ms), POLL_INTERVAL=1 (default) | "
        f"{latency(sqlite_r, 1.0)} | {latency(pg, 1.0)} | {NONE} | {NONE} |"
    )
    if sqlite_r is not None:
        lines.append(
            "| Pickup latency, idle worker, p50 / p95 / max (ms), "
            f"POLL_INTERVAL={SQLITE_FAST_POLL:g} | {latency(sqlite_r, SQLITE_FAST_POLL)} "
            f"| {NONE} | {NONE} | {NONE} |"
        )
    lines.append("")
    lines.append(
        f"Drains in detail ({options.concurrency} threads per worker process; times in seconds "
        "from starting the processes):"
    )
    lines.append("")
    lines.append(
        "| Database | Processes | First claim (s) | Last finish (s) | Processes exited (s) "
        "| jobs/s to last finish | jobs/s first claim → last finish | jobs/s wall | Attempts "
        "| Transactions per job |"
    )
    lines.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for vendor, label in (("sqlite", "SQLite"), ("postgres", "PostgreSQL")):
        if vendor not in results:
            continue
        for entry in results[vendor]["drain"]:
            if "error" in entry:
                lines.append(
                    f"| {label} | {entry['workers']} | failed: {entry['error'][:120]} "
                    "| | | | | | | |"
                )
                continue
            lines.append(
                f"| {label} | {entry['workers']} | {entry['startup_s']:.2f} "
                f"| {entry['to_last_finish_s']:.2f} | {entry['wall_s']:.2f} "
                f"| {rate(entry['rate'])} | {rate(entry['steady_rate'])} "
                f"| {rate(entry['wall_rate'])} | {entry['attempts']:,} "
                f"| {per_job(entry.get('commits_per_job'))} |"
            )
    lines.append("")
    lines.append(
        "Pickup latency in two parts, p50 / p95 (ms): from the enqueue's commit to the start "
        "of the claim that took the job (wake-up), and from there to the handler's start "
        "(claim transaction and hand-over to a thread):"
    )
    lines.append("")
    lines.append("| Database | POLL_INTERVAL | Commit → claim | Claim → handler start |")
    lines.append("| --- | ---: | ---: | ---: |")
    for vendor, label in (("sqlite", "SQLite"), ("postgres", "PostgreSQL")):
        for entry in results.get(vendor, {}).get("latency", []):
            lines.append(
                f"| {label} | {entry['poll_interval']:g} "
                f"| {entry['to_claim_p50_ms']:.0f} / {entry['to_claim_p95_ms']:.0f} "
                f"| {entry['claim_to_start_p50_ms']:.0f} / {entry['claim_to_start_p95_ms']:.0f} |"
            )
    lines.append("")
    lines.append(enqueue_many_note(sqlite_r, pg, rows_per_insert))
    if raw:
        lines.append("")
        lines.append(
            "Raw SQL drain, for comparison with the middle columns above (no process start): "
            + ", ".join(
                f"{n} connection{'s' if n > 1 else ''} {rate(raw_rate(f'drain_{n}'))} jobs/s "
                f"({per_job(raw.get(f'drain_{n}', {}).get('commits_per_job'))} "
                "transactions per job)"
                for n in (1, 2)
            )
            + "."
        )
    return "\n".join(lines) + "\n"


def enqueue_many_note(
    sqlite_r: dict[str, Any] | None, pg: dict[str, Any] | None, rows_per_insert: Any
) -> str:
    return (
        f"`enqueue_many()`: {MANY_ROUNDS} rounds of one call each, the `.prepare()` calls "
        "included; it writes multi-row `INSERT ... ON CONFLICT DO NOTHING` statements of "
        f"{rows_per_insert(sqlite_r)} rows on SQLite (Django's limit of 999 parameters per "
        f"statement) and {rows_per_insert(pg)} rows on PostgreSQL. Its raw SQL counterpart "
        f"inserts the same number of rows into the minimal table in one transaction, "
        f"{RAW_ROWS_PER_INSERT} rows per `INSERT`."
    )


def write_report(path: Path, block: str, *, enqueue_only: bool = False) -> None:
    """Replace the generated block of ``path`` (between the markers), or write a new page.

    ``--only enqueue`` results go between their own markers, so that they never replace
    a full run's results; without those markers they are appended to the page.
    """
    markers = ENQUEUE_MARKERS if enqueue_only else MARKERS
    text = path.read_text() if path.exists() else ""
    replaced = markers.replace_in(text, block)
    if replaced is not None:
        text = replaced
    elif text and enqueue_only:
        text = text.rstrip("\n") + "\n\n## Enqueue only\n\n" + markers.wrap(block) + "\n"
    else:
        text = "# Benchmarks\n\n## Results\n\n" + markers.wrap(block) + "\n"
    path.write_text(text)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Benchmark durable_jobs: enqueue rate, drain throughput, pickup latency.",
    )
    parser.add_argument(
        "--db",
        choices=["sqlite", "postgres", "both"],
        default="both",
        help="Databases to measure (default both).",
    )
    parser.add_argument(
        "--jobs", type=int, default=None, help="Jobs per drain (default 10000; 1000 with --quick)."
    )
    parser.add_argument("--quick", action="store_true", help="Smaller runs, for a quick look.")
    parser.add_argument(
        "--only",
        choices=["enqueue"],
        default=None,
        help="Measure only this part: 'enqueue' (1 per transaction, 1,000 per transaction, "
        "enqueue_many), with no worker processes.",
    )
    parser.add_argument(
        "--write", type=Path, default=None, help="Also write the results into this Markdown file."
    )
    parser.add_argument(
        "--concurrency", type=int, default=10, help="Threads per worker process (default 10)."
    )
    harness.add_postgres_arguments(
        parser,
        dbname="durable_jobs_bench",
        dbname_help="Database to create for the run and drop afterwards (must not exist).",
    )
    parser.add_argument(
        "--timeout", type=float, default=1800, help="Seconds allowed per database (default 1800)."
    )
    # Internal: one database's measurements, in a child process.
    parser.add_argument("--phase", choices=["sqlite", "postgres"], help=argparse.SUPPRESS)
    parser.add_argument("--single-jobs", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--latency-jobs", type=int, default=None, help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.jobs is None:
        options.jobs = 1000 if options.quick else 10_000
    if options.jobs < 1 or options.concurrency < 1:
        parser.error("--jobs and --concurrency must be at least 1")
    if options.single_jobs is None:
        options.single_jobs = max(100, options.jobs // 5)
    if options.latency_jobs is None:
        options.latency_jobs = 50 if options.quick else 200
    return options


def main(argv: list[str]) -> int:
    options = parse_args(argv)
    if options.phase:
        return run_phase(options)
    signal.signal(signal.SIGTERM, harness.raise_system_exit)
    harness.compile_sources()
    vendors = ["sqlite", "postgres"] if options.db == "both" else [options.db]
    results = {vendor: run_database(vendor, options) for vendor in vendors}
    block = render(results, options, argv)
    print(block)
    if options.write is not None:
        write_report(options.write, block, enqueue_only=options.only == "enqueue")
        log(f"wrote {options.write}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
