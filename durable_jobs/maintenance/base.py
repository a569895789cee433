"""What a maintenance service is, what it sees, and the one harness that runs them.

A service (rescuer, pruner, batch sweeper, schedule tick) runs every ``interval``
seconds with a :class:`MaintenanceContext`: the database alias, the node's name and
the lease length, never the worker itself. A worker runs its services on a thread
of their own, so that a prune or a schedule tick never delays a claim; ``Scheduler``
runs the schedule tick with the same harness.

A database error (:class:`django.db.Error`) from a service is logged and the service runs again
at its next interval; any other exception stops the harness and is reported to its
owner (a worker then stops: a broken service must not go unnoticed).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from django.db import Error as DatabaseError
from django.db import close_old_connections, connections

logger = logging.getLogger("durable_jobs.maintenance")


@dataclasses.dataclass(frozen=True)
class MaintenanceContext:
    """What a service knows of the worker it runs in."""

    alias: str
    #: The node's name, recorded on what the service does (``rescued_by``).
    node_name: str = ""
    lease_seconds: float = 60.0


class Service(Protocol):
    name: str

    def interval(self, context: MaintenanceContext) -> float:
        """Seconds until the next run, asked before and again after each run."""
        ...

    def run(self, context: MaintenanceContext) -> None: ...


class MaintenanceRunner:
    """Runs each service when it is due: in the caller's thread (:meth:`run_due`,
    :meth:`serve`) or on a thread of its own (:meth:`start`)."""

    def __init__(
        self,
        services: Sequence[Service],
        context: MaintenanceContext,
        *,
        on_failure: Callable[[BaseException], None] | None = None,
        on_database_error: Callable[[], None] | None = None,
        thread_name: str = "durable-jobs-maintenance",
    ) -> None:
        self.services = list(services)
        #: Replaced, not changed, when the node's name changes (read once per run).
        self.context = context
        self._on_failure = on_failure
        self._on_database_error = on_database_error
        self._thread_name = thread_name
        now = time.monotonic()
        self._due = {id(service): now for service in self.services}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: :meth:`serve` is running, in whichever thread.
        self._serving = False

    def next_due(self, service: Service) -> float:
        """When ``service`` runs next (``time.monotonic()`` seconds)."""
        return self._due[id(service)]

    def run_due(self) -> None:
        """Run every service that is due; a database error is logged and waits for the
        service's next interval, any other exception propagates."""
        for service in self.services:
            if self._stop.is_set() or time.monotonic() < self._due[id(service)]:
                continue
            context = self.context
            # Scheduled first: a failing service is retried at its next interval, not at once.
            self._due[id(service)] = time.monotonic() + service.interval(context)
            try:
                service.run(context)
            except DatabaseError as exc:
                logger.warning(
                    "%s failed (%s: %s); it runs again in %.1fs",
                    service.name,
                    type(exc).__name__,
                    exc,
                    service.interval(context),
                    extra={"node": context.node_name, "error": str(exc)},
                )
                if self._on_database_error is not None:
                    self._on_database_error()
                connections[context.alias].close()
                close_old_connections()
            # Again after it ran: its interval may depend on what the run found (the
            # pruner comes back sooner while it is behind).
            self._due[id(service)] = time.monotonic() + service.interval(context)

    def serve(self) -> None:
        """Run services as they come due, in this thread, until :meth:`stop`."""
        self._stop.clear()
        self._serving = True
        try:
            while not self._stop.is_set():
                self.run_due()
                self._stop.wait(self._wait())
        finally:
            self._serving = False
            connections.close_all()

    def start(self) -> None:
        """:meth:`serve` on a daemon thread; an exception there goes to ``on_failure``."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._serve, name=self._thread_name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Run nothing more (the run in progress finishes)."""
        self._stop.set()

    def join(self, timeout: float = 10.0) -> None:
        """Wait up to ``timeout`` seconds for the thread started by :meth:`start` to end."""
        if self._thread is not None:
            self._thread.join(timeout)
            if not self._thread.is_alive():
                self._thread = None

    @property
    def running(self) -> bool:
        """Serving, in its own thread (:meth:`start`) or the caller's (:meth:`serve`)."""
        return self._serving or (self._thread is not None and self._thread.is_alive())

    def _serve(self) -> None:
        try:
            self.serve()
        except BaseException as exc:
            if self._on_failure is None:
                logger.exception("maintenance stopped")
            else:
                self._on_failure(exc)

    def _wait(self) -> float:
        if not self._due:
            return 1.0
        return max(min(self._due.values()) - time.monotonic(), 0.001)
