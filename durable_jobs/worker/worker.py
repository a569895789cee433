"""The worker: one loop thread that claims, dispatches and records; a pool that runs jobs.

The loop thread is the only one that writes job state for this node: it claims at most
``concurrency - running`` jobs per queue, hands them to the pool, and records every
outcome (timeouts and hand-backs included) itself, so an outcome is recorded once even
when a handler's late return races its timeout. Its parts: :mod:`.running` (slots),
:mod:`.outbox` (outcomes to write), :mod:`.wakeups`, :mod:`.heartbeat` and
:mod:`.shutdown`; maintenance runs on a thread of its own (:mod:`durable_jobs.maintenance`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence

from django.db import Error as DatabaseError
from django.db import connections

from durable_jobs import signals, wakeup
from durable_jobs.db import engine_for
from durable_jobs.db.upkeep import refresh_thread_connections
from durable_jobs.exceptions import JobTimeout
from durable_jobs.flow import queues as flow_queues
from durable_jobs.lifecycle import outcomes
from durable_jobs.lifecycle.outcomes import RunResult
from durable_jobs.logging import log_event
from durable_jobs.maintenance import MaintenanceContext, MaintenanceRunner, default_services
from durable_jobs.maintenance.base import Service
from durable_jobs.models import Job, Node, Outcome
from durable_jobs.worker.config import Timing, parse_queue_spec
from durable_jobs.worker.execute import execute
from durable_jobs.worker.executors import Executors
from durable_jobs.worker.failures import DatabaseFailures
from durable_jobs.worker.heartbeat import Heartbeat
from durable_jobs.worker.node import register_node
from durable_jobs.worker.outbox import Outbox, WorkerStats
from durable_jobs.worker.passes import LoopPasses, PassThread
from durable_jobs.worker.pool import Interrupted, TimedOut
from durable_jobs.worker.running import Running, RunningJobs
from durable_jobs.worker.shutdown import GracefulStop
from durable_jobs.worker.wakeups import ChangeCounter, LoopWake, NotifyListener

logger = logging.getLogger("durable_jobs.worker")

#: The loop's longest sleep, so a stop requested by a signal is seen within it.
SIGNAL_CHECK_SECONDS = 0.25


class Worker(LoopPasses, GracefulStop):
    """Runs jobs from ``queues`` until stopped. Drive it from a command, a thread or a test.

    >>> Worker({"default": 4}, burst=True).run()   # process what is there, then return
    """

    def __init__(
        self,
        queues: Mapping[str, int] | str | None = None,
        *,
        concurrency: int | None = None,
        burst: bool = False,
        max_jobs: int | None = None,
        lease_seconds: float | None = None,
        heartbeat_seconds: float | None = None,
        shutdown_grace: float | None = None,
        poll_interval: float | None = None,
        maintenance: Sequence[Service] | None = None,
        plugins: Sequence[Service] | None = None,
        scheduler: bool = True,
        using: str | None = None,
        name: str | None = None,
        rates: Mapping[str, str] | None = None,
    ) -> None:
        spec_rates: dict[str, str] = {}
        if queues is None or isinstance(queues, str):
            queues, spec_rates = parse_queue_spec(queues, concurrency)
        self.queues: dict[str, int] = dict(queues)
        #: Global rates given on the command line (``--queues name:N:rate``).
        self.rates: dict[str, str] = {**spec_rates, **(rates or {})}
        self.timing = Timing.resolve(
            lease_seconds=lease_seconds,
            heartbeat_seconds=heartbeat_seconds,
            shutdown_grace=shutdown_grace,
            poll_interval=poll_interval,
        )
        self.burst = burst
        self.max_jobs = max_jobs
        self.engine = engine_for(using)
        self.alias = self.engine.alias
        self.requested_name = name
        self.stats = WorkerStats()
        self.stopping = False
        self.stop_reason = "finished"
        #: Queues whose claims lock and count; refreshed by every heartbeat.
        self.limited_queues: set[str] = set()
        self.started = threading.Event()
        #: What stopped the worker, if it failed (a thread's or a maintenance service's).
        self.failure: BaseException | None = None
        self.wake = LoopWake()
        #: A wake-up that came while a pass was in flight, kept for the pass after it: the
        #: pass in flight may have picked its jobs before they were committed.
        self.wake_waiting = False
        self.running = RunningJobs(self.queues, self.wake)
        self.outbox = Outbox(self.engine, self.stats)
        self.heartbeat = Heartbeat(
            self.engine,
            self.queues,
            interval=self.timing.heartbeat_seconds,
            lease_seconds=self.timing.lease_seconds,
        )
        # ``plugins``: the former name of ``maintenance``. The schedule tick runs before
        # the first claim, so a burst worker also enqueues what is due when it starts.
        chosen = maintenance if maintenance is not None else plugins
        self.database_failures = DatabaseFailures()
        self.maintenance = MaintenanceRunner(
            default_services(schedules=scheduler) if chosen is None else chosen,
            MaintenanceContext(self.alias, lease_seconds=self.timing.lease_seconds),
            on_failure=self._maintenance_failed,
            on_database_error=self.database_failures.count,
        )
        #: Queues whose keyed jobs a one-statement pass left waiting: claimed in
        #: transactions (see :class:`~durable_jobs.db.engine.PassWrites`) until the next
        #: heartbeat.
        self.keyed_queues: set[str] = set()
        self.capacity = sum(self.queues.values())
        self.pool: Executors | None = None
        self.listener: NotifyListener | None = None
        self.changes: ChangeCounter | None = None

    def run(self) -> int:
        """Run until stopped (or, in burst mode, until nothing is left); return an exit code."""
        try:
            self._start()
            self._loop()
        finally:
            if hasattr(self, "node"):  # registered: leave no row, thread or lease behind
                self._shutdown()
        if self.failure is not None:
            raise self.failure
        return 0

    def start(self) -> threading.Thread:
        """Run in a background thread (for tests and in-process workers)."""
        thread = threading.Thread(
            target=self._run_in_thread, name="durable-jobs-worker", daemon=True
        )
        thread.start()
        self.started.wait(30)
        if self.failure is not None:
            raise self.failure
        return thread

    def stop(self) -> None:
        """Ask for a graceful stop: no new claims; running jobs get the grace period."""
        if not self.stopping and self.stop_reason == "finished":
            self.stop_reason = "stop requested"
        self.stopping = True
        self.wake.set()

    def _run_in_thread(self) -> None:
        try:
            self.run()
        except BaseException as exc:
            self.failure = exc
            logger.exception("worker thread failed")
        finally:
            self.started.set()  # never leave start() waiting on a worker that died
            connections.close_all()

    def _start(self) -> None:
        self.node = register_node(
            self.queues,
            name=self.requested_name,
            using=self.alias,
            stale_after=self.timing.lease_seconds,
        )
        flow_queues.sync_for_worker(self.queues, self.rates, using=self.alias)
        self.limited_queues = self.heartbeat.limited_queues()
        self.pool = Executors.start(
            self.queues, work=self._work, report=self.running.report, node=self.node,
            alias=self.alias, lease_seconds=self.timing.lease_seconds,
        )  # fmt: skip
        self.passes = PassThread(
            self._write_pass, self.wake.result_ready, name=f"{self.node.name}-passes"
        )
        wakeup.subscribe(self.wake)
        if not self.burst:
            self.listener = NotifyListener.start_for(
                self.engine, self.queues, self.wake, self.database_failures.count, self.node.name
            )
        self.changes = ChangeCounter(self.engine, self.timing.poll_interval)
        self._use_node(self.node)
        # Every service once before the first claim (so a burst worker runs what is due),
        # then on a thread of its own, so that none ever delays a claim.
        self.maintenance.run_due()
        self.maintenance.start()
        logger.info(
            "worker %s started (pid %s, queues %s)",
            self.node.name,
            os.getpid(),
            ", ".join(f"{q}:{c}" for q, c in self.queues.items()),
            extra={"node": self.node.name, "queues": self.queues},
        )
        signals.send(signals.worker_started, Node, node=self.node)
        self.started.set()

    def _use_node(self, node: Node) -> None:
        self.node = node
        self.maintenance.context = dataclasses.replace(
            self.maintenance.context, node_name=node.name
        )

    def _loop(self) -> None:
        failures = 0
        next_poll = 0.0
        while not self.stopping:
            new_work = self.wake.take() or self.wake_waiting
            try:
                self._collect_results()
                finished = self._take_pass()
                if finished is not None:
                    new_work |= self._again(finished)
                    if self.burst and self._drained(finished):
                        break
                # Before any write: it keeps renewing leases even while outcome writes are
                # failing and being retried.
                self._beat()
                outcomes_due = self._outcomes_due()
                self._enforce_timeouts()
                if self._done_with_max_jobs():
                    break
                # A pass when new jobs may be waiting (a wake-up, a due poll, a change on
                # SQLite, a full claim), or when the waiting outcomes are due: a finished
                # job alone leaves its slot for a moment, so that each pass takes a batch.
                assert self.changes is not None
                poll_due = time.monotonic() >= next_poll or self.changes.changed()
                if self.passes.busy:
                    self.wake_waiting = new_work
                elif new_work or poll_due or outcomes_due or (self.burst and not self.outbox):
                    self.wake_waiting = False
                    next_poll = time.monotonic() + self.timing.poll_interval
                    self._submit_pass()
                failures = 0
            except DatabaseError as exc:
                failures += 1
                if not self.database_failures.rerun_at_once(exc, failures, self.engine, self.stats):
                    self._on_database_error(exc, failures)
                continue
            self.wake.wait(self._next_wait(next_poll))

    def _dispatch(self, job: Job) -> None:
        running = Running.dispatched(job)
        self.running.add(running)
        self.stats.claimed += 1
        log_event(logging.DEBUG, "leased", job, node=self.node.name)
        assert self.pool is not None
        self.pool.submit(running)

    def _work(self, running: Running) -> RunResult:
        """On a pool thread: run one job."""
        # Connections that errored or outlived a positive CONN_MAX_AGE are closed before
        # and after each job, so a long-running worker survives database restarts.
        self.database_failures.refresh_connections()
        try:
            return execute(
                running.job,
                node=self.node.name,
                lease_seconds=self.timing.lease_seconds,
                handler=running.handler,
                worker_node=self.node,
            )
        finally:
            refresh_thread_connections()

    def _collect_results(self) -> None:
        for running, result in self.running.collect():
            if result is None:
                # Only an interruption yields no result, and the loop resolves a job before
                # interrupting it; record a failure rather than ever leave the job leased.
                result = running.unreported(Outcome.LOST)
            self._finish(running, result)

    def _finish(self, running: Running, result: RunResult) -> None:
        running.resolved = True
        self.stats.finished += 1
        self.outbox.add(outcomes.decide(result, node=self.node.name))

    def _resolve(self, running: Running, outcome: Outcome, error: BaseException | None) -> None:
        """Record an outcome the handler did not report (a timeout, a hand-back), then stop
        its thread; a late return is ignored."""
        self._finish(running, running.unreported(outcome, error))
        assert self.pool is not None
        self.pool.interrupt(running, TimedOut if outcome == Outcome.TIMED_OUT else Interrupted)

    def _enforce_timeouts(self) -> None:
        timed_out = self.running.past_deadline(time.monotonic())
        for running in timed_out:
            timeout = running.job.timeout or 0
            error = JobTimeout(f"the job ran longer than its timeout of {timeout:g}s")
            self._resolve(running, Outcome.TIMED_OUT, error)
        if timed_out:
            self.outbox.flush()

    def _beat(self) -> None:
        if self.heartbeat.due():
            leases = self.running.leases()
            node, self.limited_queues = self.heartbeat.beat(
                self.node, stopping=self.stopping, leases=leases
            )
            # Claimed in transactions until the next beat, then seen afresh.
            self.keyed_queues.clear()
            if node is not self.node:
                self._use_node(node)

    def _done_with_max_jobs(self) -> bool:
        done = self.max_jobs is not None and self.stats.claimed >= self.max_jobs
        return done and not self.running and not self.outbox

    def _next_wait(self, next_poll: float) -> float:
        now = time.monotonic()
        # Capped, because a signal handler only sets a flag (see shutdown.Signals) and the
        # loop must notice it promptly.
        due = [next_poll, now + SIGNAL_CHECK_SECONDS, self.heartbeat.next_due]
        due += [d for d in (self.running.next_deadline(), self.outbox.due_at()) if d is not None]
        if self.changes is not None and self.changes.available:
            due.append(self.changes.next_check)
        return max(min(due) - now, 0.0005)

    def _on_database_error(self, exc: Exception, failures: int) -> None:
        self.database_failures.back_off(
            exc, failures, alias=self.alias, node=self.node.name, stop=lambda: self.stopping
        )

    def _maintenance_failed(self, exc: BaseException) -> None:
        """A service raised something other than a database error: stop, and fail."""
        logger.error("maintenance failed in worker %s: %r", self.node.name, exc)
        self.failure = exc
        self.stop_reason = f"maintenance failed ({type(exc).__name__})"
        self.stop()
