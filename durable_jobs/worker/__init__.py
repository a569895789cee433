"""The worker runtime: claims jobs, runs them on a thread pool, acknowledges outcomes."""

from durable_jobs.worker.worker import Worker, parse_queues

__all__ = ["Worker", "parse_queues"]
