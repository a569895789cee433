"""The jobs a worker has dispatched and not yet seen finish: its slots.

Pool threads report results (:meth:`RunningJobs.report`); only the loop thread reads
them (:meth:`RunningJobs.collect`) and decides what a result means. A job the loop has
already *resolved* (timed out, handed back) ignores its late result, so an outcome is
recorded once even when a handler's return races its timeout.
"""

from __future__ import annotations

import collections
import queue
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from durable_jobs import resolve
from durable_jobs.exceptions import UnknownJob
from durable_jobs.lifecycle import outcomes
from durable_jobs.lifecycle.outcomes import RunResult
from durable_jobs.models import Job, Outcome
from durable_jobs.worker.wakeups import LoopWake

if TYPE_CHECKING:
    from durable_jobs.handlers import JobHandler

#: Extra time an async handler gets to report its own timeout before the loop records it.
ASYNC_TIMEOUT_GRACE = 1.0


@dataclass(eq=False)
class Running:
    job: Job
    #: Resolved once, at dispatch; None when no handler has the job's name here.
    handler: JobHandler[..., Any] | None
    #: When the loop records a timeout (``time.monotonic()``), if the job has one.
    deadline: float | None
    #: The loop already recorded an outcome (timeout, hand-back); ignore the late result.
    resolved: bool = False

    @classmethod
    def dispatched(cls, job: Job) -> Running:
        """A job about to be handed to the pool, its handler looked up once, here."""
        try:
            handler = resolve.handler_for(job)
        except UnknownJob:
            handler = None  # the attempt fails with UnknownJob; a node that has it may retry
        deadline = None
        if job.timeout:
            grace = ASYNC_TIMEOUT_GRACE if handler is not None and handler.is_async else 0
            deadline = time.monotonic() + job.timeout + grace
        return cls(job=job, handler=handler, deadline=deadline)

    def unreported(self, outcome: Outcome, error: BaseException | None = None) -> RunResult:
        """A result the handler did not report: the loop's own (timeout, hand-back, loss)."""
        now = timezone.now()
        return outcomes.unreported(
            self.job, now=now, outcome=outcome, error=error, handler=self.handler
        )


class RunningJobs:
    """Per job id, what runs; per queue, how many slots are taken."""

    def __init__(self, queues: Mapping[str, int], wake: LoopWake) -> None:
        self._queues = dict(queues)
        self._wake = wake
        self._running: dict[int, Running] = {}
        self._per_queue: collections.Counter[str] = collections.Counter()
        self._results: queue.SimpleQueue[tuple[Running, RunResult | None]] = queue.SimpleQueue()

    def __len__(self) -> int:
        return len(self._running)

    def add(self, running: Running) -> None:
        self._running[running.job.pk] = running
        self._per_queue[running.job.queue] += 1

    def report(self, running: Running, result: RunResult | None) -> None:
        """From a pool thread: ``running`` ended (``result`` None: it was interrupted)."""
        self._results.put((running, result))
        self._wake.result_ready()

    def has_reports(self) -> bool:
        return not self._results.empty()

    def collect(self) -> list[tuple[Running, RunResult | None]]:
        """The jobs reported since the last call, their slots freed; resolved ones left out."""
        finished: list[tuple[Running, RunResult | None]] = []
        while True:
            try:
                running, result = self._results.get_nowait()
            except queue.Empty:
                return finished
            self._running.pop(running.job.pk, None)
            self._per_queue[running.job.queue] -= 1
            if not running.resolved:
                finished.append((running, result))

    def free_slots(self, most: int | None = None) -> dict[str, int]:
        """Per queue, how many jobs may be leased now (at most ``most`` in each)."""
        free = {}
        for name, concurrency in self._queues.items():
            slots = concurrency - self._per_queue[name]
            if most is not None:
                slots = min(slots, most)
            if slots > 0:
                free[name] = slots
        return free

    def unresolved(self) -> list[Running]:
        return [running for running in self._running.values() if not running.resolved]

    def past_deadline(self, now: float) -> list[Running]:
        return [r for r in self.unresolved() if r.deadline is not None and now >= r.deadline]

    def next_deadline(self) -> float | None:
        deadlines = [r.deadline for r in self.unresolved() if r.deadline is not None]
        return min(deadlines, default=None)

    def leases(self) -> dict[Any, list[int]]:
        """Lease token -> ids of the jobs that run here and are still held."""
        out: dict[Any, list[int]] = collections.defaultdict(list)
        for running in self.unresolved():
            out[running.job.lease_token].append(running.job.pk)
        return out
