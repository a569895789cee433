"""The worker runtime: a loop that claims, dispatches and records, over a pool of threads
or of child processes (:mod:`.executors`).

Public: :class:`Worker` and :func:`parse_queues`. The modules of this package are
internal.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from durable_jobs.worker.config import parse_queues
    from durable_jobs.worker.worker import Worker

__all__ = ["Worker", "parse_queues"]


def __getattr__(name: str) -> Any:
    # Imported on first use, because they import the models: a child of the process
    # executor imports durable_jobs.worker.process_child before Django is set up.
    if name == "Worker":
        from durable_jobs.worker.worker import Worker

        return Worker
    if name == "parse_queues":
        from durable_jobs.worker.config import parse_queues

        return parse_queues
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
