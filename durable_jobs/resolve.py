"""Which handler runs a job: a ``@job`` handler by its registered name, or a Task of
Django's Tasks framework by its module path (for jobs enqueued through
:mod:`durable_jobs.backends.tasks`, and schedules that name a Task)."""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any

from durable_jobs import registry
from durable_jobs.exceptions import UnknownJob

if TYPE_CHECKING:
    from durable_jobs.handlers import JobHandler
    from durable_jobs.models import Job


def handler_for(job: Job) -> JobHandler[..., Any]:
    """The handler that runs ``job``; :class:`UnknownJob` if this process has none."""
    alias = job.task_backend
    if alias is None:
        return registry.get_handler(job.name)
    return _task_handler(job.name, alias)


def handler_named(name: str) -> JobHandler[..., Any]:
    """The ``@job`` handler registered as ``name``, else the Task at that module path
    (run on the backend its ``@task`` names); :class:`UnknownJob` if neither exists."""
    try:
        return registry.get_handler(name)
    except UnknownJob:
        if not (isinstance(name, str) and "." in name and tasks_framework_installed()):
            raise
        # Imported here: the Tasks framework is optional (Django 5.2 without the backport).
        from durable_jobs.backends.resolving import handler_of, task_at

        task = task_at(name)  # imported once: a tick resolves a schedule's name each time
        if task is None:
            raise  # neither: the message of a missing @job handler
    return handler_of(task, None, name)


def tasks_framework_installed() -> bool:
    """Django's Tasks framework can be imported: Django 6.0+, or the django-tasks backport."""
    return (
        importlib.util.find_spec("django.tasks") is not None
        or importlib.util.find_spec("django_tasks") is not None
    )


def _task_handler(path: str, alias: str | None) -> JobHandler[..., Any]:
    # Imported here: the Tasks framework is optional (Django 5.2 without the backport).
    from durable_jobs.backends.resolving import handler_at

    return handler_at(path, alias)
