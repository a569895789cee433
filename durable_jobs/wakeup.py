"""In-process wake-ups: an enqueue that commits wakes the workers running in this process.

Other processes learn of new jobs through the database (NOTIFY on PostgreSQL) or by
polling; this covers the in-process worker and tests at no cost.
"""

from __future__ import annotations

import threading
import weakref

_waiters: weakref.WeakSet[threading.Event] = weakref.WeakSet()
_lock = threading.Lock()


def subscribe(event: threading.Event) -> None:
    with _lock:
        _waiters.add(event)


def unsubscribe(event: threading.Event) -> None:
    with _lock:
        _waiters.discard(event)


def wake_local_workers() -> None:
    with _lock:
        waiters = list(_waiters)
    for event in waiters:
        event.set()
