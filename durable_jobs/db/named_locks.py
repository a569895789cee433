"""Named locks for MySQL and MariaDB (``GET_LOCK``), held until the transaction ends.

InnoDB has no transaction-scoped named lock: ``GET_LOCK`` belongs to the session. So a
lock taken inside a transaction is remembered on the connection and released when that
transaction ends: by :func:`released_after` around a transaction the engine opened, or,
inside the project's own transaction, when it commits (``on_commit``) or, after a
rollback, before the connection's next transaction of the engine's.

Names are hashed, with the database's name, to fit the servers' 64-character limit. A
hash collision only serialises two keys' holders: what they guard stays exact.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator, Sequence
from typing import Any

from django.db import DatabaseError, OperationalError, transaction

#: Seconds to wait for a lock before the transaction fails (a holder stuck that long has
#: lost its connection or its mind; the server's own lock-wait timeout is 50 s).
WAIT_SECONDS = 30

_HELD = "_durable_jobs_named_locks"
#: Set on a connection while a transaction opened by :func:`released_after` runs.
_OWN = "_durable_jobs_own_transaction"


def _name(key: str, database: str) -> str:
    # Named locks belong to the server, not to a database: the database's name keeps two
    # projects (or a project's test run) on one server from waiting on each other's keys.
    return "durable_jobs:" + hashlib.sha1(f"{database}\0{key}".encode()).hexdigest()


def held(connection: Any) -> set[str]:
    """The lock names this connection's session holds on behalf of a transaction (a new
    session, after a reconnection, holds none)."""
    session = connection.connection
    found: tuple[Any, set[str]] | None = getattr(connection, _HELD, None)
    if found is None or found[0] is not session:
        found = (session, set())
        setattr(connection, _HELD, found)
    return found[1]


def lock(connection: Any, keys: Sequence[str]) -> None:
    """Take each key's lock (in sorted order, so two holders of overlapping keys never
    wait on each other in a cycle) for the rest of the current transaction."""
    with connection.cursor() as cursor:
        names = held(connection)
        database = str(connection.settings_dict["NAME"])
        wanted = sorted({_name(key, database) for key in keys} - names)
        if not wanted:
            return
        if not getattr(connection, _OWN, False):
            # The project's transaction: released when it commits; after a rollback, by
            # the next transaction the engine opens on this connection (released_after).
            transaction.on_commit(lambda: release(connection), using=connection.alias)
        for name in wanted:
            cursor.execute("SELECT GET_LOCK(%s, %s)", [name, WAIT_SECONDS])
            if cursor.fetchone()[0] != 1:
                raise OperationalError(
                    f"durable_jobs waited {WAIT_SECONDS}s for a concurrency-key lock; "
                    "another connection holds it. The transaction is rolled back."
                )
            names.add(name)


def release(connection: Any) -> None:
    """Release every lock this connection holds for a transaction."""
    names = held(connection)
    if not names:
        return
    try:
        with connection.cursor() as cursor:
            for name in sorted(names):
                cursor.execute("SELECT RELEASE_LOCK(%s)", [name])
    except DatabaseError:
        pass  # the connection is gone, and its session's locks with it
    names.clear()


@contextlib.contextmanager
def released_after(connection: Any) -> Iterator[None]:
    """Around the outermost transaction the engine opens: release what it locked, whether
    it committed or rolled back. Locks left over from a rolled back transaction of the
    project's go first."""
    release(connection)
    setattr(connection, _OWN, True)
    try:
        yield
    finally:
        setattr(connection, _OWN, False)
        release(connection)
