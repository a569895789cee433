"""The side of the comparison that runs inside a system's own virtualenv.

``benchmarks/compare.py`` runs in the repository's virtualenv and cannot import the
peers: each lives in a virtualenv of its own (see :mod:`benchmarks.peers.venvs`). So
every measurement is one run of a *driver*, ``python -m
benchmarks.peers.<system>_project.driver OPERATION ...`` in the system's virtualenv,
which prints its result as one line of JSON (``harness.print_phase_result``). A
driver is a :class:`Peer` subclass; this module holds what the drivers share: the
command line, how a drain and a pickup latency are measured, and starting and
stopping worker processes.

This module imports only the standard library and ``benchmarks.harness`` (which
imports nothing else at module level), so it loads under any system's virtualenv.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from benchmarks import cpu, harness
from benchmarks.cpu import POLL_SECONDS
from benchmarks.harness import log, percentile

#: Spacing between the enqueues of the pickup latency measurement, in seconds: random,
#: so that it does not beat with a poll interval.
LATENCY_SPACING = (0.05, 0.10)
#: Probe jobs run before the latency measurement, so that nothing is measured cold.
WARM_UP_PROBES = 3
#: Seconds a worker is given to stop on SIGTERM before it is killed.
STOP_GRACE_SECONDS = 15
#: Concurrency of each worker process, where the system has such a setting.
DEFAULT_CONCURRENCY = 10
#: What a drain reports (durable_jobs' phase reports these and a few more).
DRAIN_KEYS = (
    "workers",
    "jobs",
    "rate",
    "to_last_finish_s",
    "startup_s",
    "steady_rate",
    "wall_s",
    "attempts",
    "commits_per_job",
    "worker_cpu_per_1000",
    "db_cpu_per_1000",
    "worker_cpu_s",
    "db_cpu_s",
    "cpu_window_s",
)


class NotSupported(Exception):
    """The system has no such operation (for example no bulk enqueue API)."""


def wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(POLL_SECONDS / 2)


class Workers:
    """Worker processes started by a driver, each logging to a file of its own.

    They stay in the driver's process group, so that the parent, which ends the whole
    group after each operation, also ends any worker a failed driver left behind.
    """

    def __init__(self) -> None:
        self.logdir = Path(tempfile.mkdtemp(prefix="peers_worker_logs_"))
        self.processes: list[subprocess.Popen[bytes]] = []
        self.logs: list[Path] = []

    def start(self, argv: Sequence[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        path = self.logdir / f"worker-{len(self.processes)}.log"
        with path.open("wb") as logfile:
            process = subprocess.Popen(
                list(argv),
                cwd=harness.REPO,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=logfile,
                stderr=subprocess.STDOUT,
            )
        self.processes.append(process)
        self.logs.append(path)
        return process

    def pids(self) -> list[int]:
        """The running workers' pids: the roots of a drain's "worker processes" group."""
        return [process.pid for process in self.processes]

    def check_alive(self) -> None:
        """Raise if a worker has exited: a drain or a latency run would wait in vain."""
        for process, path in zip(self.processes, self.logs, strict=True):
            if process.poll() is not None:
                raise RuntimeError(f"worker exited with {process.returncode}: {self.tail(path)}")

    @staticmethod
    def tail(path: Path, chars: int = 1500) -> str:
        try:
            return path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        """SIGTERM each worker by pid (a graceful stop), then SIGKILL what is left."""
        for process in self.processes:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        for process in self.processes:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        self.processes.clear()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.logdir, ignore_errors=True)


class Peer:
    """One system, seen from inside its virtualenv. Subclasses fill in the hooks; the
    ``run_*`` methods are the measurements, the same for every system."""

    def __init__(self, options: argparse.Namespace) -> None:
        self.options = options
        self.workers = Workers()

    # -- hooks --------------------------------------------------------------------------

    def setup(self) -> None:
        """Create the system's schema (run once, before any measurement)."""

    def teardown(self) -> None:
        """Remove what :meth:`setup` made outside the database the parent drops."""

    def facts(self) -> dict[str, Any]:
        """Installed versions and settings worth printing with the results."""
        return {}

    def reset(self) -> None:
        """Forget every job, so that each measurement starts from an empty queue."""
        raise NotImplementedError

    def enqueue_one(self, n: int) -> None:
        """Enqueue one no-op job in its own transaction (autocommit)."""
        raise NotImplementedError

    def enqueue_bulk(self, count: int) -> None:
        """Enqueue ``count`` no-op jobs with the system's batch API; NotSupported if none."""
        raise NotSupported

    def prefill(self, count: int) -> None:
        """Queue ``count`` no-op jobs before a drain, as fast as the system allows."""
        try:
            self.enqueue_bulk(count)
        except NotSupported:
            for n in range(count):
                self.enqueue_one(n)

    def before_drain(self) -> None:
        """Called after the queue is filled and before the workers start (e.g. ANALYZE)."""

    def worker_commands(self, workers: int) -> list[list[str]]:
        """The commands that start ``workers`` worker processes."""
        raise NotImplementedError

    def worker_env(self, workers: int) -> dict[str, str]:
        """The environment of the worker processes: the repository importable, and the
        concurrency for the settings that read it."""
        env = dict(os.environ)
        env["PYTHONPATH"] = str(harness.REPO)
        env["PEERS_CONCURRENCY"] = str(self.options.concurrency)
        return env

    def done_count(self) -> int:
        """How many jobs have finished, from the system's own stored state."""
        raise NotImplementedError

    def database_server(self) -> str:
        """Which server holds the jobs (a key of ``cpu.SERVERS``): its processes' CPU is
        a drain's database figure."""
        return self.options.database

    def drain_window(self) -> tuple[float | None, float | None]:
        """(first job start, last job finish) as Unix times, from the stored state;
        None where the system does not store it."""
        raise NotImplementedError

    def enqueue_probe(self, n: int) -> Any:
        """Enqueue (autocommit) a job whose handler records ``time.time()`` as it starts;
        return a key for :meth:`probe_starts`."""
        raise NotImplementedError

    def probe_starts(self, keys: Sequence[Any]) -> dict[Any, float]:
        """The recorded start times of the probes that have run, by key."""
        raise NotImplementedError

    # -- measurements -------------------------------------------------------------------

    def run_enqueue_single(self, count: int) -> dict[str, Any]:
        self.enqueue_one(-1)  # warm-up: first connection, first statement
        self.reset()
        started = time.perf_counter()
        for n in range(count):
            self.enqueue_one(n)
        seconds = time.perf_counter() - started
        return {"jobs": count, "seconds": seconds, "rate": count / seconds}

    def run_enqueue_bulk(self, count: int) -> dict[str, Any]:
        self.enqueue_bulk(1)  # warm-up, and NotSupported before any timing
        self.reset()
        started = time.perf_counter()
        self.enqueue_bulk(count)
        seconds = time.perf_counter() - started
        self.check_count(count)
        return {"jobs": count, "seconds": seconds, "rate": count / seconds}

    def check_count(self, count: int) -> None:
        """Subclasses may check that ``count`` jobs are queued; the default trusts the API."""

    def run_drain(self, jobs: int, workers: int, timeout: float) -> dict[str, Any]:
        """Fill the queue with ``jobs`` no-op jobs, start ``workers`` worker processes,
        and wait until every job is done. The rate runs from starting the processes
        to the last finish the system stored, so it includes their start-up. The CPU
        figures are ``cpu.DrainMeter``'s, from the done counts polled meanwhile."""
        self.reset()
        self.prefill(jobs)
        self.before_drain()
        env = self.worker_env(workers)
        meter = cpu.DrainMeter(cpu.tree(self.workers.pids), cpu.server(self.database_server()))
        with meter:
            started = time.time()
            for argv in self.worker_commands(workers):
                self.workers.start(argv, env)
            deadline = time.monotonic() + timeout
            done = 0
            error = None
            try:
                while (done := self.done_count()) < jobs:
                    meter.record(done)
                    self.workers.check_alive()
                    if time.monotonic() > deadline:
                        error = f"timed out after {timeout:g}s with {done:,} of {jobs:,} jobs done"
                        break
                    time.sleep(POLL_SECONDS)
                meter.record(done)
            except RuntimeError as exc:
                error = str(exc)
            seen_done = time.time()
            self.workers.stop()
            exited = time.time()
        result: dict[str, Any] = {"workers": workers, "jobs": jobs}
        if error is not None:
            elapsed = seen_done - started
            result.update(error=error, done=done, partial_rate=done / elapsed if elapsed else 0)
            return result
        first, last = self.drain_window()
        if last is None:  # no stored finish time: the poll that saw the last job done
            last = seen_done
        result.update(
            rate=jobs / (last - started),
            to_last_finish_s=last - started,
            startup_s=None if first is None else first - started,
            steady_rate=None if first is None else jobs / (last - first),
            wall_s=exited - started,
            **meter.figures(jobs),
        )
        return result

    def run_latency(self, samples: int, seed: int) -> dict[str, Any]:
        """Pickup latency of one idle worker: probes enqueued one at a time, randomly
        50-100 ms apart; each one's latency is its handler's start time minus the time
        its enqueue returned (committed)."""
        rng = random.Random(seed)
        self.reset()
        self.workers.start(self.worker_commands(1)[0], self.worker_env(1))

        def all_started(keys: Sequence[Any]) -> Callable[[], bool]:
            def check() -> bool:
                self.workers.check_alive()
                return len(self.probe_starts(keys)) == len(keys)

            return check

        warm = [self.enqueue_probe(-1 - i) for i in range(WARM_UP_PROBES)]
        wait_until(all_started(warm), 120, "the warm-up probes")
        time.sleep(1.0)  # idle: whatever the worker does between jobs has settled
        committed: dict[Any, float] = {}
        for n in range(samples):
            key = self.enqueue_probe(n)
            committed[key] = time.time()
            time.sleep(rng.uniform(*LATENCY_SPACING))
        keys = list(committed)
        wait_until(all_started(keys), 120, "the probes to start")
        self.workers.stop()
        starts = self.probe_starts(keys)
        latencies = [(starts[key] - committed[key]) * 1000 for key in keys]
        return latency_summary(latencies)

    # -- the command line ---------------------------------------------------------------

    def dispatch(self, operation: str) -> dict[str, Any]:
        options = self.options
        if operation == "setup":
            self.setup()
            return {"facts": self.facts()}
        if operation == "teardown":
            self.teardown()
            return {}
        if operation == "enqueue_single":
            return self.run_enqueue_single(options.count)
        if operation == "enqueue_bulk":
            try:
                return self.run_enqueue_bulk(options.count)
            except NotSupported as exc:
                return {"not_supported": str(exc) or "no batch API"}
        if operation == "drain":
            return self.run_drain(options.jobs, options.workers, options.drain_timeout)
        if operation == "latency":
            return self.run_latency(options.samples, options.seed)
        raise SystemExit(f"unknown operation {operation!r}")

    def close(self) -> None:
        self.workers.close()


