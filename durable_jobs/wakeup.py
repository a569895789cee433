"""In-process wake-ups: an enqueue that commits wakes the workers running in this process.

Other processes learn of new jobs through the database (NOTIFY on PostgreSQL) or by
polling; this covers the in-process worker and tests at no cost.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Protocol


class Waiter(Protocol):
    def set(self) -> None: ...


_waiters: weakref.WeakSet[Waiter] = weakref.WeakSet()
_lock = threading.Lock()


def subscribe(event: Waiter) -> None:
    with _lock:
        _waiters.add(event)


def unsubscribe(event: Waiter) -> None:
    with _lock:
        _waiters.discard(event)


def wake_local_workers() -> None:
    with _lock:
        waiters = list(_waiters)
    for event in waiters:
        event.set()


# -- one wake-up per queue per transaction ---------------------------------------------------
#
# An enqueue inside a transaction sends its wake-ups (NOTIFY, the local workers' event)
# when the transaction commits. A thousand enqueues of one queue in one transaction need
# only the first one's. What was sent is remembered on the connection together with its
# list of on-commit hooks: Django replaces that list when the transaction ends and when
# a savepoint rolls back (which also discards a NOTIFY sent inside it), so a new list
# means nothing was sent in what is left of the transaction.


def already_woken(connection: Any, queue: str) -> bool:
    """Whether an enqueue of ``queue`` in the connection's current transaction has already
    arranged the wake-ups. Always False outside a transaction (each statement commits)."""
    if not connection.in_atomic_block:
        return False
    hooks, queues = getattr(connection, "_durable_jobs_woken", (None, ()))
    return hooks is connection.run_on_commit and queue in queues


def mark_woken(connection: Any, queue: str) -> None:
    """Remember that the current transaction will wake the workers of ``queue``."""
    if not connection.in_atomic_block:
        return
    hooks, queues = getattr(connection, "_durable_jobs_woken", (None, frozenset()))
    if hooks is not connection.run_on_commit:
        queues = frozenset()
    connection._durable_jobs_woken = (connection.run_on_commit, queues | {queue})
