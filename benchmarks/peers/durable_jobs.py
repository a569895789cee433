"""durable_jobs itself, on PostgreSQL, SQLite or MariaDB, in the repository's virtualenv.

The measurements are ``benchmarks/run.py``'s own (its ``Phase``), run through
:mod:`benchmarks.peers.durable_jobs_project.driver`, with real ``manage.py runworker``
processes of the benchmark project (``benchmarks/settings.py``).
"""

from __future__ import annotations

import argparse
import shutil
from typing import Any

from benchmarks import run
from benchmarks.peers.base import Adapter


class DurableJobsPostgres(Adapter):
    key = "durable_jobs_pg"
    label = "durable_jobs (PostgreSQL)"
    driver_module = "benchmarks.peers.durable_jobs_project.driver"
    workers_note = (
        "`manage.py runworker --burst --queues default:10` per process (10 threads), "
        "NOTIFY wake-ups, `POLL_INTERVAL` 1 s (the default)"
    )
    bulk_note = "`durable_jobs.enqueue_many()`, one call"
    finish_note = "last `finished_at` of the jobs"
    vendor = "postgres"

    @property
    def dbname(self) -> str:
        return "peers_durable_jobs"

    def phase_options(self) -> argparse.Namespace:
        """Options in the shape ``run.bench_env`` takes, for this database."""
        return self.database_options()

    def driver_env(self) -> dict[str, str]:
        env = super().driver_env()
        env.update(run.bench_env(self.vendor, self.phase_options()))
        return env


class DurableJobsSqlite(DurableJobsPostgres):
    key = "durable_jobs_sqlite"
    label = "durable_jobs (SQLite)"
    uses_postgres = False
    workers_note = (
        "`manage.py runworker --burst --queues default:10` per process (10 threads), "
        "WAL, `transaction_mode` IMMEDIATE, `POLL_INTERVAL` 1 s (the default)"
    )
    vendor = "sqlite"

    @property
    def sqlite_path(self) -> str:
        return str(self.context.scratch / "durable_jobs" / "bench.sqlite3")

    def phase_options(self) -> argparse.Namespace:
        options = self.database_options()
        options.sqlite_path = self.sqlite_path
        return options

    def driver_args(self) -> list[str]:
        return [*super().driver_args(), "--sqlite-path", self.sqlite_path]

    def setup(self) -> dict[str, Any]:
        (self.context.scratch / "durable_jobs").mkdir(parents=True, exist_ok=True)
        return super().setup()

    def teardown(self) -> None:
        shutil.rmtree(self.context.scratch / "durable_jobs", ignore_errors=True)


class DurableJobsMysql(DurableJobsPostgres):
    """durable_jobs on the ``--mysql-*`` server (MariaDB here; MySQL 8 works the same way),
    in a fresh utf8mb4 database of its own, migrated by the driver's set-up."""

    key = "durable_jobs_mysql"
    label = "durable_jobs (MariaDB)"
    uses_postgres = False
    uses_mysql = True
    workers_note = (
        "`manage.py runworker --burst --queues default:10` per process (10 threads); no "
        "LISTEN/NOTIFY there, so an idle worker polls `SELECT MAX(id)` of the job table "
        "every 2-20 ms (backing off), `POLL_INTERVAL` 1 s (the default)"
    )
    vendor = "mysql"

    @property
    def dbname(self) -> str:
        return f"peers_{self.key}"