class DjangoPeer(Peer):
    """A Django-based peer on PostgreSQL, or on MySQL/MariaDB with ``--database mysql``
    (``settings`` names its project): its migrations, its tables emptied between
    measurements, and, having no batch API, a bulk enqueue of single enqueues in one
    transaction."""

    settings = ""
    #: Distributions whose versions are printed with the results (the database driver,
    #: psycopg or mysqlclient, is added).
    packages: tuple[str, ...] = ()

    def __init__(self, options: argparse.Namespace) -> None:
        super().__init__(options)
        export_postgres(options)
        os.environ["DJANGO_SETTINGS_MODULE"] = self.settings
        import django

        django.setup()
        from django.db import connection

        self.connection = connection

    def tables(self) -> Sequence[str]:
        """The system's job tables, the one its workers poll first."""
        raise NotImplementedError

    def setup(self) -> None:
        from django.core.management import call_command

        call_command("migrate", verbosity=0, interactive=False)

    def facts(self) -> dict[str, Any]:
        from importlib import metadata

        driver = "mysqlclient" if self.connection.vendor == "mysql" else "psycopg"
        names = (*self.packages, driver)
        return {"versions": {name: metadata.version(name) for name in names}}

    def reset(self) -> None:
        with self.connection.cursor() as cursor:
            if self.connection.vendor == "mysql":
                # One table per TRUNCATE there.
                for table in self.tables():
                    cursor.execute(f"TRUNCATE TABLE {table}")
            else:
                cursor.execute(f"TRUNCATE {', '.join(self.tables())}")

    def enqueue_bulk(self, count: int) -> None:
        """No batch API: ``count`` single enqueues in one transaction."""
        from django.db import transaction

        with transaction.atomic():
            for n in range(count):
                self.enqueue_one(n)

    def before_drain(self) -> None:
        with self.connection.cursor() as cursor:
            if self.connection.vendor == "mysql":
                cursor.execute(f"ANALYZE TABLE {self.tables()[0]}")
                cursor.fetchall()
            else:
                cursor.execute(f"ANALYZE {self.tables()[0]}")


