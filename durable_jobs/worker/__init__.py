"""The worker runtime: a loop that claims, dispatches and records, over a thread pool.

Public: :class:`Worker` and :func:`parse_queues`. The modules of this package are
internal.
"""

from durable_jobs.worker.config import parse_queues
from durable_jobs.worker.worker import Worker

__all__ = ["Worker", "parse_queues"]
