"""The process executor: each job of a queue runs in a pooled child process.

One slot per unit of the queue's concurrency, each a thread of the worker that owns
one child (:mod:`.process_child`). The slot sends its child a job, answers the
child's progress and lease renewals on the worker's side of the lease, and reports
how the attempt ended, as a pool thread of :class:`~.pool.ThreadPool` would. What a
thread cannot do, a slot can: stop a handler whatever it is blocked in. At a job's
timeout (or a stopping worker's hand-back) the loop has already recorded the
outcome; the slot then sends its child SIGTERM, SIGKILL after :data:`KILL_GRACE`,
and starts a fresh one. A child that dies on its own (a segfault, ``os._exit``, the
OOM killer) fails only the attempt it was running, with its exit status. A child is
also replaced after ``max_jobs_per_child`` jobs, or once its resident memory after a
job passes ``max_memory_per_child``.

Children are started with ``spawn``: a fresh interpreter that sets Django up once,
rather than a fork of a worker with live threads and database connections.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import queue
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

from django.db import Error as DatabaseError
from django.db import connections

from durable_jobs import signals
from durable_jobs.context import extend_lease, write_progress
from durable_jobs.db.upkeep import refresh_thread_connections
from durable_jobs.exceptions import ProcessExited
from durable_jobs.models import Job, Node, Outcome
from durable_jobs.worker import process_child, wire
from durable_jobs.worker.exits import describe_exit
from durable_jobs.worker.pool import Interrupted

logger = logging.getLogger("durable_jobs.worker")

#: Seconds between SIGTERM and SIGKILL for a child whose job timed out or was handed back.
KILL_GRACE = 2.0
#: Seconds a child may take to start (Python, then Django's setup) on a loaded machine.
START_SECONDS = 60.0
#: Seconds a child told to stop after its last job may take before it is killed.
STOP_SECONDS = 5.0


@dataclass(frozen=True)
class ProcessSetup:
    """What every child of a worker is started with."""

    settings: str
    #: Alias -> database name, as the worker connects (it may differ from the settings').
    databases: dict[str, str]
    alias: str
    node: str
    lease_seconds: float
    max_jobs_per_child: int | None = None
    max_memory_per_child: int | None = None

    def for_child(self) -> dict[str, Any]:
        return {
            "settings": self.settings,
            "databases": self.databases,
            "alias": self.alias,
            "node": self.node,
            "lease_seconds": self.lease_seconds,
        }


class ChildProcess:
    """One running child and the pipe to it."""

    def __init__(self, process: BaseProcess, conn: Connection) -> None:
        self.process = process
        self.conn = conn
        #: Jobs it has run, and its resident memory after the last (bytes).
        self.jobs = 0
        self.rss = 0
        #: Django is set up in it: it waits for jobs.
        self.ready = False

    @classmethod
    def spawn(cls, setup: ProcessSetup, name: str) -> ChildProcess:
        """Start a child; :meth:`wait_ready` waits for its Django setup."""
        context = multiprocessing.get_context("spawn")
        conn, child_end = context.Pipe()
        # Not a daemon: a handler may start processes of its own, which daemons cannot.
        process = context.Process(
            target=process_child.main, args=(child_end, setup.for_child()), name=name
        )
        process.start()
        child_end.close()
        return cls(process, conn)

    def wait_ready(self) -> None:
        """Until Django is set up in it; ProcessExited if it dies (or is killed) first."""
        ready = self.receive(START_SECONDS)
        if ready is None or ready.get("type") != "ready":
            self.kill()
            raise ProcessExited(f"the job's process {self.describe()} before it was ready")
        self.ready = True

    @property
    def pid(self) -> int | None:
        return self.process.pid

    def send(self, message: dict[str, Any]) -> None:
        self.conn.send_bytes(wire.encode(message))

    def receive(self, timeout: float) -> dict[str, Any] | None:
        """The next message; None if the child exited (or ``timeout`` passed, see
        :meth:`exited`)."""
        try:
            ready = wait([self.conn, self.process.sentinel], timeout)
            if self.conn in ready:
                return wire.decode(self.conn.recv_bytes())
        except (EOFError, OSError):
            ready = [self.process.sentinel]
        if ready:
            self.process.join(1.0)
        return None

    def exited(self) -> bool:
        return self.process.exitcode is not None

    def describe(self) -> str:
        """``(pid 12) was killed by SIGKILL``, as far as is known."""
        return f"(pid {self.pid}) {describe_exit(self.process.exitcode)}"

    def terminate(self, grace: float) -> None:
        """SIGTERM, then SIGKILL if it has not exited after ``grace`` seconds."""
        if not self.exited():
            self._signal(signal.SIGTERM)
            self.process.join(grace)
        self.kill()

    def kill(self) -> None:
        # The pipe is left to the slot thread (it may be waiting on it); it closes with
        # the last reference.
        if not self.exited():
            self._signal(signal.SIGKILL)
            self.process.join(5.0)

    def stop(self, timeout: float) -> None:
        """Ask it to exit after its job; kill it if it has not within ``timeout``."""
        with contextlib.suppress(OSError):  # already gone
            self.send({"type": "stop"})
        self.process.join(timeout)
        self.kill()

    def _signal(self, signum: int) -> None:
        if self.pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)


class ProcessPool:
    """``submit(running)`` runs the job in a child; ``report(running, result)`` gets the
    :class:`~durable_jobs.lifecycle.outcomes.RunResult` (None: it was interrupted)."""

    def __init__(
        self,
        size: int,
        report: Callable[[Any, Any], None],
        *,
        setup: ProcessSetup,
        name: str,
        worker_node: Node | None = None,
    ) -> None:
        self._report = report
        self._setup = setup
        self._inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self.worker_node = worker_node
        self.slots = [_Slot(self, f"{name}-{i}") for i in range(size)]
        self._threads = [
            threading.Thread(target=slot.loop, name=slot.name, daemon=True) for slot in self.slots
        ]
        for thread in self._threads:
            thread.start()

    def wait_started(self, timeout: float = START_SECONDS) -> None:
        """Until every slot's first child is ready (or failed to start): the worker claims
        nothing for this queue before, so no job waits leased on a Django setup."""
        deadline = time.monotonic() + timeout
        for slot in self.slots:
            slot.started.wait(max(deadline - time.monotonic(), 0))

    def submit(self, item: Any) -> None:
        self._inbox.put(item)

    def interrupt(self, item: Any, reason: type[Interrupted] = Interrupted) -> bool:
        """Kill the child running ``item``, if one still is; its slot starts a new one."""
        with self._lock:
            for slot in self.slots:
                if slot.item is item:
                    slot.kill_requested(reason)
                    return True
        return False

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stop every slot and its child; no child outlives this call by more than the
        few seconds a SIGKILL takes."""
        for _ in self.slots:
            self._inbox.put(_STOP)
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(deadline - time.monotonic(), 0))
        for slot in self.slots:
            slot.kill_child()


