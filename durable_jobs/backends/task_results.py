"""A job and its attempts, read as Django's ``TaskResult``: the one mapping.

queued and retrying are READY, leased is RUNNING, completed is SUCCESSFUL, dead and
cancelled are FAILED (Django has no CANCELLED). Only attempts that count (not those
handed back or snoozed) are listed: one ``worker_ids`` entry each, and one
``TaskError`` per failed one.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

from django.utils.dateparse import parse_datetime
from django.utils.module_loading import import_string

from durable_jobs.backends.compat import (
    InvalidTask,
    Task,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
)
from durable_jobs.lifecycle.states import FINAL, State
from durable_jobs.models import GIVEN_BACK_OUTCOMES, Attempt, Job, Outcome

STATUS = {
    State.QUEUED: TaskResultStatus.READY,
    State.RETRYING: TaskResultStatus.READY,
    State.LEASED: TaskResultStatus.RUNNING,
    State.COMPLETED: TaskResultStatus.SUCCESSFUL,
    State.DEAD: TaskResultStatus.FAILED,
    State.CANCELLED: TaskResultStatus.FAILED,
}

#: The attempts that are a ``TaskError`` each: every counted one that did not complete.
FAILED = frozenset(
    {Outcome.FAILED, Outcome.TIMED_OUT, Outcome.LOST, Outcome.DISCARDED, Outcome.CANCELLED}
)


def result(
    job: Job,
    attempts: Sequence[Attempt],
    *,
    task: Task | None = None,
    current_node: str | None = None,
) -> TaskResult:
    """``job`` as a TaskResult. ``current_node``: the node running the attempt in progress,
    which has no Attempt row yet (listed last in ``worker_ids``)."""
    counted = [a for a in sorted(attempts, key=lambda a: a.number) if not _given_back(a)]
    workers = [a.node for a in counted]
    starts = [a.started_at for a in counted]
    if job.state == State.LEASED and current_node is not None:
        workers.append(current_node)
        if job.attempted_at is not None:
            starts.append(job.attempted_at)
    state = State(job.state)
    args, kwargs = _arguments(job.payload)
    out: TaskResult = TaskResult(
        task=task if task is not None else task_of(job),
        id=str(job.pk),
        status=STATUS[state],
        enqueued_at=job.created_at,
        started_at=starts[0] if starts else None,
        last_attempted_at=starts[-1] if starts else None,
        finished_at=job.finished_at if state in FINAL else None,
        args=args,
        kwargs=kwargs,
        backend=job.task_backend or "",
        errors=[error_of(a) for a in counted if a.outcome in FAILED],
        worker_ids=workers,
    )
    if state == State.COMPLETED:
        object.__setattr__(out, "_return_value", job.result)
    return out


def running(job: Job, *, node: str, task: Task | None = None) -> TaskResult:
    """The RUNNING result of the attempt ``node`` is starting (for ``task_started`` and
    the ``TaskContext``)."""
    attempts = list(Attempt.objects.using(job._state.db).filter(job_id=job.pk))
    return result(job, attempts, task=task, current_node=node)


def read(job_id: int, alias: str, *, using: str | None = None) -> TaskResult:
    """The result of job ``job_id`` enqueued on backend ``alias``, from the database."""
    job = (
        Job.objects.using(using)
        .select_related("leased_by")
        .filter(pk=job_id, task__isnull=False)
        .first()
    )
    if job is None or job.task_backend != alias:
        raise TaskResultDoesNotExist(f"No task result has the id {job_id} on backend {alias!r}.")
    attempts = list(Attempt.objects.using(job._state.db).filter(job_id=job.pk))
    holder = job.lease_holder
    node = holder.name if holder else None
    return result(job, attempts, current_node=node)


def task_of(job: Job, task: Task | None = None) -> Task:
    """The Task (``task``, else the module-level one) with the job's priority, queue,
    run_after and backend, as ``.using()`` would make it."""
    if task is None:
        found = import_path(job.name)
        if not isinstance(found, Task):
            raise TaskResultDoesNotExist(
                f"Task result {job.pk} belongs to {job.name}, which is no longer a Task that "
                "can be imported here."
            )
        task = found
    info = job.task if isinstance(job.task, dict) else {}
    run_after = info.get("run_after")
    try:
        return task.using(
            priority=job.priority,
            queue_name=job.queue,
            run_after=parse_datetime(run_after) if isinstance(run_after, str) else None,
            backend=job.task_backend,
        )
    except InvalidTask:
        # Settings changed since the enqueue (the queue left QUEUES, say): the result
        # is still the Task's, as it was defined.
        return task


def error_of(attempt: Attempt) -> TaskError:
    """A failed attempt as a TaskError whose class path imports and whose traceback is
    never empty (a timeout or lost lease, recorded by the worker, has no traceback)."""
    path = attempt.error_class or "durable_jobs.exceptions.DurableJobsError"
    cls = import_path(path)
    if isinstance(cls, type) and issubclass(cls, BaseException):
        path = importable_path(cls)
    else:
        # A class defined inside a function, or since removed: the base of every error.
        path = "builtins.Exception"
    # The message already starts with the class's name ("JobTimeout: the job ran ...").
    name = (attempt.error_class or path).rpartition(".")[2]
    message = attempt.error_message.removeprefix(f"{name}: ")
    traceback = attempt.traceback or f"{attempt.error_class or path}: {message}"
    return TaskError(exception_class_path=path, traceback=traceback)


def importable_path(cls: type) -> str:
    """The path of ``cls``, or of its nearest base, that ``import_string`` resolves (what
    ``TaskError.exception_class`` uses): ``Order.DoesNotExist`` is nested in its model, so
    its error reads as ``django.core.exceptions.ObjectDoesNotExist``."""
    for base in cls.__mro__:
        path = f"{base.__module__}.{base.__qualname__}"
        try:
            if import_string(path) is base:
                return path
        except Exception:
            continue
    return "builtins.BaseException"


def import_path(path: str) -> Any:
    """What ``path`` names, or None: the longest module prefix that imports, then
    attributes (``app.models.Order.DoesNotExist``), which ``import_string`` cannot do."""
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            found: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        # Not only ImportError: a module that fails as it is imported names nothing.
        except Exception:
            return None
        for attribute in parts[cut:]:
            found = getattr(found, attribute, None)
            if found is None:
                return None
        return found
    return None


def parse_id(result_id: Any) -> int | None:
    """A result id as a job id, or None for anything that is not one (text, UUIDs,
    negative numbers, numbers past a 64-bit id)."""
    if isinstance(result_id, bool) or not isinstance(result_id, str | int):
        return None
    text = str(result_id).strip()
    if not text.isascii() or not text.isdigit() or len(text) > 19:
        return None
    value = int(text)
    return value if 0 < value < 2**63 else None


def _given_back(attempt: Attempt) -> bool:
    return attempt.outcome in GIVEN_BACK_OUTCOMES


def _arguments(payload: Any) -> tuple[list[Any], dict[str, Any]]:
    if isinstance(payload, dict):
        args, kwargs = payload.get("args"), payload.get("kwargs")
        if isinstance(args, list) and isinstance(kwargs, dict):
            return args, kwargs
    return [], {}