def export_postgres(options: argparse.Namespace) -> None:
    """Put the ``--pg-*`` and ``--mysql-*`` options, and which of the two servers to use
    (``--database``), into the environment, where the system's settings (read at import,
    in the driver and in its workers alike) find them."""
    os.environ.update(
        PEERS_DATABASE=options.database,
        PEERS_PG_HOST=options.pg_host,
        PEERS_PG_PORT=str(options.pg_port),
        PEERS_PG_USER=options.pg_user,
        PEERS_PG_NAME=options.pg_dbname,
        PEERS_MY_HOST=options.mysql_host,
        PEERS_MY_PORT=str(options.mysql_port),
        PEERS_MY_USER=options.mysql_user,
        PEERS_MY_NAME=options.mysql_dbname,
    )


def postgres_conninfo() -> str:
    """A libpq connection string for the database :func:`export_postgres` named."""
    env = os.environ
    return (
        f"host={env['PEERS_PG_HOST']} port={env['PEERS_PG_PORT']} "
        f"user={env['PEERS_PG_USER']} dbname={env['PEERS_PG_NAME']}"
    )


def django_database() -> dict[str, Any]:
    """``DATABASES["default"]`` for the Django-based systems' settings.

    Persistent connections: both Django-based systems call ``close_old_connections()``
    around every task (and Django-Q2 around every enqueue), which with Django's default
    ``CONN_MAX_AGE = 0`` means a new PostgreSQL connection each time. That is not how
    one would run them for throughput, so they are not measured that way.
    """
    env = os.environ
    if env.get("PEERS_DATABASE") == "mysql":
        return {
            "ENGINE": "django.db.backends.mysql",
            "NAME": env["PEERS_MY_NAME"],
            "HOST": env["PEERS_MY_HOST"],
            "PORT": env["PEERS_MY_PORT"],
            "USER": env["PEERS_MY_USER"],
            "PASSWORD": env.get("MYSQL_PWD", ""),
            "CONN_MAX_AGE": 600,
            # utf8mb4 as for durable_jobs; Django's default isolation level (READ COMMITTED).
            "OPTIONS": {"charset": "utf8mb4"},
        }
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": env["PEERS_PG_NAME"],
        "HOST": env["PEERS_PG_HOST"],
        "PORT": env["PEERS_PG_PORT"],
        "USER": env["PEERS_PG_USER"],
        "PASSWORD": env.get("PGPASSWORD", ""),
        "CONN_MAX_AGE": 600,
    }


