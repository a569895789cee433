"""The values the engine contract (:class:`~durable_jobs.db.engine.Engine`) passes around:
what a claim asks for, what a loop pass wrote, the keyed jobs flow control chooses among,
and a source of wake-ups. Importable from :mod:`durable_jobs.db.engine` too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Protocol

from durable_jobs.models import Job


@dataclasses.dataclass(frozen=True)
class ClaimRequest:
    """What to lease, for whom, and for how long."""

    queue: str
    limit: int
    node_id: int | None
    lease_seconds: float


@dataclasses.dataclass
class PassWrites:
    """What :meth:`Engine.settle_and_claim` wrote."""

    #: Per settlement, whether it was written (its lease still held).
    written: list[bool]
    leased: list[Job]
    #: Jobs with a concurrency key were picked and left waiting, for a claim in a
    #: transaction (the engine wrote in one statement, outside any): flow control chooses
    #: among them only under their keys' locks.
    keyed_waiting: bool = False


#: A picked job with a concurrency key: ``(id, key, concurrency_limit)``.
KeyedCandidate = tuple[int, str, int]
#: Of the keyed candidates (in claim order), the ids that may start now.
ChooseKeyed = Callable[[Sequence[KeyedCandidate]], list[int]]


class Listener(Protocol):
    """A blocking source of wake-ups for idle workers (PostgreSQL's LISTEN): ``wait``
    blocks up to ``timeout`` seconds and returns the queues notifications named."""

    def wait(self, timeout: float) -> list[str]: ...
    def close(self) -> None: ...
