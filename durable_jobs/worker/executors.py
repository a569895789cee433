"""Where a worker's jobs run: its thread pool, or a process pool for each process queue.

``DURABLE_JOBS["QUEUES"][name]["executor"]`` chooses per queue: ``"thread"`` (the
default) runs the queue's jobs on the worker's threads, ``"process"`` each in a pooled
child process (:mod:`.process_pool`). Both kinds of pool take the same three calls
(submit, interrupt, shutdown) and report to the same slots, so the loop does not need
to know which one runs a job.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from django.core.exceptions import ImproperlyConfigured
from django.db import connections

from durable_jobs.conf import get_settings
from durable_jobs.models import Node
from durable_jobs.worker.pool import Interrupted, ThreadPool
from durable_jobs.worker.process_pool import ProcessPool, ProcessSetup


class Pool(Protocol):
    def submit(self, item: Any) -> None: ...

    def interrupt(self, item: Any, reason: type[Interrupted] = Interrupted) -> bool: ...

    def shutdown(self, timeout: float = 5.0) -> None: ...

    def wait_started(self) -> None: ...


class Executors:
    """The pools of one worker, by queue."""

    def __init__(self, by_queue: Mapping[str, Pool]) -> None:
        self.by_queue = dict(by_queue)

    @classmethod
    def start(
        cls,
        queues: Mapping[str, int],
        *,
        work: Callable[[Any], Any],
        report: Callable[[Any, Any], None],
        node: Node,
        alias: str,
        lease_seconds: float,
    ) -> Executors:
        """Start the pools for ``queues`` (name -> concurrency)."""
        configured = get_settings().queues
        in_processes = {
            name: concurrency
            for name, concurrency in queues.items()
            if name in configured and configured[name].executor == "process"
        }
        by_queue: dict[str, Pool] = {}
        thread_slots = sum(c for name, c in queues.items() if name not in in_processes)
        if thread_slots:
            threads = ThreadPool(thread_slots, work=work, report=report, name=node.name)
            by_queue.update({name: threads for name in queues if name not in in_processes})
        for name, concurrency in in_processes.items():
            options = configured[name]
            setup = ProcessSetup(
                settings=settings_module(),
                databases=database_names(alias),
                alias=alias,
                node=node.name,
                lease_seconds=lease_seconds,
                max_jobs_per_child=options.max_jobs_per_child,
                max_memory_per_child=options.max_memory_per_child,
            )
            by_queue[name] = ProcessPool(
                concurrency, report, setup=setup, name=f"{node.name}-{name}", worker_node=node
            )
        executors = cls(by_queue)
        for pool in executors.pools():  # the children of every queue start side by side
            pool.wait_started()
        return executors

    def submit(self, running: Any) -> None:
        self.by_queue[running.job.queue].submit(running)

    def interrupt(self, running: Any, reason: type[Interrupted] = Interrupted) -> bool:
        return self.by_queue[running.job.queue].interrupt(running, reason)

    def shutdown(self, timeout: float = 5.0) -> None:
        for pool in self.pools():
            pool.shutdown(timeout)

    def pools(self) -> list[Pool]:
        """Each pool once (the thread pool serves every thread queue)."""
        return list({id(pool): pool for pool in self.by_queue.values()}.values())


def settings_module() -> str:
    module = os.environ.get("DJANGO_SETTINGS_MODULE")
    if not module:
        raise ImproperlyConfigured(
            'The "process" executor starts processes that set Django up from the settings '
            "module: set DJANGO_SETTINGS_MODULE (settings.configure() cannot be repeated in "
            "a child process)."
        )
    return module


def database_names(alias: str) -> dict[str, str]:
    """Alias -> the database name this process uses; refused when the jobs' database
    (``alias``) is an in-memory SQLite database, which no other process can open."""
    names = {name: str(connections[name].settings_dict["NAME"]) for name in connections}
    if connections[alias].vendor == "sqlite" and _in_memory(names[alias]):
        raise ImproperlyConfigured(
            'The "process" executor needs a database its child processes can open; '
            f"database {alias!r} is an in-memory SQLite database. Use a file."
        )
    return names


def _in_memory(name: str) -> bool:
    return name == ":memory:" or "mode=memory" in name or name == ""
