"""Procrastinate: ``batch_defer`` for bulk, ``procrastinate worker`` processes (async,
``--concurrency``), LISTEN/NOTIFY wake-ups, job events with timestamps."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib import metadata
from typing import Any

from benchmarks.peers import driver


class ProcrastinatePeer(driver.Peer):
    """Procrastinate on PostgreSQL."""

    def __init__(self, options: argparse.Namespace) -> None:
        super().__init__(options)
        driver.export_postgres(options)
        import psycopg

        from benchmarks.peers.procrastinate_project import tasks

        self.tasks = tasks
        # Sync deferring opens a SyncPsycopgConnector behind the app's connector.
        tasks.app.open()
        self.conn = psycopg.connect(driver.postgres_conninfo(), autocommit=True)

    def close(self) -> None:
        super().close()
        self.tasks.app.close()
        self.conn.close()

    def setup(self) -> None:
        self.tasks.app.schema_manager.apply_schema()
        self.conn.execute("CREATE TABLE peers_probe (n integer PRIMARY KEY, started float8)")

    def facts(self) -> dict[str, Any]:
        return {
            "versions": {name: metadata.version(name) for name in ("procrastinate", "psycopg")},
            "concurrency": self.options.concurrency,
            "pool_size": self.tasks.POOL_SIZE,
        }

    def reset(self) -> None:
        self.conn.execute(
            "TRUNCATE procrastinate_events, procrastinate_jobs, procrastinate_workers, "
            "peers_probe CASCADE"
        )

    def enqueue_one(self, n: int) -> None:
        self.tasks.noop.defer(n=n)

    def enqueue_bulk(self, count: int) -> None:
        self.tasks.noop.batch_defer(*({"n": n} for n in range(count)))

    def _row(self, query: str) -> tuple[Any, ...]:
        row = self.conn.execute(query).fetchone()
        assert row is not None  # an aggregate always returns a row
        return tuple(row)

    def check_count(self, count: int) -> None:
        (found,) = self._row("SELECT count(*) FROM procrastinate_jobs")
        if found != count:
            raise RuntimeError(f"batch_defer queued {found} jobs, not {count}")

    def before_drain(self) -> None:
        self.conn.execute("ANALYZE procrastinate_jobs")

    def worker_commands(self, workers: int) -> list[list[str]]:
        command = [
            sys.executable,
            "-m",
            "procrastinate",
            "--app=benchmarks.peers.procrastinate_project.tasks.app",
            "worker",
            f"--concurrency={self.options.concurrency}",
            "--queues=default",
        ]
        return [command for _ in range(workers)]

    def done_count(self) -> int:
        (done,) = self._row("SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'")
        return int(done)

    def drain_window(self) -> tuple[float | None, float | None]:
        first, last = self._row(
            "SELECT extract(epoch FROM min(at) FILTER (WHERE type = 'started')), "
            "extract(epoch FROM max(at) FILTER (WHERE type = 'succeeded')) "
            "FROM procrastinate_events"
        )
        return float(first), float(last)

    def enqueue_probe(self, n: int) -> int:
        self.tasks.probe.defer(n=n)
        return n

    def probe_starts(self, keys: Sequence[Any]) -> dict[Any, float]:
        rows = self.conn.execute(
            "SELECT n, started FROM peers_probe WHERE n = ANY(%s)", (list(keys),)
        ).fetchall()
        return dict(rows)


if __name__ == "__main__":
    sys.exit(driver.main(ProcrastinatePeer))
