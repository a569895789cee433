"""``runworker --processes N``: one supervisor process keeping N worker processes running.

Why it is shaped this way:

* **Children are spawned** (:mod:`multiprocessing`'s ``spawn`` method), not forked and
  not re-executed as ``manage.py runworker``. A fork would copy the supervisor's
  threads, locks and open database connections into every child; a re-exec would have
  to guess how the project was started (``manage.py``, ``python -m django``,
  ``django-admin`` with ``--settings`` and ``--pythonpath``). Spawning starts a fresh
  interpreter with the parent's ``sys.path``, working directory and environment
  (``DJANGO_SETTINGS_MODULE`` included), whichever way it was started; the child then
  sets Django up itself (:func:`durable_jobs.worker.supervised.child_main`). Each child is a
  full worker, with its own ``Node`` row, run by ``runworker``'s own code.
* **The supervisor holds no database connection** and registers no ``Node``: it closes
  every connection before it starts a child, and only waits on the children's
  sentinels. A database outage or restart cannot touch it.
* **Stops travel as messages, not signals**: the supervisor sends ``stop`` or
  ``stop-now`` on a pipe to each child. A child takes each level once whatever its
  sources, so a SIGINT that reaches the whole process group (a terminal's Ctrl-C), or
  a SIGTERM that reaches every process (systemd's ``KillMode=control-group``), is one
  graceful stop, not the "second signal" that would make a worker exit at once.
* **The children notice the supervisor's death** through that pipe and the parent's
  sentinel (EOF when the parent dies, SIGKILL included), and stop gracefully.

Restarts: a child that exits or dies is started again after a delay that doubles from
1 s to 30 s, reset once a child has run for a minute, so a crash loop (a database
that refuses connections) does not spin. A child that exits 0 has finished its work
(``--burst`` or ``--max-jobs``) and is not restarted; the supervisor exits 0 when
every child has. Without those options, a worker only exits 0 after a stop sent to it
alone, so it is restarted: the supervisor keeps N workers running.

Signals to the supervisor: the first SIGTERM/SIGINT sends ``stop`` to every child
(each gets the grace period, then hands back its unfinished jobs); the supervisor
waits for them and exits 0. A second sends ``stop-now`` (jobs handed back at once)
and exits ``128 + signal``; a child still running 10 s later is SIGKILLed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import multiprocessing
import os
import signal
import time
from collections.abc import Mapping, Sequence
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

from django.db import connections

from durable_jobs.worker.exits import describe_exit
from durable_jobs.worker.supervised import STOP, STOP_NOW, child_main

logger = logging.getLogger("durable_jobs.worker")

FIRST_RESTART_DELAY = 1.0
MAX_RESTART_DELAY = 30.0
#: A child that ran this long restarts after FIRST_RESTART_DELAY again.
STABLE_SECONDS = 60.0
#: How long past the grace period a stopping child may take (its hand-back, its last
#: writes and its threads) before it is told to stop at once.
STOP_MARGIN_SECONDS = 30.0
#: How long a child told to stop at once may take before it is SIGKILLed.
KILL_AFTER_SECONDS = 10.0


def available_cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the platform has one)."""
    counter = getattr(os, "process_cpu_count", None)  # Python 3.13+
    if counter is not None:
        return int(counter() or 1)
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


@dataclasses.dataclass
class Slot:
    """Worker process ``index`` (1..N): the current child and its restart state."""

    index: int
    options: dict[str, Any]
    process: BaseProcess | None = None
    conn: Connection | None = None
    started_at: float = 0.0
    restart_at: float | None = None
    delay: float = FIRST_RESTART_DELAY
    finished: bool = False
    #: (node name, pid) of a child that died holding a fixed ``--name``.
    replaces: tuple[str, int] | None = None

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.exitcode is None

    def send(self, message: str) -> None:
        if self.conn is not None and self.alive:
            # A child that died a moment ago has closed its end: nothing to tell it.
            with contextlib.suppress(OSError, ValueError):
                self.conn.send(message)


