"""A fixed pool of daemon threads that run jobs and can be interrupted.

Daemon threads, because a stopping worker must be able to exit while a handler is
stuck: its job has already been handed back by then. ``interrupt()`` raises an
exception inside a running handler (``PyThreadState_SetAsyncExc``). That stops
Python code at its next bytecode; a call blocked in C (a socket read, ``time.sleep``
of a long period) only sees it when the call returns, and until then its thread,
and so its slot, stays busy. The worker has already recorded the job's outcome by
the time it interrupts, so a late return changes nothing.
"""

from __future__ import annotations

import ctypes
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from django.db import connections


class Interrupted(BaseException):
    """Raised inside a handler's thread to stop it. A BaseException, so ``except Exception`` in
    user code does not swallow it."""


class TimedOut(Interrupted):
    """The :class:`Interrupted` of a handler stopped for running past its timeout (a plain
    ``Interrupted`` is a stopping worker's hand-back), so middleware can tell them apart."""


class ThreadPool:
    """``work(item)`` runs on a pool thread; ``report(item, result)`` gets its result.

    ``result`` is None when the item was interrupted.
    """

    def __init__(
        self,
        size: int,
        work: Callable[[Any], Any],
        report: Callable[[Any, Any], None],
        name: str = "durable-jobs",
    ) -> None:
        self._work = work
        self._report = report
        self._inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._current: dict[int, Any] = {}  # thread id -> the item it runs
        self._threads = [
            threading.Thread(target=self._loop, name=f"{name}-{i}", daemon=True)
            for i in range(size)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, item: Any) -> None:
        self._inbox.put(item)

    def interrupt(self, item: Any, reason: type[Interrupted] = Interrupted) -> bool:
        """Raise ``reason`` in the thread running ``item``, if one still is."""
        with self._lock:
            for thread_id, running in self._current.items():
                if running is item:
                    _set_async_exc(thread_id, reason)
                    return True
        return False

    def wait_started(self) -> None:
        """Threads are ready as soon as they exist."""

    def shutdown(self, timeout: float = 5.0) -> None:
        """Stop the threads once they are idle; wait up to ``timeout`` for them (not for a
        handler stuck in a blocking call: such a thread is a daemon and dies with the process)."""
        for _ in self._threads:
            self._inbox.put(_STOP)
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(deadline - time.monotonic(), 0))

    def _loop(self) -> None:
        thread_id = threading.get_ident()
        while True:
            item = self._inbox.get()
            if item is _STOP:
                # Threads keep their database connections between jobs; close them now.
                connections.close_all()
                return
            result = self._run_one(thread_id, item)
            self._report(item, result)

    def _run_one(self, thread_id: int, item: Any) -> Any:
        result = None
        try:
            try:
                with self._lock:
                    self._current[thread_id] = item
                result = self._work(item)
            finally:
                self._clear(thread_id)
        except Interrupted:
            pass  # it may land anywhere before _clear; the worker already recorded the outcome
        return result

    def _clear(self, thread_id: int) -> None:
        # Interruptions are only requested under the lock while _current names the item;
        # dropping the item and any pending interruption under the lock means none can
        # reach the next job.
        while True:
            try:
                with self._lock:
                    self._current.pop(thread_id, None)
                    _set_async_exc(thread_id, None)
                return
            except Interrupted:
                continue


_STOP = object()


def _set_async_exc(thread_id: int, exc: type[BaseException] | None) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(exc) if exc is not None else None
    )
