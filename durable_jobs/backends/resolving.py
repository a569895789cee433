"""Finding the handler of a Task by its module path, on a ``TASKS`` alias: how a worker
resolves a task's job, and a schedule a Task it names."""

from __future__ import annotations

from django.utils.module_loading import import_string

from durable_jobs.backends import compat
from durable_jobs.backends.compat import Task
from durable_jobs.backends.task_handler import TaskHandler
from durable_jobs.backends.tasks import DurableJobsBackend
from durable_jobs.exceptions import UnknownJob


def handler_at(path: str, alias: str | None) -> TaskHandler:
    """The handler of the Task at module path ``path``, on backend ``alias`` (None: the
    Task's own); :class:`UnknownJob` if there is no such Task or backend here."""
    try:
        task = import_string(path)
    # Not only ImportError: a module that fails as it is imported must fail this job's
    # attempt, not the worker's loop that resolves it.
    except Exception as exc:
        raise UnknownJob(
            path,
            f"No Task can be imported from {path!r} ({type(exc).__name__}: {exc}). The "
            "task's module must be importable in the worker's process; check that it was "
            "deployed.",
        ) from exc
    if not isinstance(task, Task):
        raise UnknownJob(
            path, f"{path!r} is {type(task).__name__}, not a Task; decorate it with @task."
        )
    return handler_of(task, alias, path)


def handler_of(task: Task, alias: str | None, path: str) -> TaskHandler:
    """The handler of ``task`` on backend ``alias`` (None: the Task's own)."""
    backend = backend_named(alias or task.backend, path)
    try:
        return backend.handler_for(task)
    except Exception as exc:
        # A Task changed since it was enqueued (unique= naming a parameter it lost): its
        # jobs fail their attempts with this, and the worker's loop goes on.
        raise UnknownJob(
            path, f"The task {path} cannot be run here: {type(exc).__name__}: {exc}"
        ) from exc


def task_at(path: str) -> Task | None:
    """The Task ``path`` imports as, or None."""
    try:
        found = import_string(path)
    except Exception:  # as above: any failure to import means no Task there
        return None
    return found if isinstance(found, Task) else None


def backend_named(alias: str, path: str = "") -> DurableJobsBackend:
    """The ``TASKS`` backend ``alias``, which must be durable_jobs' own."""
    try:
        backend = compat.task_backends[alias]
    # Not only InvalidTaskBackend: another backend's constructor may raise anything.
    except Exception as exc:
        raise UnknownJob(
            path,
            f"The task {path} was enqueued on TASKS[{alias!r}], which cannot be used here: "
            f"{type(exc).__name__}: {exc}",
        ) from exc
    if not isinstance(backend, DurableJobsBackend):
        kind = f"{type(backend).__module__}.{type(backend).__name__}"
        raise UnknownJob(
            path,
            f"The task {path} was enqueued on TASKS[{alias!r}], which is {kind} here, not "
            "durable_jobs.backends.tasks.DurableJobsBackend; durable_jobs runs only the "
            "tasks of its own backend.",
        )
    return backend
