"""PostgreSQL advisory locks on text keys: a transaction's, or a session's around one.

Both kinds share one lock space (``hashtextextended(key, 7001)``), so they exclude each
other. A hash collision only serialises two keys' holders: what they guard stays exact.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError

if TYPE_CHECKING:
    from durable_jobs.db.engine import Engine

_LOCK = "SELECT pg_advisory{kind}lock(hashtextextended(%s, 7001))"


def lock_for_transaction(connection: Any, keys: Sequence[str]) -> None:
    """Hold each key until the current transaction ends; in sorted order, so that two
    holders of overlapping keys never deadlock."""
    with connection.cursor() as cursor:
        for key in sorted(keys):
            cursor.execute(_LOCK.format(kind="_xact_"), [key])


@contextlib.contextmanager
def locked_transaction(engine: Engine, key: str) -> Iterator[None]:
    """``engine.write_transaction()`` inside a session's lock on ``key``, taken before the
    transaction begins. Under REPEATABLE READ and SERIALIZABLE the first statement takes
    the snapshot, so a lock taken inside would be granted to a snapshot that misses the
    previous holder's commit (a throttle would count too few requests), or end in a
    serialization failure."""
    with session_lock(engine.connection, key), engine.write_transaction():
        yield


@contextlib.contextmanager
def session_lock(connection: Any, key: str) -> Iterator[None]:
    """Hold ``key`` for the block, outside any transaction: a transaction begun inside
    the block takes its snapshot after the lock is granted."""
    with connection.cursor() as cursor:
        cursor.execute(_LOCK.format(kind="_"), [key])
    try:
        yield
    finally:
        try:
            with connection.cursor() as cursor:
                cursor.execute(_LOCK.format(kind="_un"), [key])
        except DatabaseError:
            pass  # the connection is gone, and its session's locks with it
