"""durable_jobs as the backend of Django's Tasks framework (``django.tasks``, or the
``django-tasks`` backport on Django 5.2)::

    TASKS = {
        "default": {
            "BACKEND": "durable_jobs.backends.tasks.DurableJobsBackend",
            "QUEUES": [],  # any queue name
            "OPTIONS": {"max_retries": 3, "timeout": 30, "backoff": [1, 5, 30]},
        }
    }

Each enqueue is one :class:`~durable_jobs.models.Job`, in the caller's transaction;
``runworker`` runs it with leases, retries, timeouts and schedules, as any ``@job``.
Django builds the backend when a module with ``@task`` is imported, possibly before the
apps are ready: nothing here imports a model at import time.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.core import checks

from durable_jobs import payload as payloads
from durable_jobs import validate
from durable_jobs.backends import compat
from durable_jobs.backends.compat import (
    BaseTaskBackend,
    InvalidTask,
    InvalidTaskBackend,
    Task,
    TaskResult,
    TaskResultDoesNotExist,
)
from durable_jobs.backoff import backoff_from
from durable_jobs.conf import SETTINGS_NAME, merged_settings
from durable_jobs.flow.unique import Unique
from durable_jobs.handlers import EnqueueOptions
from durable_jobs.limits import length

if TYPE_CHECKING:
    from durable_jobs.backends.task_handler import TaskHandler

#: ``OPTIONS`` a ``TASKS`` alias takes: backend-wide defaults, spelled as on ``@job``.
OPTION_NAMES = ("max_retries", "timeout", "backoff")
#: :class:`DurableTask`'s own fields: the options, and ``unique`` (one Task's, never an
#: alias-wide default: it names the Task's parameters).
TASK_FIELDS = (*OPTION_NAMES, "unique")


@dataclass(frozen=True, slots=True, kw_only=True)
class DurableTask(Task):
    """A Task with durable_jobs' options: ``@task(max_retries=5, timeout=30)`` (Django 6.1+
    and the backport pass ``@task``'s extra keywords here; on Django 6.0 use ``OPTIONS``).
    None takes the alias's ``OPTIONS``, then durable_jobs' settings."""

    max_retries: int | None = None
    #: Seconds an attempt may run before it fails with ``JobTimeout``.
    timeout: float | None = None
    #: Seconds (the last repeats; kept as a tuple, so the Task stays hashable) or a
    #: module-level ``attempt -> seconds``.
    backoff: Any = None
    unique: Unique | None = None

    def __post_init__(self) -> None:
        if isinstance(self.backoff, list):
            object.__setattr__(self, "backoff", tuple(self.backoff))
        # Not super(): slots=True makes a new class, which zero-argument super() misses.
        Task.__post_init__(self)


class DurableJobsBackend(BaseTaskBackend):
    """Stores each enqueued Task as a durable job; ``manage.py runworker`` runs it."""

    task_class = DurableTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.defaults = _checked_options(alias, self.options)
        self._handlers: dict[tuple[str, str, int], TaskHandler] = {}

    def validate_task(self, task: Task) -> None:
        """Django's rules (its ``InvalidTask`` messages), then durable_jobs' own: a queue
        name a worker can be given, and the Task's options."""
        super().validate_task(task)
        try:
            validate.queue_name(task.queue_name, "the queue name")
        except validate.Invalid as exc:
            raise InvalidTask(f"{task.module_path}: {exc}") from None
        problem = _option_problem(task) or _unique_problem(task)
        if problem:
            raise InvalidTask(f"{task.module_path}: {problem}")

    def enqueue(self, task: Task, args: Iterable[Any], kwargs: Mapping[str, Any]) -> TaskResult:
        """One job, in the caller's transaction (a rollback leaves none); a READY result."""
        self.validate_task(task)
        # The models wait for Django's apps, which are ready by the time anything enqueues.
        from durable_jobs.backends import task_results
        from durable_jobs.backends.task_handler import send_robust
        from durable_jobs.enqueueing import insert_or_get

        if len(task.module_path) > length("Job", "name"):
            raise InvalidTask(
                f"{task.module_path[:80]}...: the Task's module path is longer than "
                f"{length('Job', 'name')} characters, which the job's name column holds."
            )
        handler = self.handler_for(task)
        payload = handler.check_arguments(tuple(args), dict(kwargs))
        # int(): Django lets 5.0 through as a whole number.
        options = EnqueueOptions(
            queue=task.queue_name, priority=int(task.priority), run_at=task.run_after
        )
        job, created = insert_or_get(handler, payload, options)
        if created:
            result = task_results.result(job, [], task=task)
        else:  # a unique task's existing job (possibly enqueued on another alias)
            result = task_results.read(job.pk, job.task_backend or "", using=job._state.db)
        send_robust(compat.task_enqueued, type(self), result)
        return result

    def get_result(self, result_id: str) -> TaskResult:
        """The result of an enqueued task; ``TaskResultDoesNotExist`` for any id that is
        not one of this alias's tasks (never a database error)."""
        from durable_jobs.backends import task_results

        job_id = task_results.parse_id(result_id)
        if job_id is None:
            raise TaskResultDoesNotExist(f"{result_id!r} is not the id of a task result.")
        return task_results.read(job_id, self.alias)

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        if not apps.is_installed("durable_jobs"):
            return [
                checks.Error(
                    f"TASKS[{self.alias!r}] uses durable_jobs' backend, but durable_jobs is "
                    "not in INSTALLED_APPS.",
                    hint='Add "durable_jobs" to INSTALLED_APPS and run manage.py migrate.',
                    id="durable_jobs.E019",
                )
            ]
        declared = merged_settings().get("QUEUES")
        if not isinstance(declared, dict) or not declared:
            return []  # durable_jobs.E003 reports it
        return [
            checks.Warning(
                f"TASKS[{self.alias!r}]['QUEUES'] lists {queue!r}, which is not in "
                f"{SETTINGS_NAME}['QUEUES']; a worker started without --queues will not run "
                "its tasks.",
                hint=f"Add {queue!r} to {SETTINGS_NAME}['QUEUES'], or start a worker with "
                f"--queues {queue}.",
                id="durable_jobs.W005",
            )
            for queue in sorted(self.queues)
            if queue not in declared
        ]

    def handler_for(self, task: Task) -> TaskHandler:
        """The handler that enqueues and runs ``task`` on this alias (built once)."""
        from durable_jobs.backends.task_handler import TaskHandler

        key = (task.module_path, task.queue_name, task.priority)
        handler = self._handlers.get(key)
        # A re-imported module (autoreload, tests) has a new function, and a Task built
        # from the same function may have other options: build again.
        if handler is None or not _same_task(handler.task, task):
            handler = self._handlers[key] = TaskHandler(task, self)
        return handler