class Supervisor:
    """Starts one worker process per entry of ``options`` and keeps them running.

    ``runner``: the dotted path of ``run_worker(options, supervised=)`` each child calls.
    ``grace``: the children's shutdown grace, to bound how long a graceful stop may take.
    ``finishes``: the children exit 0 when done (``--burst``, ``--max-jobs``).
    """

    def __init__(
        self,
        options: Sequence[Mapping[str, Any]],
        *,
        runner: str,
        grace: float,
        finishes: bool,
    ) -> None:
        self.slots = [Slot(i, dict(opts)) for i, opts in enumerate(options, start=1)]
        self.runner = runner
        self.grace = grace
        self.finishes = finishes
        self.context = multiprocessing.get_context("spawn")
        self.signals = 0
        self.last_signal: signal.Signals = signal.SIGTERM
        self.stop_deadline: float | None = None
        self.kill_deadline: float | None = None
        self.killed = False
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        os.set_blocking(self._wake_r, False)

    def run(self) -> int:
        """Supervise until stopped, or until every child has finished; the exit code."""
        # The children get the databases' names as this process sees them (a test run
        # changes them after settings were read); then no connection stays open here.
        self.database_names = {
            alias: connections[alias].settings_dict["NAME"] for alias in connections
        }
        connections.close_all()
        previous = {
            sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)
        }
        try:
            logger.info(
                "supervisor (pid %s) starting %s worker processes",
                os.getpid(),
                len(self.slots),
                extra={"processes": len(self.slots)},
            )
            for slot in self.slots:
                self._start(slot)
            return self._supervise()
        finally:
            self._kill_leftovers()
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            os.close(self._wake_r)
            os.close(self._wake_w)

    def _on_signal(self, signum: int, frame: Any) -> None:
        # Only a count and a byte on the wake-up pipe: the loop does the work (logging
        # or sending from a signal handler could reenter a lock the main thread holds).
        self.signals += 1
        self.last_signal = signal.Signals(signum)
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"\0")

    def _supervise(self) -> int:
        handled = 0
        while True:
            if self.signals > handled:
                handled = self.signals
                self._on_stop_requested(handled)
            self._reap()
            now = time.monotonic()
            stopping = self.stop_deadline is not None
            # Done once every child has been reaped (and its exit logged), not once
            # none is alive: a child can exit between the reap and this check.
            if stopping and all(slot.process is None for slot in self.slots):
                logger.info("supervisor stopped: every worker process has exited")
                return 0 if handled < 2 else 128 + self.last_signal
            if not stopping and all(slot.finished for slot in self.slots):
                logger.info("supervisor finished: every worker process finished its work")
                return 0
            if not stopping:
                for slot in self.slots:
                    if slot.restart_at is not None and now >= slot.restart_at:
                        self._start(slot)
            self._escalate(now)
            self._wait(self._next_due(now) - now)

    def _on_stop_requested(self, count: int) -> None:
        now = time.monotonic()
        name = self.last_signal.name
        if self.stop_deadline is None:
            logger.info(
                "supervisor stopping (signal %s): asking %s worker processes to finish "
                "their running jobs for up to %ss",
                name,
                sum(slot.alive for slot in self.slots),
                self.grace,
            )
            self.stop_deadline = now + self.grace + STOP_MARGIN_SECONDS
            for slot in self.slots:
                slot.restart_at = None
                slot.send(STOP)
        if count == 2:
            logger.warning(
                "supervisor: second signal (%s); the worker processes hand their jobs back at once",
                name,
            )
            self._stop_now(now)
        elif count > 2:
            self._kill_all(f"signal {name} again")

    def _stop_now(self, now: float) -> None:
        if self.kill_deadline is None:
            self.kill_deadline = now + KILL_AFTER_SECONDS
        for slot in self.slots:
            slot.send(STOP_NOW)

    def _escalate(self, now: float) -> None:
        if self.kill_deadline is not None:
            if now >= self.kill_deadline and not self.killed:
                self._kill_all(f"still running {KILL_AFTER_SECONDS:g}s after a stop at once")
        elif self.stop_deadline is not None and now >= self.stop_deadline:
            logger.warning(
                "supervisor: worker processes still running %ss past their grace period; "
                "asking them to stop at once",
                STOP_MARGIN_SECONDS,
            )
            self._stop_now(now)

    def _kill_all(self, why: str) -> None:
        self.killed = True
        for slot in self.slots:
            if slot.alive and slot.process is not None and slot.process.pid is not None:
                logger.warning(
                    "worker process %s (pid %s) %s: sending SIGKILL",
                    slot.index,
                    slot.process.pid,
                    why,
                )
                with contextlib.suppress(ProcessLookupError):
                    os.kill(slot.process.pid, signal.SIGKILL)

    def _next_due(self, now: float) -> float:
        due = [now + 1.0]
        due += [s.restart_at for s in self.slots if s.restart_at is not None]
        due += [d for d in (self.stop_deadline, self.kill_deadline) if d is not None]
        return max(min(due), now + 0.01)

    def _wait(self, timeout: float) -> None:
        watched: list[Any] = [self._wake_r]
        # Every unreaped child, exited ones included: their sentinels are ready at once.
        watched += [s.process.sentinel for s in self.slots if s.process is not None]
        wait(watched, timeout=max(timeout, 0.0))
        with contextlib.suppress(BlockingIOError):
            while os.read(self._wake_r, 64):
                pass

    def _start(self, slot: Slot) -> None:
        parent_conn, child_conn = self.context.Pipe()
        process = self.context.Process(
            target=child_main,
            args=(
                slot.index,
                self.runner,
                slot.options,
                self.database_names,
                child_conn,
                slot.replaces,
            ),
            name=f"durable-jobs-worker-{slot.index}",
            # Not a daemon: a worker may start processes of its own (a process executor),
            # which multiprocessing forbids daemons.
            daemon=False,
        )
        process.start()
        child_conn.close()
        if slot.conn is not None:
            slot.conn.close()
        slot.process, slot.conn = process, parent_conn
        slot.started_at = time.monotonic()
        slot.restart_at = None
        logger.info(
            "started worker process %s (pid %s)",
            slot.index,
            process.pid,
            extra={"worker_process": slot.index, "child_pid": process.pid},
        )

    def _reap(self) -> None:
        """Log each child that exited; plan its restart, unless it finished or we stop."""
        now = time.monotonic()
        for slot in self.slots:
            process = slot.process
            if process is None or process.exitcode is None:
                continue
            process.join()
            code = process.exitcode
            pid = process.pid
            slot.process = None
            with contextlib.suppress(ValueError):
                process.close()
            exit_words = describe_exit(code)
            fields = {"worker_process": slot.index, "child_pid": pid, "exit_status": code}
            if self.stop_deadline is not None:
                logger.info(
                    "worker process %s (pid %s) %s", slot.index, pid, exit_words, extra=fields
                )
                continue
            if code == 0 and self.finishes:
                slot.finished = True
                logger.info(
                    "worker process %s (pid %s) finished its work (%s)",
                    slot.index,
                    pid,
                    exit_words,
                    extra=fields,
                )
                continue
            if now - slot.started_at >= STABLE_SECONDS:
                slot.delay = FIRST_RESTART_DELAY
            slot.restart_at = now + slot.delay
            name = slot.options.get("name")
            slot.replaces = (name, pid) if name and pid is not None else None
            logger.warning(
                "worker process %s (pid %s) %s; restarting it in %ss",
                slot.index,
                pid,
                exit_words,
                f"{slot.delay:g}",
                extra=fields,
            )
            slot.delay = min(slot.delay * 2, MAX_RESTART_DELAY)

    def _kill_leftovers(self) -> None:
        """Leave no child behind if the supervisor itself fails (never on a normal exit,
        where every child has been waited for)."""
        for slot in self.slots:
            if slot.alive and slot.process is not None:
                slot.send(STOP_NOW)
                slot.process.join(KILL_AFTER_SECONDS)
                if slot.process.exitcode is None:
                    slot.process.kill()
                    slot.process.join(5)
