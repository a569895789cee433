"""The loop's database passes, run on a thread of their own.

A pass writes the outcomes waiting in the outbox and claims jobs for the slots that are
free, in one transaction (:meth:`~durable_jobs.db.engine.Engine.pass_transaction`; on
PostgreSQL, for one queue, one statement). The pass thread runs it while the loop goes on
collecting finished jobs and handing out the last pass's, so that a worker's slots keep
running jobs while the database works, instead of waiting for it in turn.

At most one pass is in flight, and the loop hands over the next one only after it has
dispatched this one's jobs: every slot a pass claims for was free when the loop handed it
over, so the worker never holds more leases than its concurrency. Everything else stays
on the loop thread: which outcomes and slots a pass takes, and what follows its commit
(signals, logs, batches, dispatch), in the order the pass was written.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from django.db import DataError, IntegrityError, connections
from django.utils import timezone

from durable_jobs.db.upkeep import refresh_thread_connections
from durable_jobs.lifecycle.outcomes import Settlement
from durable_jobs.lifecycle.states import CLAIMABLE
from durable_jobs.lifecycle.transitions import settle, settle_and_claim
from durable_jobs.models import Job, Node

if TYPE_CHECKING:
    from durable_jobs.db.engine import Engine
    from durable_jobs.worker.config import Timing
    from durable_jobs.worker.outbox import Outbox, WorkerStats
    from durable_jobs.worker.running import RunningJobs


@dataclasses.dataclass(eq=False)
class Pass:
    """One pass: what the loop hands over, then what the pass thread wrote."""

    outcomes: list[Settlement]
    #: Queue -> slots to claim for.
    free: Mapping[str, int]
    node_id: int
    #: Queues with global limits, and queues whose keyed jobs were lately left waiting:
    #: both claimed in a transaction (see :func:`durable_jobs.flow.limits.settle_and_claim`).
    limited: frozenset[str] = frozenset()
    keyed: frozenset[str] = frozenset()
    #: Per outcome, whether it was written (its lease still held); set once committed.
    written: list[bool] = dataclasses.field(default_factory=list)
    #: The jobs leased, per queue in claim order; set once committed.
    leased: list[Job] = dataclasses.field(default_factory=list)
    #: How many of the queues' claims leased at least one job.
    claims: int = 0
    #: Queues whose keyed jobs were left waiting for a claim in a transaction.
    keyed_waiting: set[str] = dataclasses.field(default_factory=set)
    #: What the pass raised (nothing of it was committed then).
    error: BaseException | None = None


class PassThread:
    """Runs ``write(pass)`` for one pass at a time; ``done()`` is called after each."""

    def __init__(self, write: Callable[[Pass], None], done: Callable[[], None], name: str) -> None:
        self._write = write
        self._done = done
        self._inbox: queue.SimpleQueue[Pass | None] = queue.SimpleQueue()
        self._finished = threading.Event()
        self._current: Pass | None = None
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    @property
    def busy(self) -> bool:
        """A pass was handed over and not yet taken back (:meth:`take`)."""
        return self._current is not None

    def submit(self, work: Pass) -> None:
        assert self._current is None, "one pass at a time"
        self._current = work
        self._finished.clear()
        self._inbox.put(work)

    def take(self) -> Pass | None:
        """The pass in flight, if it has finished (once); else None."""
        if self._current is None or not self._finished.is_set():
            return None
        finished, self._current = self._current, None
        return finished

    def wait(self, timeout: float | None = None) -> Pass | None:
        """Wait up to ``timeout`` for the pass in flight to finish; :meth:`take` it."""
        if self._current is not None:
            self._finished.wait(timeout)
        return self.take()

    def stop(self, timeout: float) -> None:
        self._inbox.put(None)
        self._thread.join(timeout)

    def _serve(self) -> None:
        while (work := self._inbox.get()) is not None:
            try:
                self._write(work)
            except BaseException as exc:  # handed to the loop, which decides
                work.error = exc
                work.written, work.leased, work.claims = [], [], 0
                work.keyed_waiting.clear()
                # A broken connection is closed now, so the next pass opens a new one.
                refresh_thread_connections()
            finally:
                self._finished.set()
                self._done()
        connections.close_all()


class LoopPasses:
    """The passes of :class:`~durable_jobs.worker.Worker` (a mixin, as
    :class:`~durable_jobs.worker.shutdown.GracefulStop` is: these are the worker's own
    attributes and steps): what a pass takes, how the pass thread writes it, and what
    follows its commit."""

    engine: Engine
    alias: str
    node: Node
    timing: Timing
    queues: dict[str, int]
    capacity: int
    max_jobs: int | None
    stats: WorkerStats
    running: RunningJobs
    outbox: Outbox
    stopping: bool
    limited_queues: set[str]
    keyed_queues: set[str]
    #: Started with the worker.
    passes: PassThread
    _dispatch: Callable[[Job], None]

    def _outcomes_due(self) -> bool:
        """Whether the waiting outcomes should be written now (see :meth:`Outbox.due`), or
        half the slots are free again: their pass then claims while the other half runs."""
        if self.outbox.due(running=len(self.running), stopping=self.stopping):
            return True
        return bool(self.outbox) and 2 * sum(self._free_slots().values()) >= self.capacity

    def _free_slots(self) -> dict[str, int]:
        most = None if self.max_jobs is None else self.max_jobs - self.stats.claimed
        return self.running.free_slots(most)

    def _submit_pass(self) -> bool:
        """Hand the waiting outcomes and the free slots to the pass thread, if there is
        anything to write or claim."""
        free = self._free_slots()
        if not free and not self.outbox:
            return False
        outcomes = self.outbox.take()
        if self.outbox:
            # More outcomes wait than one pass writes: their jobs still hold leases until
            # a later pass writes them, so this one claims nothing (claiming their slots
            # now would hold more leases than the worker's concurrency).
            free = {}
        work = Pass(
            outcomes,
            free,
            node_id=self.node.pk,
            limited=frozenset(self.limited_queues),
            keyed=frozenset(self.keyed_queues),
        )
        self.passes.submit(work)
        return True

    def _take_pass(self) -> Pass | None:
        """The pass that finished, if one did, with what follows its commit done: its
        outcomes recorded and its jobs dispatched. Raises what the pass raised."""
        finished = self.passes.take()
        if finished is not None:
            self._apply(finished)
        return finished

    def _apply(self, finished: Pass) -> None:
        if finished.error is not None:
            self.outbox.put_back(finished.outcomes)
            if not isinstance(finished.error, DataError | IntegrityError):
                raise finished.error
            # An outcome the database refuses: write them one at a time (see the
            # outbox); the slots are claimed by the next pass.
            self.outbox.flush()
            return
        self.outbox.written(finished.outcomes, finished.written)
        self.stats.claims += finished.claims
        self.keyed_queues |= finished.keyed_waiting
        for job in finished.leased:
            self._dispatch(job)

    def _again(self, finished: Pass) -> bool:
        """Whether another pass should follow at once: its slots are still to claim (it
        failed on an outcome, or left keyed jobs waiting), or its outcomes made jobs
        available again now (a retry without delay, a hand-back), which a one-statement
        pass could not claim in the same statement."""
        if finished.error is not None or finished.keyed_waiting:
            return True
        now = timezone.now()
        return any(
            ok and settlement.target in CLAIMABLE and (settlement.available_at or now) <= now
            for settlement, ok in zip(finished.outcomes, finished.written, strict=True)
        )

    def _drained(self, finished: Pass) -> bool:
        """A burst worker's end: a pass claimed for free slots and found nothing, and
        nothing is left running or waiting to be written."""
        return (
            bool(finished.free)
            and not finished.leased
            and not self._again(finished)
            and not self.running
            and not self.outbox
        )

    def _write_and_claim(self) -> int:
        """One pass, waited for: write the waiting outcomes and lease jobs for the free
        slots; return how many were leased."""
        if not self._submit_pass():
            return 0
        finished = self.passes.wait()
        assert finished is not None
        self._apply(finished)
        return len(finished.leased)

    def _finish_pass(self) -> None:
        """Wait for the pass in flight, if any, and do what follows its commit (a stopping
        worker's first step: its jobs then run, or are handed back, like the others)."""
        finished = self.passes.wait() if hasattr(self, "passes") else None
        if finished is not None:
            self._apply(finished)

    def _write_pass(self, work: Pass) -> None:
        """On the pass thread: write ``work``'s outcomes and claim its slots (the first
        queue's claim with the outcomes, in one statement where the engine can)."""
        claims = list(work.free.items())
        locked = work.limited | work.keyed
        one_claim = len(claims) == 1 and claims[0][0] not in locked
        with self.engine.pass_transaction(one_claim=one_claim):
            if not claims:
                work.written = settle(work.outcomes, using=self.alias)
            for index, (queue_name, slots) in enumerate(claims):
                writes = settle_and_claim(
                    work.outcomes if index == 0 else [],
                    queue=queue_name,
                    limit=slots,
                    node_id=work.node_id,
                    lease_seconds=self.timing.lease_seconds,
                    limited=queue_name in work.limited,
                    keyed=queue_name in work.keyed,
                    using=self.alias,
                )
                if index == 0:
                    work.written = writes.written
                writes.leased.sort(key=lambda j: (-j.priority, j.available_at, j.pk))
                work.leased += writes.leased
                work.claims += bool(writes.leased)
                if writes.keyed_waiting:
                    work.keyed_waiting.add(queue_name)
