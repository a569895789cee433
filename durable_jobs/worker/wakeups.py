"""What wakes an idle worker's loop: its own event, PostgreSQL's NOTIFY, SQLite's counter.

Every database is also polled (``POLL_INTERVAL``); these only make a new job start
sooner. Enqueues in this process wake the loop through :mod:`durable_jobs.wakeup`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection

from durable_jobs.backoff import Doubling
from durable_jobs.conf import get_settings
from durable_jobs.db.contract import Listener
from durable_jobs.db.engine import Engine

logger = logging.getLogger("durable_jobs.worker")

#: An idle SQLite worker reads the database's change counter (no I/O) every CHECK_MIN
#: seconds after a change, backing off to CHECK_MAX while nothing changes.
CHECK_MIN = 0.002
CHECK_MAX = 0.02
#: Waits of the NOTIFY listener between reconnections.
RECONNECT = Doubling(0.5, 10.0)


class LoopWake(threading.Event):
    """The loop's wake-up. ``set()`` (an enqueue in this process, a notification, a stop)
    also says that new jobs may be waiting; ``result_ready()`` (a pool thread finished a
    job) does not, so the loop can let outcomes gather before it writes and claims."""

    def __init__(self) -> None:
        super().__init__()
        self._new_work = False
        # set() and take() under one lock: a set() between take()'s read of the flag and
        # its clear of the event would otherwise be lost (until the next poll).
        self._flag_lock = threading.Lock()

    def set(self) -> None:
        with self._flag_lock:
            self._new_work = True
            super().set()

    def result_ready(self) -> None:
        # No flag: the loop collects results after take(), so none set before is missed.
        super().set()

    def take(self) -> bool:
        """Clear the wake-up; return whether new work was signalled since the last take."""
        with self._flag_lock:
            new_work, self._new_work = self._new_work, False
            super().clear()
        return new_work


class NotifyListener:
    """A thread that waits for notifications naming ``queues`` and wakes the loop; it
    reconnects with backoff when its connection drops (``on_failure`` is told)."""

    def __init__(
        self,
        listener: Listener,
        queues: Collection[str],
        wake: LoopWake,
        on_failure: Callable[[], None],
        name: str,
    ) -> None:
        self._listener = listener
        self._queues = queues
        self._wake = wake
        self._on_failure = on_failure
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._listen, name=name, daemon=True)

    @classmethod
    def start_for(
        cls,
        engine: Engine,
        queues: Collection[str],
        wake: LoopWake,
        on_failure: Callable[[], None],
        node_name: str,
    ) -> NotifyListener | None:
        """A running listener for a worker, or None where the database cannot notify."""
        listener = engine.listener(get_settings().notify_channel)
        if listener is None:
            return None
        started = cls(listener, queues, wake, on_failure, name=f"{node_name}-listen")
        started._thread.start()
        return started

    def stop(self, timeout: float = 5.0) -> None:
        self._closing.set()
        self._thread.join(timeout=timeout)

    def _listen(self) -> None:
        failures = 0
        while not self._closing.is_set():
            try:
                queues = self._listener.wait(timeout=1.0)
                failures = 0
            except Exception as exc:
                logger.warning("listener lost its connection (%s); reconnecting", exc)
                self._on_failure()
                self._listener.close()
                failures += 1
                self._closing.wait(RECONNECT.delay(failures))
                self._wake.set()  # poll once, in case a notification was missed meanwhile
                continue
            if any(q in self._queues for q in queues):
                self._wake.set()
        self._listener.close()


class ChangeCounter:
    """SQLite, where no notification reaches a worker in another process: whether another
    connection committed since the last look, read when due (see :data:`CHECK_MIN`)."""

    def __init__(self, engine: Engine, poll_interval: float) -> None:
        self._engine = engine
        self._poll_interval = poll_interval
        self._last = engine.change_counter()
        self._gap = CHECK_MIN
        self.next_check = 0.0

    @property
    def available(self) -> bool:
        """False where the database has no change counter (PostgreSQL)."""
        return self._last is not None

    def changed(self) -> bool:
        if self._last is None or time.monotonic() < self.next_check:
            return False
        current = self._engine.change_counter()
        changed = current != self._last
        self._last = current
        gap = CHECK_MIN if changed else min(self._gap * 2, CHECK_MAX)
        self._gap = min(gap, self._poll_interval)
        self.next_check = time.monotonic() + self._gap
        return changed