def latency_summary(latencies: list[float]) -> dict[str, Any]:
    return {
        "samples": len(latencies),
        "p50_ms": percentile(latencies, 50),
        "p95_ms": percentile(latencies, 95),
        "max_ms": max(latencies),
        "min_ms": min(latencies),
    }


OPERATIONS = ("setup", "teardown", "enqueue_single", "enqueue_bulk", "drain", "latency")


def parser(description: str) -> argparse.ArgumentParser:
    """The arguments every driver takes; :mod:`benchmarks.peers.base` passes them."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("operation", choices=OPERATIONS)
    parser.add_argument("--count", type=int, default=1000, help="Jobs to enqueue.")
    parser.add_argument("--jobs", type=int, default=1000, help="Jobs per drain.")
    parser.add_argument("--workers", type=int, default=1, help="Worker processes.")
    parser.add_argument("--concurrency", type=int, default=DEFAULT_CONCURRENCY)
    parser.add_argument("--samples", type=int, default=100, help="Latency samples.")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--drain-timeout", type=float, default=600.0)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/15")
    parser.add_argument("--sqlite-path", default=None)
    parser.add_argument(
        "--database",
        choices=("postgres", "mysql"),
        default="postgres",
        help="The server of the system's database (--pg-* or --mysql-*).",
    )
    harness.add_postgres_arguments(parser, dbname="", dbname_help="The system's database.")
    harness.add_mysql_arguments(parser, dbname="", dbname_help="The system's database.")
    return parser


def main(factory: Callable[[argparse.Namespace], Peer], argv: Iterable[str] | None = None) -> int:
    """Run one operation and print its result for the parent."""
    options = parser(factory.__doc__ or "").parse_args(
        list(argv) if argv is not None else sys.argv[1:]
    )
    # The parent ends a driver with SIGTERM: unwind, so that ``finally`` stops the workers.
    signal.signal(signal.SIGTERM, harness.raise_system_exit)
    log(f"[{factory.__name__}] {options.operation}")
    peer = None
    try:
        peer = factory(options)
        result = peer.dispatch(options.operation)
    except Exception as exc:
        # Reported as this measurement's result, so the report says what went wrong.
        traceback.print_exc()
        result = {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        if peer is not None:
            peer.close()
    harness.print_phase_result(result)
    return 0
