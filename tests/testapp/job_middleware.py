"""Execution middleware the tests configure in ``DURABLE_JOBS["MIDDLEWARE"]``.

Each records what it saw in ``SEEN`` (this process's list), so that a test running a
worker thread can check the order and what ``call_next`` returned.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from durable_jobs import JobContext, Snooze

SEEN: list[str] = []
#: How often each factory was called (once per chain, not per attempt).
BUILT: list[str] = []


def _recording(name: str) -> Callable[[Callable[[JobContext], Any]], Callable[[JobContext], Any]]:
    def factory(call_next: Callable[[JobContext], Any]) -> Callable[[JobContext], Any]:
        BUILT.append(name)

        def middleware(context: JobContext) -> Any:
            SEEN.append(f"{name}:before:{context.job.name}:{context.attempt}")
            result = call_next(context)
            if inspect.isawaitable(result):
                # An async handler: the chain runs in its event loop; finish after it.
                async def after() -> Any:
                    value = await result
                    SEEN.append(f"{name}:after-await:{value!r}")
                    return value

                return after()
            SEEN.append(f"{name}:after:{result!r}")
            return result

        return middleware

    return factory


outer = _recording("outer")
inner = _recording("inner")


def async_factory(call_next: Callable[[JobContext], Any]) -> Callable[[JobContext], Any]:
    async def middleware(context: JobContext) -> Any:
        SEEN.append(f"async:before:{context.job.name}")
        result = call_next(context)
        value = (await result) if inspect.isawaitable(result) else result
        SEEN.append(f"async:after:{value!r}")
        return value

    return middleware


def snoozing(call_next: Callable[[JobContext], Any]) -> Callable[[JobContext], Any]:
    def middleware(context: JobContext) -> Any:
        if context.job.name == "tests.add":
            raise Snooze(120)
        return call_next(context)

    return middleware


def failing(call_next: Callable[[JobContext], Any]) -> Callable[[JobContext], Any]:
    def middleware(context: JobContext) -> Any:
        try:
            result = call_next(context)
        except Exception as exc:
            SEEN.append(f"failing:saw:{type(exc).__name__}")
            raise
        if inspect.isawaitable(result):
            return _watched(result)
        return result

    async def _watched(result: Any) -> Any:
        try:
            return await result
        except Exception as exc:
            SEEN.append(f"failing:saw:{type(exc).__name__}")
            raise

    return middleware


not_callable = 42
