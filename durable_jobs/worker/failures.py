"""Database failures the worker's threads see, and how the loop rides them out.

A database restart breaks every idle connection without their knowing. After any
failure (seen by the loop, the listener or a maintenance service), each pool thread
checks its connections once before its next job, instead of failing that job's
attempt on a dead connection; the loop backs off between its own retries.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from django.db import close_old_connections, connections

from durable_jobs.backoff import Doubling
from durable_jobs.db.engine import Engine
from durable_jobs.db.upkeep import refresh_thread_connections

if TYPE_CHECKING:
    from durable_jobs.worker.outbox import WorkerStats

logger = logging.getLogger("durable_jobs.worker")

#: Waits of the loop between retries after a database error.
RETRY = Doubling(0.25, 10.0)
#: The longest single sleep of a backoff, so that a stop request ends it early.
SLEEP_STEP = 0.25
#: Passes in a row run again at once after a deadlock or lock wait timeout, before the
#: loop backs off as after any other error.
RERUNS = 5


class DatabaseFailures:
    def __init__(self) -> None:
        self._count = 0
        self._lock = threading.Lock()
        self._checked = threading.local()

    def count(self) -> None:
        """Note one more failure (from any thread)."""
        with self._lock:
            self._count += 1

    def refresh_connections(self) -> None:
        """On a pool thread, before a job: close this thread's broken or old connections,
        asking the database whether each is alive if a failure was seen since last time."""
        seen = self._count
        refresh_thread_connections(verify=getattr(self._checked, "seen", 0) != seen)
        self._checked.seen = seen

    def rerun_at_once(
        self, exc: Exception, failures: int, engine: Engine, stats: WorkerStats
    ) -> bool:
        """Whether the loop should run its pass again at once: the database rolled it back
        whole to break a deadlock or a lock wait (MySQL's InnoDB does, under contention),
        so the outcomes are still waiting and nothing was claimed; the connection is fine."""
        if failures > RERUNS or not engine.is_transient(exc):
            return False
        stats.transient += 1
        logger.info("the worker's pass was rolled back (%s); running it again", exc)
        return True

    def back_off(
        self, exc: Exception, failures: int, *, alias: str, node: str, stop: Callable[[], bool]
    ) -> None:
        """After the loop's ``failures``-th failure in a row: count it, drop the loop's
        connections, and wait (until ``stop()`` says the worker is stopping)."""
        self.count()
        delay = RETRY.delay(failures)
        logger.warning(
            "database error in worker %s (%s: %s); retrying in %.2fs",
            node,
            type(exc).__name__,
            exc,
            delay,
            extra={"node": node, "error": str(exc)},
        )
        connections[alias].close()
        close_old_connections()
        until = time.monotonic() + delay
        while not stop() and time.monotonic() < until:
            time.sleep(min(SLEEP_STEP, max(until - time.monotonic(), 0)))
