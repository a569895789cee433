"""durable_jobs: ``.delay()`` and ``enqueue_many()`` to enqueue, real ``manage.py
runworker`` processes, measured by ``benchmarks/run.py``'s own phase."""

from __future__ import annotations

import argparse
import os
import random
import sys
from importlib import metadata
from typing import Any

from benchmarks import run
from benchmarks.peers import driver

#: POLL_INTERVAL of the latency measurement: the library's default. On PostgreSQL an
#: idle worker is woken by NOTIFY; on SQLite it finds new jobs at its next poll; on
#: MariaDB/MySQL it polls the job table's highest id every few milliseconds.
POLL_INTERVAL = 1.0


class DurableJobsPeer(driver.Peer):
    """durable_jobs on PostgreSQL, on SQLite with --sqlite-path, or on MariaDB/MySQL with
    --database mysql."""

    def __init__(self, options: argparse.Namespace) -> None:
        super().__init__(options)
        if options.sqlite_path:
            vendor = "sqlite"
        else:
            vendor = "mysql" if options.database == "mysql" else "postgres"
        self.vendor = vendor
        phase_options = argparse.Namespace(
            phase=vendor,
            concurrency=options.concurrency,
            pg_host=options.pg_host,
            pg_port=options.pg_port,
            pg_user=options.pg_user,
            pg_dbname=options.pg_dbname,
            mysql_host=options.mysql_host,
            mysql_port=options.mysql_port,
            mysql_user=options.mysql_user,
            mysql_dbname=options.mysql_dbname,
            sqlite_path=options.sqlite_path,
            only=None,
        )
        # The phase configures Django from the environment its workers get too.
        os.environ.update(run.bench_env(vendor, phase_options))
        self.phase = run.Phase(phase_options)
        self.phase.setup()

    def close(self) -> None:
        super().close()
        self.phase.close()

    def facts(self) -> dict[str, Any]:
        driver_package = "mysqlclient" if self.vendor == "mysql" else "psycopg"
        names = ("django-durable-jobs", "Django", driver_package)
        return {
            "versions": {name: metadata.version(name) for name in names},
            "database": self.phase.database_facts(),
            "concurrency": self.options.concurrency,
        }

    def run_enqueue_single(self, count: int) -> dict[str, Any]:
        from benchmarks.benchapp.jobs import noop

        noop.delay(n=-1)  # warm-up: first connection, first compilation of the query
        self.phase.reset()
        seconds = self.phase.enqueue_single(count)
        return {"jobs": count, "seconds": seconds, "rate": count / seconds}

    def run_enqueue_bulk(self, count: int) -> dict[str, Any]:
        self.phase.enqueue_many(1)  # warm-up
        self.phase.reset()
        seconds = self.phase.enqueue_many(count)
        return {"jobs": count, "seconds": seconds, "rate": count / seconds}

    def run_drain(self, jobs: int, workers: int, timeout: float) -> dict[str, Any]:
        self.phase.reset()
        self.phase.enqueue_many(jobs)  # the quickest way to fill the queue
        self.phase.analyze()
        result = self.phase.drain(jobs, workers)
        if "error" in result:
            return result
        return {key: result[key] for key in driver.DRAIN_KEYS if key in result}

    def run_latency(self, samples: int, seed: int) -> dict[str, Any]:
        self.phase.rng = random.Random(seed)
        result = self.phase.pickup_latency(samples, POLL_INTERVAL)
        result["samples"] = result.pop("jobs")
        return result


if __name__ == "__main__":
    sys.exit(driver.main(DurableJobsPeer))