class _Slot:
    """One unit of a process queue's concurrency: a thread and its child."""

    def __init__(self, pool: ProcessPool, name: str) -> None:
        self.pool = pool
        self.name = name
        self.child: ChildProcess | None = None
        #: The job it runs now (read by ``interrupt`` under the pool's lock).
        self.item: Any = None
        self._kill_at: float | None = None
        #: Set once its first child is ready, or could not start.
        self.started = threading.Event()

    def loop(self) -> None:
        self._start_child()  # ready before the first job arrives
        self.started.set()
        while True:
            item = self.pool._inbox.get()
            if item is _STOP:
                break
            try:
                result = self._run_one(item)
            except Exception as exc:  # a bug here must not strand the job as leased
                logger.exception("%s failed to run a job in its process", self.name)
                self.kill_child()
                result = item.unreported(Outcome.FAILED, exc)
            self.pool._report(item, result)
            self._recycle_if_due()
        if self.child is not None:
            self.child.stop(STOP_SECONDS)
            self.child = None
        connections.close_all()

    def kill_requested(self, reason: type[Interrupted]) -> None:
        """From the loop thread: end the child's job now (its outcome is recorded)."""
        if self._kill_at is not None:
            return
        self._kill_at = time.monotonic() + KILL_GRACE
        if self.child is not None:
            self.child._signal(signal.SIGTERM)

    def kill_child(self) -> None:
        child, self.child = self.child, None
        if child is not None:
            child.kill()

    def _run_one(self, running: Any) -> Any:
        job: Job = running.job
        with self.pool._lock:
            self.item, self._kill_at = running, None
        try:
            if self.child is None and not self._start_child():
                return running.unreported(Outcome.FAILED, self._start_error)
            assert self.child is not None
            if self._kill_at is not None:
                return None  # resolved (timed out, handed back) before it could start
            signals.send(
                signals.attempt_started,
                Job,
                job=job,
                attempt_number=job.attempts,
                node=self.pool.worker_node,
            )
            message = {"type": "job", "job": wire.job_fields(job)}
            try:
                self.child.send(message)
            except OSError:  # it died while idle (killed from outside, say): one more
                self.kill_child()
                if not self._start_child():
                    return running.unreported(Outcome.FAILED, self._start_error)
                assert self.child is not None
                self.child.send(message)
            return self._await_result(running, self.child)
        finally:
            with self.pool._lock:
                self.item = None
            refresh_thread_connections()

    def _await_result(self, running: Any, child: ChildProcess) -> Any:
        job = running.job
        while True:
            if self._kill_at is not None and time.monotonic() >= self._kill_at:
                child.kill()
            message = child.receive(0.1)
            if message is None and not child.exited():
                continue
            if message is None:  # it exited without a result
                self.child = None
                if self._kill_at is not None:
                    return None  # killed for a timeout or a hand-back, already recorded
                return running.unreported(Outcome.FAILED, self._death(child))
            kind = message["type"]
            if kind == "result":
                child.jobs += 1
                child.rss = int(message.get("rss") or 0)
                if self._kill_at is not None:
                    self.kill_child()  # the outcome is recorded; do not wait out the grace
                    return None
                return wire.run_result(message, job, running.handler)
            if kind == "progress":
                self._guarded(write_progress, job, message["percent"])
            elif kind == "heartbeat":
                held = self._guarded(extend_lease, job, self.pool._setup.lease_seconds)
                with contextlib.suppress(OSError):  # it is being killed
                    child.send({"type": "lease", "held": bool(held)})

    def _death(self, child: ChildProcess) -> ProcessExited:
        hint = ""
        if child.process.exitcode == -signal.SIGKILL:
            hint = " (the kernel's out-of-memory killer sends SIGKILL)"
        logger.warning(
            "the process running a job in %s %s%s; starting another", self.name,
            child.describe(), hint,
        )  # fmt: skip
        return ProcessExited(
            f"the process running the job {child.describe()} before the job finished{hint}"
        )

    def _recycle_if_due(self) -> None:
        child, setup = self.child, self.pool._setup
        if child is None:
            self._start_child()
            return
        rss = child.rss
        reason = None
        if setup.max_jobs_per_child is not None and child.jobs >= setup.max_jobs_per_child:
            reason = f"after {child.jobs} jobs (max_jobs_per_child)"
        elif setup.max_memory_per_child is not None and rss > setup.max_memory_per_child:
            reason = (
                f"its resident memory of {rss // 2**20} MB is past max_memory_per_child "
                f"({setup.max_memory_per_child // 2**20} MB)"
            )
        if reason is not None:
            logger.info("replacing the process of %s (pid %s): %s", self.name, child.pid, reason)
            child.stop(STOP_SECONDS)
            self.child = None
            self._start_child()

    def _start_child(self) -> bool:
        self._start_error: BaseException | None = None
        try:
            # Kept before it is ready, so that a stopping pool can kill a child mid-start.
            self.child = ChildProcess.spawn(self.pool._setup, self.name)
            self.child.wait_ready()
            return True
        except (ProcessExited, OSError) as exc:
            self.child = None
            self._start_error = exc
            logger.error("%s could not start a process for its jobs: %s", self.name, exc)
            return False

    def _guarded(self, write: Callable[..., Any], *args: Any) -> Any:
        # A write for the handler: a database error costs this write, not the attempt.
        try:
            return write(*args)
        except DatabaseError as exc:
            logger.warning("%s: a write for a running job failed: %s", self.name, exc)
            return None


_STOP = object()