def _same_task(a: Task, b: Task) -> bool:
    if a.func is not b.func or a.takes_context != b.takes_context:
        return False
    return all(getattr(a, name, None) == getattr(b, name, None) for name in TASK_FIELDS)


def _checked_options(alias: str, options: Any) -> dict[str, Any]:
    where = f"TASKS[{alias!r}]['OPTIONS']"
    if not isinstance(options, dict):
        raise InvalidTaskBackend(f"{where} must be a dict, not {type(options).__name__}.")
    unknown = sorted(set(options) - set(OPTION_NAMES))
    if unknown:
        raise InvalidTaskBackend(
            f"{where} has unknown option(s) {', '.join(map(repr, unknown))}; it takes "
            f"{', '.join(OPTION_NAMES)}."
        )
    problem = _option_problem(options)
    if problem:
        raise InvalidTaskBackend(f"{where}: {problem}")
    return dict(options)


def _option_problem(source: Any) -> str | None:
    """What is wrong with the options of a Task or an ``OPTIONS`` dict, or None."""

    def get(name: str) -> Any:
        return source.get(name) if isinstance(source, dict) else getattr(source, name, None)

    max_retries, timeout = get("max_retries"), get("timeout")
    if max_retries is not None:
        try:
            validate.retries(max_retries)
        except validate.Invalid as exc:
            return str(exc)
    if timeout is not None and (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not 0 < timeout < math.inf
    ):
        return f"timeout must be a positive number of seconds, not {timeout!r}"
    if get("backoff") is not None:
        try:
            backoff_from(get("backoff"))
        except (TypeError, ValueError) as exc:
            return str(exc).replace("@job(backoff=...)", "backoff")
    return None


def _unique_problem(task: Task) -> str | None:
    unique = getattr(task, "unique", None)
    if unique is None:
        return None
    if not isinstance(unique, Unique):
        return f"unique takes durable_jobs.Unique(...), not {type(unique).__name__}"
    try:
        unique.check_fields(
            task.module_path, payloads.parameters(task.func, takes_context=task.takes_context)
        )
    except (TypeError, ValueError) as exc:
        return str(exc).replace("@job(unique=", "unique=")
    return None


__all__ = ["DurableJobsBackend", "DurableTask"]
