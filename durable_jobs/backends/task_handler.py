"""A Task of Django's Tasks framework, run as durable_jobs runs a ``@job`` handler.

:class:`TaskHandler` is a :class:`~durable_jobs.handlers.JobHandler` whose name is the
Task's module path and whose stored payload is ``{"args": [...], "kwargs": {...}}``:
enqueueing, leases, retries, timeouts and schedules treat it as any other handler.
What differs is here: Django's JSON rules for arguments and results, the
``TaskContext``, and the ``task_started`` signal before every attempt.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from durable_jobs import payload as payloads
from durable_jobs.backends import compat, task_results
from durable_jobs.backends.compat import Task, TaskContext, normalize_json, task_started
from durable_jobs.exceptions import PayloadMismatch, TaskArgumentError
from durable_jobs.handlers import EnqueueOptions, JobHandler
from durable_jobs.validate import describe_unstorable, first_unstorable

if TYPE_CHECKING:
    from durable_jobs.backends.tasks import DurableJobsBackend
    from durable_jobs.context import JobContext
    from durable_jobs.models import Job

logger = logging.getLogger("durable_jobs")


class TaskHandler(JobHandler[..., Any]):
    """``task`` on the backend ``backend``, with the alias's ``OPTIONS`` as defaults."""

    def __init__(self, task: Task, backend: DurableJobsBackend) -> None:
        defaults = backend.defaults
        super().__init__(
            task.func,
            name=task.module_path,
            queue=task.queue_name,
            priority=int(task.priority),  # Django lets 5.0 through as a whole number
            max_retries=_first(getattr(task, "max_retries", None), defaults.get("max_retries")),
            timeout=_first(getattr(task, "timeout", None), defaults.get("timeout")),
            backoff=_first(getattr(task, "backoff", None), defaults.get("backoff")),
            unique=getattr(task, "unique", None),
            takes_context=task.takes_context,
        )
        self.task = task
        self.alias = backend.alias
        self.backend_class = type(backend)

    def __repr__(self) -> str:
        return f"<task {self.name} backend={self.alias}>"

    def check_arguments(self, args: tuple, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """Django's JSON normalisation (its ``TypeError`` for a datetime, a set, an object),
        then durable_jobs' storage rules (NaN, infinities, NUL, lone surrogates), then the
        function's signature: a payload that cannot run is refused before it is stored."""
        try:
            stored = {"args": normalize_json(list(args)), "kwargs": normalize_json(dict(kwargs))}
        except TypeError as exc:
            raise TaskArgumentError(
                f"{self.name}: {exc}. Task arguments are stored as JSON: pass ids and ISO "
                "strings rather than objects."
            ) from exc
        payload = payloads.check_json(self.name, stored)
        try:
            self.signature.bind(*payload["args"], **payload["kwargs"])
        except TypeError as exc:
            raise TaskArgumentError(
                f"{self.name}: {exc}. The task's signature is "
                f"{self.name}{payloads.plain(self.signature)}."
            ) from None
        return payload

    def named_arguments(self, payload: Mapping[str, Any]) -> Mapping[str, Any]:
        args, kwargs = _stored_call(self.name, payload)
        try:
            return self.signature.bind_partial(*args, **kwargs).arguments
        except TypeError:
            return kwargs

    def task_fields(self, options: EnqueueOptions) -> dict[str, Any]:
        run_after = options.run_at.isoformat() if options.run_at is not None else None
        return {"backend": self.alias, "run_after": run_after}

    def call_arguments(
        self, job: Job, *, node: str, job_context: Callable[[], JobContext]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The stored arguments, after a RUNNING ``TaskContext`` if the task takes one;
        ``task_started`` is sent first."""
        args, kwargs = _stored_call(self.name, job.payload)
        try:
            self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise PayloadMismatch(
                f"the stored arguments no longer fit {self.name}"
                f"{payloads.plain(self.signature)}: {exc}. The task's signature changed after "
                "it was enqueued; enqueue it again with the new arguments."
            ) from None
        result = task_results.running(job, node=node, task=task_results.task_of(job, self.task))
        send_robust(task_started, self.backend_class, result)
        if self.takes_context:
            return (TaskContext(task_result=result), *args), kwargs
        return tuple(args), kwargs

    def stored_result(self, value: Any) -> Any:
        """As Django's backends store it: JSON-normalised (a tuple becomes a list). A value
        JSON cannot hold unchanged (an object, a non-text key, NaN, NUL text) fails the
        attempt with ``TypeError``, rather than being kept as its ``repr``."""
        value = normalize_json(value)
        found = first_unstorable(value, "the return value")
        if found is not None:
            where, bad = found
            raise TypeError(f"{where} is {describe_unstorable(bad)}; a task returns JSON.")
        try:
            same = json.loads(json.dumps(value, allow_nan=False)) == value
        except ValueError as exc:
            raise TypeError(f"the return value cannot be written as JSON: {exc}") from None
        if not same:
            raise TypeError(
                "the return value does not survive a JSON round trip (keys that are not "
                "text?); a task returns JSON."
            )
        return value


def send_robust(signal: Any, sender: type, result: Any) -> None:
    """Send a task signal; a receiver that raises is logged and changes nothing."""
    for receiver, response in signal.send_robust(sender=sender, task_result=result):
        if isinstance(response, Exception):
            logger.error(
                "%s receiver %r failed for task %s: %r",
                _signal_name(signal),
                receiver,
                result.id,
                response,
                exc_info=response,
            )


def _signal_name(signal: Any) -> str:
    for name in ("task_enqueued", "task_started", "task_finished"):
        if getattr(compat, name) is signal:
            return name
    return "task signal"


def _stored_call(name: str, payload: Any) -> tuple[list[Any], dict[str, Any]]:
    if not (
        isinstance(payload, dict)
        and isinstance(payload.get("args"), list)
        and isinstance(payload.get("kwargs"), dict)
    ):
        raise PayloadMismatch(
            f"the stored payload of task {name} is not {{'args': [...], 'kwargs': {{...}}}}; "
            "enqueue the task again with Task.enqueue()"
        )
    return payload["args"], payload["kwargs"]


def _first(*values: Any) -> Any:
    return next((v for v in values if v is not None), None)
