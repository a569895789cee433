"""The worker runtime: the claim/dispatch/acknowledge loop, its thread pool, and nodes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["Worker", "parse_queues"]

if TYPE_CHECKING:
    from durable_jobs.worker.worker import Worker, parse_queues


def __getattr__(name: str) -> Any:
    # Lazy, so that modules the worker itself imports (acks, plugins) can import
    # durable_jobs.worker.execute without importing the worker first.
    if name in __all__:
        from durable_jobs.worker import worker

        return getattr(worker, name)
    raise AttributeError(f"module 'durable_jobs.worker' has no attribute {name!r}")
