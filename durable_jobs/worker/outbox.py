"""Outcomes decided and not yet written, and how they are written.

A finished job's outcome waits up to :data:`FLUSH_SECONDS` for company; the waiting
outcomes are then taken by a loop pass (:mod:`durable_jobs.worker.passes`), which writes
them together with the claim of the slots they freed. If the database refuses a batch
(a value it cannot store), the outcomes are written one at a time (:meth:`Outbox.flush`),
and one that is still refused is written without the handler's data.
"""

from __future__ import annotations

import collections
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from django.db import DataError, IntegrityError

from durable_jobs.db.engine import Engine
from durable_jobs.lifecycle import outcomes, recording
from durable_jobs.lifecycle.outcomes import Settlement

logger = logging.getLogger("durable_jobs.worker")

#: How long a finished job's outcome may wait for others to share its write. Outcomes
#: are written at once when no job is left running, and when BATCH are waiting.
FLUSH_SECONDS = 0.005
#: The most outcomes written in one statement.
BATCH = 500


@dataclass
class WorkerStats:
    claimed: int = 0
    finished: int = 0
    #: Outcomes recorded (written under the job's lease), by attempt outcome.
    outcomes: collections.Counter[str] = field(default_factory=collections.Counter)
    #: Outcomes refused because the job had moved on (rescued, cancelled): not counted above.
    rejected: int = 0
    #: Claim statements that leased at least one job, and writes of outcome batches: with
    #: ``claimed`` and ``finished``, how well the worker batches.
    claims: int = 0
    flushes: int = 0
    #: Loop passes rolled back by a deadlock or lock wait timeout and run again at once.
    transient: int = 0


class Outbox:
    def __init__(self, engine: Engine, stats: WorkerStats) -> None:
        self._engine = engine
        self._stats = stats
        self._pending: list[Settlement] = []
        #: When the oldest waiting outcome was added (``time.monotonic()``).
        self._since = 0.0

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, settlement: Settlement) -> None:
        if not self._pending:
            self._since = time.monotonic()
        self._pending.append(settlement)

    def due(self, *, running: int, stopping: bool) -> bool:
        """Whether to write now: no job is left running (nothing else is coming soon), a
        batch is full, the oldest has waited long enough, or the worker is stopping."""
        return bool(self._pending) and (
            running == 0
            or len(self._pending) >= BATCH
            or time.monotonic() - self._since >= FLUSH_SECONDS
            or stopping
        )

    def due_at(self) -> float | None:
        """When the waiting outcomes are due at the latest (``time.monotonic()``)."""
        return self._since + FLUSH_SECONDS if self._pending else None

    def take(self) -> list[Settlement]:
        """The waiting outcomes (at most BATCH, oldest first), for a pass to write; a pass
        that fails gives them back (:meth:`put_back`)."""
        batch = self._pending[:BATCH]
        del self._pending[:BATCH]
        if self._pending:
            self._since = time.monotonic()
        return batch

    def put_back(self, batch: Sequence[Settlement]) -> None:
        """Outcomes a pass did not write, to be written first."""
        if batch:
            self._pending[:0] = batch
            self._since = time.monotonic() - FLUSH_SECONDS  # due at once

    def written(self, batch: Sequence[Settlement], written: Sequence[bool]) -> None:
        """After a pass committed ``batch``: what follows an outcome's write."""
        if batch:
            self._written(batch, written)

    def flush(self) -> bool:
        """Write every waiting outcome (BATCH per statement); True if there were any."""
        if not self._pending:
            return False
        while self._pending:
            self._write_batch(min(len(self._pending), BATCH))
        return True

    def _write_batch(self, size: int) -> None:
        batch = self._pending[:size]
        try:
            # The batch in one statement (on SQLite, one turn of the write lock): one
            # commit for the batch instead of one per job.
            written = recording.write(batch, using=self._engine.alias)
        except (DataError, IntegrityError):
            pass  # one of them is unwritable: find it by writing them one at a time
        else:
            self._written(batch, written)
            del self._pending[:size]
            return
        for _ in range(size):
            self._write_alone(self._pending[0])
            self._pending.pop(0)

    def _write_alone(self, settlement: Settlement) -> None:
        alias = self._engine.alias
        try:
            self._count(settlement, recording.write_now([settlement], using=alias)[0])
        except (DataError, IntegrityError) as exc:
            # Not transient: the same write would fail forever. Record the outcome
            # without the handler's data; if even that fails, leave the job to rescue.
            job_id = settlement.job_id
            logger.error("could not record job %s's outcome in full: %s", job_id, exc)
            try:
                plain = outcomes.stripped(settlement)
                self._count(settlement, recording.write_now([plain], using=alias)[0])
            except (DataError, IntegrityError) as again:
                logger.error("dropped job %s's outcome (%s); it will be rescued", job_id, again)

    def _written(self, batch: Sequence[Settlement], written: Sequence[bool]) -> None:
        """After a batch of outcomes is committed."""
        self._stats.flushes += 1
        recording.after_commit(batch, written, using=self._engine.alias)
        for settlement, ok in zip(batch, written, strict=True):
            self._count(settlement, ok)

    def _count(self, settlement: Settlement, written: bool) -> None:
        if written:
            self._stats.outcomes[settlement.attempt.outcome] += 1
        else:
            self._stats.rejected += 1
