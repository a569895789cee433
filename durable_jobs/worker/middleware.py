"""The execution middleware chain wrapped around every attempt.

``DURABLE_JOBS["MIDDLEWARE"]`` lists factories in Django's middleware shape:
``factory(call_next)`` returns a ``callable(context)``. The first listed is the
outermost; integrations' middleware (:mod:`durable_jobs.hooks`) goes outside all of
them. The innermost ``call_next`` binds the payload and calls the handler, so what a
middleware raises (or lets through) is the attempt's outcome, exactly as if the handler
had raised it. For an ``async def`` handler the chain runs inside the event loop and
``call_next(context)`` returns an awaitable.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.module_loading import import_string

from durable_jobs import hooks
from durable_jobs.conf import get_settings
from durable_jobs.context import JobContext

Call = Callable[[JobContext], Any]


def chain() -> Call | None:
    """The chain in effect, built once per set of middleware; None when there is none."""
    configured = _configured()
    if not configured and not hooks.middleware:
        return None
    return _built(tuple(hooks.middleware), configured)


def innermost(context: JobContext) -> Any:
    """The end of every chain: bind the payload and call the handler (``execute`` puts
    the call on the context; an async handler's call is a coroutine)."""
    return context._invoke()


@functools.cache
def _configured() -> tuple[str, ...]:
    # Read once, not per attempt. Reading it checks it (E020): each path imports and is
    # callable, or ImproperlyConfigured says which one does not.
    return get_settings().middleware


@functools.lru_cache(maxsize=16)
def _built(integrations: tuple[hooks.Middleware, ...], configured: tuple[str, ...]) -> Call:
    # Built once, like Django's middleware: a factory may set things up when called.
    call: Call = innermost
    for factory in reversed([*integrations, *(import_string(path) for path in configured)]):
        call = factory(call)
    return call


@receiver(setting_changed)
def _rebuild(*, setting: str, **kwargs: Any) -> None:
    # A changed DURABLE_JOBS (override_settings in tests) builds its chain afresh.
    if setting == "DURABLE_JOBS":
        _configured.cache_clear()
        _built.cache_clear()
