"""Stopping a worker without losing or stranding a job: signals, the grace period, hand-back.

The first SIGTERM/SIGINT stops claiming. Running jobs get up to the grace period to
finish, while outcomes are still written, timeouts still recorded and leases still
renewed. Jobs still running then are handed straight back to ``queued`` (an
``interrupted`` attempt, not counted), so other workers take them at once rather than
after their lease expires. A second signal exits at once. :meth:`GracefulStop.stop_now`
skips the grace period, for a process about to exit (a development server reloading).
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.db import Error as DatabaseError

from durable_jobs import signals, wakeup
from durable_jobs.models import Node, Outcome

if TYPE_CHECKING:
    from durable_jobs.db.engine import Engine
    from durable_jobs.maintenance import MaintenanceRunner
    from durable_jobs.worker.config import Timing
    from durable_jobs.worker.executors import Executors
    from durable_jobs.worker.outbox import Outbox, WorkerStats
    from durable_jobs.worker.passes import PassThread
    from durable_jobs.worker.running import Running, RunningJobs
    from durable_jobs.worker.wakeups import LoopWake, NotifyListener

logger = logging.getLogger("durable_jobs.worker")

#: How long a stopped worker keeps retrying its last writes when the database fails.
LAST_WRITES_SECONDS = 5.0
HAND_BACK_SECONDS = 10.0
#: How long a stopping worker waits for its listener and pool threads to end.
THREADS_SECONDS = 5.0


class GracefulStop:
    """The stopping half of :class:`~durable_jobs.worker.Worker` (a mixin: these are the
    worker's own attributes and steps)."""

    engine: Engine
    node: Node
    timing: Timing
    stats: WorkerStats
    running: RunningJobs
    outbox: Outbox
    wake: LoopWake
    pool: Executors | None
    passes: PassThread
    listener: NotifyListener | None
    maintenance: MaintenanceRunner
    stopping: bool
    stop_reason: str
    #: :meth:`stop_now` was called: no grace period, no waiting for threads.
    at_once = False
    _signals = 0

    stop: Callable[[], None]
    _beat: Callable[[], None]
    _collect_results: Callable[[], None]
    _enforce_timeouts: Callable[[], None]
    _finish_pass: Callable[[], None]
    _resolve: Callable[[Running, Outcome, BaseException | None], None]
    _on_database_error: Callable[[Exception, int], None]

    def install_signal_handlers(self) -> None:
        """First SIGTERM/SIGINT: graceful stop. Second: exit at once."""
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    def stop_now(self) -> None:
        """Stop without a grace period: hand running jobs back to ``queued`` at once.

        For a process that is about to exit and cannot wait for its jobs (a development
        server that reloads or quits). Their attempts are recorded as ``interrupted``, as
        at the end of a grace period, and the node row is deleted; the worker's threads
        are not waited for (they are daemons, and die with the process). Safe from any
        thread, also during the grace period of an earlier :meth:`stop`, which it ends.
        """
        if not self.stopping:
            self.stop_reason = "stop requested, at once"
        self.at_once = True
        self.stop()

    def _grace(self) -> float:
        return 0.0 if self.at_once else self.timing.shutdown_grace

    def _on_signal(self, signum: int, frame: Any) -> None:
        # Only set flags here. The handler runs in the main thread between bytecodes,
        # possibly inside a stream write (a reentrant write raises) or inside an Event's
        # lock (Event.set would deadlock on it). The loop notices the flag and logs.
        self._signals += 1
        if self._signals > 1:
            os._exit(128 + signum)
        self.stop_reason = f"signal {signal.Signals(signum).name}"
        self.stopping = True

    def _shutdown(self) -> None:
        self.stopping = True
        logger.info(
            "worker %s stopping (%s): finishing running jobs for up to %ss",
            self.node.name,
            self.stop_reason,
            self._grace(),
            extra={"node": self.node.name, "running": len(self.running)},
        )
        self.maintenance.stop()  # no new rescue, prune or tick
        signals.send(signals.worker_stopping, Node, node=self.node)
        begun = time.monotonic()
        # The pass in flight is written: its jobs run (or are handed back) like the others.
        self._with_retries(self._finish_pass, begun + LAST_WRITES_SECONDS)
        if not self.at_once:  # else the node row is deleted a moment later
            self._with_retries(self._mark_stopping, begun + self._grace())
        # The deadline is read on every pass, so that stop_now() ends the grace at once.
        while self.running and time.monotonic() < (deadline := begun + self._grace()):
            self.wake.wait(min(0.05, max(deadline - time.monotonic(), 0.001)))
            self.wake.clear()
            self._with_retries(self._collect_and_flush, deadline)
            self._with_retries(self._enforce_timeouts, deadline)
            # Keep renewing leases: a grace period longer than the lease must not let
            # another node rescue (and run again) a job that is about to finish here.
            self._with_retries(self._beat, deadline)
        self._hand_back_running()
        self._with_retries(self._collect_and_flush, time.monotonic() + LAST_WRITES_SECONDS)
        wakeup.unsubscribe(self.wake)
        threads_wait = 0.0 if self.at_once else THREADS_SECONDS
        if self.listener is not None:
            self.listener.stop(timeout=threads_wait)
        if self.pool is not None:
            self.pool.shutdown(timeout=threads_wait)
        if hasattr(self, "passes"):  # not if the worker failed to start
            self.passes.stop(timeout=threads_wait)
        self.maintenance.join()
        self._with_retries(self._delete_node, time.monotonic() + LAST_WRITES_SECONDS)
        logger.info(
            "worker %s stopped after %s jobs (%s claims, %s writes of outcomes)",
            self.node.name,
            self.stats.finished,
            self.stats.claims,
            self.stats.flushes,
            extra={
                "node": self.node.name,
                "outcomes": dict(self.stats.outcomes),
                "rejected": self.stats.rejected,
            },
        )

    def _hand_back_running(self) -> None:
        """Return unfinished jobs to ``queued`` at once, rather than after the lease expires."""
        # Results already reported are finished jobs, not unfinished ones: take them first
        # (no database involved). A handler that returned while the grace period's last
        # pass was busy (flush, heartbeat) would otherwise be recorded as interrupted and
        # run again by another worker: a needless second run.
        self._collect_results()
        for running in self.running.unresolved():
            self._resolve(running, Outcome.INTERRUPTED, None)
        self._with_retries(self.outbox.flush, time.monotonic() + HAND_BACK_SECONDS)

    def _collect_and_flush(self) -> None:
        self._collect_results()
        self.outbox.flush()

    def _mark_stopping(self) -> None:
        Node.objects.using(self.engine.alias).filter(pk=self.node.pk).update(stopping=True)

    def _delete_node(self) -> None:
        with self.engine.write_transaction():
            Node.objects.using(self.engine.alias).filter(pk=self.node.pk).delete()

    def _with_retries(self, action: Callable[[], Any], deadline: float) -> None:
        """Best effort during shutdown: retry on database errors until ``deadline``."""
        failures = 0
        while True:
            try:
                action()
                return
            except DatabaseError as exc:
                failures += 1
                if time.monotonic() >= deadline:
                    logger.error("giving up during shutdown: %s", exc)
                    return
                self._on_database_error(exc, failures)
