"""The child side of ``runworker --processes``: one supervised worker process.

A child is started by :class:`durable_jobs.worker.supervisor.Supervisor` with
:mod:`multiprocessing`'s ``spawn`` method, so :func:`child_main` runs in a fresh
interpreter before Django is set up. This module therefore imports nothing of
``durable_jobs`` at the top (most of it needs the app registry): it sets up
Django first, then runs the worker through ``runworker``'s own code, named by a dotted path.

How a child learns that it should stop:

* **Messages from the supervisor** on a :class:`~multiprocessing.connection.Connection`:
  ``"stop"`` (a graceful stop: the grace period, then hand-back) and ``"stop-now"`` (hand
  running jobs back at once). Sending one twice changes nothing, so a stop that reaches
  a child both ways (a terminal's Ctrl-C goes to the whole process group; systemd's
  ``KillMode=control-group`` signals every process) is taken once.
* **Signals sent to the child itself**: the first SIGTERM/SIGINT is a graceful stop, a
  later one a stop at once. Unlike a standalone worker, a second signal never ends the
  process with ``os._exit``: that would strand its jobs as ``leased`` until their leases
  expire, and a Ctrl-C pressed twice reaches the children directly and through the
  supervisor. The supervisor SIGKILLs a child that still hangs after a stop at once.
* **The supervisor's death**: a thread waits on the connection and on the parent's
  sentinel; when either reports the supervisor gone (SIGKILL, a crash), the child stops
  gracefully and hands its unfinished jobs back to ``queued`` rather than leaving them
  to lease expiry.

The levels only go up (none, graceful, at once), from whichever source comes first.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import signal
import sys
import threading
from collections.abc import Mapping
from multiprocessing.connection import Connection, wait
from typing import Any, Protocol

#: What the supervisor sends on the connection.
STOP = "stop"
STOP_NOW = "stop-now"

GRACEFUL = 1
AT_ONCE = 2


class Stoppable(Protocol):
    """What :class:`ChildControl` needs of :class:`durable_jobs.worker.Worker`."""

    stopping: bool
    stop_reason: str
    at_once: bool

    def stop(self) -> None: ...

    def stop_now(self) -> None: ...


class ChildControl:
    """Turns the supervisor's messages, signals and death into worker stops."""

    def __init__(self, conn: Connection, slot: int) -> None:
        self.conn = conn
        self.slot = slot
        self.level = 0
        self.reason = ""
        self.signals = 0
        self.worker: Stoppable | None = None
        parent = multiprocessing.parent_process()
        self.parent_pid = parent.pid if parent is not None else None
        self.parent_sentinel = parent.sentinel if parent is not None else None

    def install(self) -> None:
        """Take SIGTERM/SIGINT and start watching the supervisor (before Django is set up,
        so that a stop asked for while the child starts is not lost)."""
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        threading.Thread(target=self._watch, name="durable-jobs-supervised", daemon=True).start()

    def attach(self, worker: Stoppable) -> None:
        """Called by ``runworker`` with the worker it built, before the worker runs."""
        self.worker = worker
        # A stop that came before the worker existed: apply it now (applying twice is
        # harmless, and the watcher may be applying it at the same moment).
        if self.level:
            self._apply(worker, self.level, self.reason)

    def _request(self, level: int, reason: str) -> None:
        if level <= self.level:
            return
        self.level, self.reason = level, reason
        worker = self.worker
        if worker is not None:
            self._apply(worker, level, reason)

    @staticmethod
    def _apply(worker: Stoppable, level: int, reason: str) -> None:
        if not worker.stopping:
            worker.stop_reason = reason
        if level >= AT_ONCE:
            worker.stop_now()
        else:
            worker.stop()

    def _on_signal(self, signum: int, frame: Any) -> None:
        # Only flags here, as in the worker's own handler: the handler runs between two
        # bytecodes of the main thread, possibly inside an Event's lock, which stop()
        # would take again. The worker's loop and grace period read these within 0.25 s.
        self.signals += 1
        level = AT_ONCE if self.signals > 1 else GRACEFUL
        if level <= self.level:
            return
        self.level = level
        self.reason = f"signal {signal.Signals(signum).name}"
        worker = self.worker
        if worker is not None:
            if not worker.stopping:
                worker.stop_reason = self.reason
            if level >= AT_ONCE:
                worker.at_once = True
            worker.stopping = True

    def _watch(self) -> None:
        watched: list[Any] = [self.conn]
        if self.parent_sentinel is not None:
            watched.append(self.parent_sentinel)
        while True:
            ready = wait(watched)
            if self.conn in ready:
                try:
                    message = self.conn.recv()
                except (EOFError, OSError):
                    break
                if message == STOP_NOW:
                    self._request(AT_ONCE, "the supervisor asked to stop at once")
                elif message == STOP:
                    self._request(GRACEFUL, "the supervisor asked to stop")
                continue
            break  # the parent's sentinel: the supervisor is gone
        self._request(GRACEFUL, f"the supervisor (pid {self.parent_pid}) is gone")


def child_main(
    slot: int,
    runner: str,
    options: Mapping[str, Any],
    database_names: Mapping[str, Any],
    conn: Connection,
    replaces: tuple[str, int] | None,
) -> None:
    """The target of a supervised child process (see the module's docstring).

    ``runner`` is the dotted path of ``runworker``'s ``run_worker(options, supervised=)``;
    ``database_names`` the ``NAME`` of every database alias in the supervisor, applied
    after setup (a test run changes them at run time, after settings were read);
    ``replaces`` (node name, pid): a predecessor in this slot that died, whose name this
    child takes over.
    """
    control = ChildControl(conn, slot)
    control.install()

    import django

    django.setup()
    from django.core.management.base import CommandError
    from django.db import connections
    from django.utils.module_loading import import_string

    for alias, name in database_names.items():
        connections[alias].settings_dict["NAME"] = name
    connections.close_all()
    if replaces is not None:
        _forget_dead_node(*replaces)
    run_worker = import_string(runner)
    try:
        code = run_worker(dict(options), supervised=control.attach)
    except CommandError as exc:
        sys.stderr.write(f"CommandError: {exc}\n")
        code = exc.returncode
    finally:
        connections.close_all()
        with contextlib.suppress(OSError):
            conn.close()
    sys.stdout.flush()
    sys.exit(code)


def _forget_dead_node(name: str, pid: int) -> None:
    """Free the name a killed predecessor's Node row still holds, for this child to take.

    The supervisor reaped that process, so the row is known dead although its heartbeat
    is recent; left as it is, the new child would be refused the name (it looks live)
    until the row went stale. The row is renamed ``NAME~PID`` rather than deleted: its
    jobs keep their leases, which expire and are rescued as any dead node's, and the
    ``lost`` attempts then name the process that held them.
    """
    from durable_jobs.db import engine_for
    from durable_jobs.models import Node

    suffix = f"~{pid}"
    length = Node._meta.get_field("name").max_length or 100
    engine = engine_for(None)
    with engine.write_transaction():
        Node.objects.using(engine.alias).filter(name=name, pid=pid).update(
            name=name[: length - len(suffix)] + suffix
        )
