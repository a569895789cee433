"""Celery on Redis: ``delay()`` to enqueue, ``group(...).apply_async()`` for bulk,
``celery worker --pool threads`` processes; each task's result, with its ``date_done``,
in the Redis result backend."""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
from collections.abc import Sequence
from importlib import metadata
from typing import Any

from benchmarks.peers import driver

#: Set in the benchmark's Redis database, so that it is never mistaken for someone else's.
OWNER_KEY = "peers:owner"
RESULT_PREFIX = "celery-task-meta-"


class CeleryPeer(driver.Peer):
    """Celery on Redis."""

    def __init__(self, options: argparse.Namespace) -> None:
        super().__init__(options)
        os.environ["PEERS_REDIS_URL"] = options.redis_url
        import redis

        from benchmarks.peers.celery_redis_project import tasks

        self.tasks = tasks
        self.redis = redis.Redis.from_url(options.redis_url)

    def close(self) -> None:
        super().close()
        self.redis.close()

    # -- the Redis database -------------------------------------------------------------

    def _claim_database(self) -> None:
        """Empty the benchmark's Redis database, unless it holds data that is not ours."""
        if self.redis.dbsize() and not self.redis.exists(OWNER_KEY):
            raise SystemExit(
                f"Redis database {self.options.redis_url} is not empty and was not filled "
                "by this benchmark: pass --redis-url with a free database number"
            )
        self.redis.flushdb()
        self.redis.set(OWNER_KEY, "benchmarks/compare.py")

    def setup(self) -> None:
        self._claim_database()

    def teardown(self) -> None:
        if self.redis.exists(OWNER_KEY):
            self.redis.flushdb()

    def reset(self) -> None:
        self._claim_database()

    def facts(self) -> dict[str, Any]:
        info = self.redis.info("server")
        config = {
            key: self.redis.config_get(key).get(key)
            for key in ("appendonly", "appendfsync", "save")
        }
        return {
            "versions": {name: metadata.version(name) for name in ("celery", "kombu", "redis")},
            "server": f"Redis {info['redis_version']}",
            "persistence": ", ".join(f"{key}={value!r}" for key, value in config.items()),
            "concurrency": self.options.concurrency,
        }

    # -- jobs ---------------------------------------------------------------------------

    def enqueue_one(self, n: int) -> None:
        self.tasks.noop.delay(n=n)

    def enqueue_bulk(self, count: int) -> None:
        from celery import group

        group(self.tasks.noop.s(n=n) for n in range(count)).apply_async()

    def check_count(self, count: int) -> None:
        if (found := self.redis.llen(self.tasks.QUEUE)) != count:
            raise RuntimeError(f"{found} messages queued, not {count}")

    def worker_commands(self, workers: int) -> list[list[str]]:
        # Threads: one process per worker with --concurrency threads, like the others
        # (the prefork pool would start one process per unit of concurrency). Mingle
        # and gossip only matter between workers of a cluster; they would add a
        # second or so to each start.
        return [
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "benchmarks.peers.celery_redis_project.tasks",
                "worker",
                "--pool=threads",
                f"--concurrency={self.options.concurrency}",
                "--without-gossip",
                "--without-mingle",
                "--loglevel=WARNING",
                f"--hostname=peers{index}@%h",
                f"--queues={self.tasks.QUEUE}",
            ]
            for index in range(workers)
        ]

    def _result_keys(self) -> list[bytes]:
        return list(self.redis.scan_iter(f"{RESULT_PREFIX}*", count=10_000))

    def _results(self, keys: Sequence[bytes | str]) -> list[dict[str, Any]]:
        found = []
        for start in range(0, len(keys), 1000):
            for raw in self.redis.mget(keys[start : start + 1000]):
                if raw is not None:
                    found.append(json.loads(raw))
        return found

    def done_count(self) -> int:
        return len(self._result_keys())

    def database_server(self) -> str:
        return "redis"

    def drain_window(self) -> tuple[float | None, float | None]:
        done = [
            datetime.datetime.fromisoformat(meta["date_done"]).timestamp()
            for meta in self._results(self._result_keys())
        ]
        return None, max(done)

    def enqueue_probe(self, n: int) -> Any:
        return self.tasks.probe.delay(n=n).id

    def probe_starts(self, keys: Sequence[Any]) -> dict[Any, float]:
        metas = self._results([RESULT_PREFIX + key for key in keys])
        return {meta["task_id"]: meta["result"] for meta in metas if meta["status"] == "SUCCESS"}


if __name__ == "__main__":
    sys.exit(driver.main(CeleryPeer))
