"""Extension points for integrations: execution middleware, enqueue and finish hooks.

A project configures its own execution middleware in ``DURABLE_JOBS["MIDDLEWARE"]``;
an integration (such as :mod:`durable_jobs.contrib.opentelemetry`) adds its own here,
in code, placed outside the project's. The lists are empty by default, and then
nothing is built or called: an unused extension point costs nothing per job.

Finish hooks are how durable_jobs' own parts follow jobs to their end (a schedule's
outcome, Django's ``task_finished``): plain calls, where a receiver of the
:data:`~durable_jobs.signals.job_finished` signal would cost every job a pass through
Django's dispatcher.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from durable_jobs.context import JobContext
    from durable_jobs.models import Attempt, Job

logger = logging.getLogger("durable_jobs")

#: ``factory(call_next) -> callable(context)``, Django's middleware shape.
Middleware = Callable[[Callable[["JobContext"], Any]], Callable[["JobContext"], Any]]
#: ``hook(jobs) -> context manager``: given one enqueue's unsaved jobs (it may change
#: their ``meta``), entered before their insert and exited after it, the new jobs saved
#: by then (a job whose idempotency key was taken stays unsaved: ``pk`` None).
EnqueueHook = Callable[[Sequence["Job"]], AbstractContextManager[Any]]

#: ``hook(job, attempt, error)``: an attempt took ``job`` to a final state (what
#: :data:`~durable_jobs.signals.job_finished` says, sent after the hooks, in the same
#: thread); ``error`` is the exception the attempt ended with, or None.
FinishHook = Callable[["Job", "Attempt", "BaseException | None"], None]

#: Integration middleware, outermost first, all outside ``DURABLE_JOBS["MIDDLEWARE"]``.
middleware: list[Middleware] = []
enqueue_hooks: list[EnqueueHook] = []
finish_hooks: list[FinishHook] = []


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


def add_finish_hook(hook: FinishHook) -> None:
    """Call ``hook`` whenever an attempt finishes its job (once, however often added)."""
    if hook not in finish_hooks:
        finish_hooks.append(hook)


def remove_finish_hook(hook: FinishHook) -> None:
    if hook in finish_hooks:
        finish_hooks.remove(hook)


def job_finished(job: Job, attempt: Attempt, error: BaseException | None) -> None:
    """Call every finish hook; one that raises is logged and changes nothing (the
    outcome is committed), as a failing signal receiver would be."""
    for hook in finish_hooks:
        try:
            hook(job, attempt, error)
        except Exception:
            logger.exception("finish hook %r failed for job %s", hook, job.pk)
