"""Extension points for integrations: execution middleware and enqueue hooks.

A project configures its own execution middleware in ``DURABLE_JOBS["MIDDLEWARE"]``;
an integration (such as :mod:`durable_jobs.contrib.opentelemetry`) adds its own here,
in code, placed outside the project's. Both lists are empty by default, and then
nothing is built or called: an unused extension point costs nothing per job.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from durable_jobs.context import JobContext
    from durable_jobs.models import Job

#: ``factory(call_next) -> callable(context)``, Django's middleware shape.
Middleware = Callable[[Callable[["JobContext"], Any]], Callable[["JobContext"], Any]]
#: ``hook(jobs) -> context manager``: given one enqueue's unsaved jobs (it may change
#: their ``meta``), entered before their insert and exited after it, the new jobs saved
#: by then (a job whose idempotency key was taken stays unsaved: ``pk`` None).
EnqueueHook = Callable[[Sequence["Job"]], AbstractContextManager[Any]]

#: Integration middleware, outermost first, all outside ``DURABLE_JOBS["MIDDLEWARE"]``.
middleware: list[Middleware] = []
enqueue_hooks: list[EnqueueHook] = []


def add_middleware(factory: Middleware) -> None:
    """Wrap every attempt in ``factory``'s middleware (once, however often it is added)."""
    if factory not in middleware:
        middleware.append(factory)


def remove_middleware(factory: Middleware) -> None:
    if factory in middleware:
        middleware.remove(factory)


def add_enqueue_hook(hook: EnqueueHook) -> None:
    """Call ``hook`` around every enqueue's insert (once, however often it is added)."""
    if hook not in enqueue_hooks:
        enqueue_hooks.append(hook)


def remove_enqueue_hook(hook: EnqueueHook) -> None:
    if hook in enqueue_hooks:
        enqueue_hooks.remove(hook)
