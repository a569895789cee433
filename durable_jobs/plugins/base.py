"""The protocol every periodic plugin follows."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from durable_jobs.worker.worker import Worker


class Plugin:
    """Runs every ``interval(worker)`` seconds on the worker's loop thread.

    A :class:`django.db.DatabaseError` from ``run`` is logged and retried at the next
    interval; any other exception stops the worker, so a broken heartbeat can never
    go unnoticed while leases quietly expire.
    """

    name = "plugin"

    def interval(self, worker: Worker) -> float:
        raise NotImplementedError

    def run(self, worker: Worker) -> None:
        raise NotImplementedError
