"""The side of the comparison that runs in ``benchmarks/compare.py``: one adapter per system.

An adapter knows where its system lives (a virtualenv, a PostgreSQL or MariaDB/MySQL
database, or a Redis database number) and runs each measurement as one bounded child process, a
*driver* (see :mod:`benchmarks.peers.driver`), in the system's own virtualenv. Every
adapter has the same interface, :class:`Adapter`'s public methods; what differs
between systems is data (requirements, the driver's module, how the system was run)
and, for pgbench, the methods themselves.

A driver runs in a process group of its own; whatever happens to it (failure,
timeout, Ctrl-C, SIGTERM to compare.py), the group is ended by its pid on the way
out (``harness.run_phase_process``), worker processes included.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from benchmarks import harness
from benchmarks.peers import venvs

#: Seconds allowed per measurement, beyond what its size calls for.
BASE_TIMEOUT = 120.0
#: Slowest drain rate (jobs/s) a drain's timeout allows for.
SLOWEST_DRAIN_RATE = 20.0


@dataclass
class Context:
    """What every adapter shares during one run of compare.py."""

    options: argparse.Namespace
    #: ``time.monotonic()`` by which the whole run must be over (``--timeout``).
    deadline: float
    #: Scratch directory of this run (SQLite files), removed at the end.
    scratch: Path

    def remaining(self) -> float:
        return self.deadline - time.monotonic()


@dataclass
class Adapter:
    """A system as compare.py sees it. Subclasses set the class variables."""

    #: Name on the command line (``--only``) and in the results.
    key: ClassVar[str]
    #: Name in the report.
    label: ClassVar[str]
    #: The virtualenv under benchmarks/.venvs, or None for the repository's own.
    venv: ClassVar[str | None] = None
    #: What is installed into it from PyPI, pinned.
    requirements: ClassVar[tuple[str, ...]] = ()
    #: The driver, run with ``python -m``.
    driver_module: ClassVar[str] = ""
    #: Whether the system gets a PostgreSQL database of its own (``peers_<key>``).
    uses_postgres: ClassVar[bool] = True
    #: Whether it gets a MySQL/MariaDB database of its own instead (``peers_<key>``, on the
    #: ``--mysql-*`` server, utf8mb4).
    uses_mysql: ClassVar[bool] = False
    #: For the report: how the workers ran, what "bulk" is, where a drain's end is read.
    workers_note: ClassVar[str] = ""
    bulk_note: ClassVar[str] = ""
    finish_note: ClassVar[str] = ""

    context: Context
    facts: dict[str, Any] = field(default_factory=dict)
    created_database: bool = False
    set_up: bool = False
    install_error: str = ""

    # -- where the system lives --------------------------------------------------------

    @property
    def options(self) -> argparse.Namespace:
        return self.context.options

    @property
    def dbname(self) -> str:
        return f"peers_{self.key}"

    def database_options(self) -> argparse.Namespace:
        """compare.py's options, with this system's database as ``--pg-dbname`` and
        ``--mysql-dbname``."""
        return argparse.Namespace(
            **{**vars(self.options), "pg_dbname": self.dbname, "mysql_dbname": self.dbname}
        )

    def python(self) -> str:
        return str(venvs.python_of(self.venv)) if self.venv else sys.executable

    def prepare(self) -> None:
        """Create or refresh the system's virtualenv (before any timing starts). A system
        that cannot be installed is reported as such; the others still run."""
        if not self.venv:
            return
        try:
            venvs.ensure(self.venv, self.requirements)
        except (subprocess.SubprocessError, OSError) as exc:
            harness.log(f"[{self.key}] could not be installed: {exc}")
            self.install_error = f"could not be installed from PyPI: {exc}"

    def database_exists(self) -> bool:
        if self.uses_mysql:
            return harness.mysql_database_exists(self.database_options())
        return self.uses_postgres and harness.postgres_database_exists(self.database_options())

    @property
    def where(self) -> str:
        """Where its jobs live, for the report."""
        if self.uses_mysql:
            return f"MariaDB/MySQL database `{self.dbname}`"
        return f"database `{self.dbname}`" if self.uses_postgres else ""

    # -- the interface ------------------------------------------------------------------

    def setup(self) -> dict[str, Any]:
        """Create the system's database and schema; returns the facts for the report."""
        if self.install_error:
            return {"error": self.install_error}
        if self.uses_mysql:
            harness.create_mysql_database(self.database_options(), replace=False)
            self.created_database = True
        elif self.uses_postgres:
            harness.create_postgres_database(self.database_options(), replace=False)
            self.created_database = True
        result = self.call("setup", timeout=BASE_TIMEOUT)
        self.set_up = "error" not in result
        self.facts = result.get("facts", {})
        return result

    def enqueue_one_per_tx(self, count: int) -> dict[str, Any]:
        return self.call("enqueue_single", "--count", str(count), timeout=BASE_TIMEOUT + count / 50)

    def enqueue_bulk(self, count: int) -> dict[str, Any]:
        return self.call("enqueue_bulk", "--count", str(count), timeout=BASE_TIMEOUT + count / 100)

    def drain(self, jobs: int, workers: int) -> dict[str, Any]:
        # The driver gives up waiting a minute before it is killed, so a slow drain
        # still reports how far it got.
        drain_timeout = BASE_TIMEOUT + jobs / SLOWEST_DRAIN_RATE
        return self.call(
            "drain",
            "--jobs",
            str(jobs),
            "--workers",
            str(workers),
            "--drain-timeout",
            f"{min(drain_timeout, max(10.0, self.context.remaining() - 60)):.0f}",
            timeout=drain_timeout + 2 * BASE_TIMEOUT,
        )

    def latency(self, samples: int) -> dict[str, Any]:
        return self.call(
            "latency", "--samples", str(samples), timeout=2 * BASE_TIMEOUT + samples * 0.2
        )

    def teardown(self) -> None:
        """Undo :meth:`setup`: the system's own clean-up, then its database is dropped."""
        try:
            if self.set_up:
                self.call("teardown", timeout=BASE_TIMEOUT, ignore_deadline=True)
        finally:
            if self.created_database:
                if self.uses_mysql:
                    harness.drop_mysql_database(self.database_options())
                else:
                    harness.drop_postgres_database(self.database_options())
                self.created_database = False

    # -- running the driver ------------------------------------------------------------

    def driver_args(self) -> list[str]:
        options = self.database_options()
        return [
            *harness.postgres_argv(options),
            *harness.mysql_argv(options),
            "--database",
            "mysql" if self.uses_mysql else "postgres",
            "--concurrency",
            str(options.concurrency),
            "--redis-url",
            options.redis_url,
            "--seed",
            str(options.seed),
        ]

    def driver_env(self) -> dict[str, str]:
        env = dict(os.environ)
        # Drivers import benchmarks.harness and their own package from the repository;
        # nothing from the repository's virtualenv leaks into a peer's.
        env["PYTHONPATH"] = str(harness.REPO)
        env.pop("DJANGO_SETTINGS_MODULE", None)
        env.pop("VIRTUAL_ENV", None)
        return env

    def call(
        self, operation: str, *args: str, timeout: float, ignore_deadline: bool = False
    ) -> dict[str, Any]:
        """Run one driver operation; a failure or a timeout becomes ``{"error": ...}`` so
        that the other systems are still measured."""
        if not ignore_deadline:
            remaining = self.context.remaining()
            if remaining < 10:
                return {"error": "not run: the run's --timeout was reached"}
            timeout = min(timeout, remaining)
        command = [self.python(), "-m", self.driver_module, operation, *args, *self.driver_args()]
        started = time.monotonic()
        try:
            result = harness.run_phase_process(
                command, vendor=f"{self.key} {operation}", env=self.driver_env(), timeout=timeout
            )
        except SystemExit as exc:
            if not isinstance(exc.code, str):
                raise  # SIGTERM to compare.py (harness.raise_system_exit): stop the run
            harness.log(f"[{self.key}] {operation} failed: {exc}")
            return {"error": str(exc)}
        result["phase_s"] = time.monotonic() - started
        return result
