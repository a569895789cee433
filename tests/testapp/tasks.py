"""Tasks of Django's Tasks framework (``@task``) that the suite runs on durable_jobs' backend.

Every receiver of the task signals that the tests install appends to ``SideEffect``
rows, so that what a worker process sent can be read back from the test process.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from durable_jobs import Cancel, Discard, Snooze
from durable_jobs.backends.compat import TaskContext
from tests.testapp.models import SideEffect

try:
    from django.tasks import task
except ImportError:  # Django 5.2: the backport
    from django_tasks import task  # type: ignore[no-redef]


@task
def add(a: int, b: int = 0) -> int:
    return a + b


@task(priority=10, queue_name="emails")
def send_email(to: str, subject: str = "") -> dict:
    return {"to": to, "subject": subject}


@task
def pair(a: int, b: int) -> tuple:
    return (a, b)


@task
def unstorable() -> object:
    return object()


@task
async def async_add(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a + b


@task
async def async_sleep(seconds: float) -> str:
    await asyncio.sleep(seconds)
    return "slept"


@task(takes_context=True)
def record(context: TaskContext, label: str = "") -> dict:
    result = context.task_result
    SideEffect.objects.create(
        job_id=int(result.id), attempt=context.attempt, label=f"{label}:{result.status}"
    )
    return {"attempt": context.attempt, "status": str(result.status), "workers": result.worker_ids}


@task(takes_context=True)
def flaky(context: TaskContext, fail_times: int) -> str:
    if context.attempt <= fail_times:
        raise RuntimeError(f"failure {context.attempt}")
    return "ok"


@task
def always_fails() -> None:
    raise ValueError("cannot process")


@task
def discards() -> None:
    raise Discard("malformed input")


@task
def cancels() -> None:
    raise Cancel("order was refunded")


@task
def exits() -> None:
    raise SystemExit(3)


@task(takes_context=True)
def sleepy(context: TaskContext, seconds: float, marker_dir: str = "") -> str:
    if marker_dir:
        name = f"started-{context.task_result.id}-{context.attempt}-{os.getpid()}"
        Path(marker_dir, name).touch()
    time.sleep(seconds)
    return "slept"


@task(takes_context=True)
def refreshing(context: TaskContext) -> dict:
    result = context.task_result
    result.refresh()  # on the task's own backend, whichever alias enqueued it
    return {"backend": result.backend, "task_backend": result.task.backend, "status": result.status}


#: Return values JSON cannot hold unchanged.
UNSTORABLE = {"int keys": {1: "a"}, "nan": float("nan"), "nul": "a\x00b"}


@task
def returns(kind: str) -> object:
    return UNSTORABLE[kind]


@task
def looks_up(pk: int) -> None:
    SideEffect.objects.get(pk=pk)  # raises SideEffect.DoesNotExist, a nested class


@task(takes_context=True)
def snoozes_once(context: TaskContext) -> int:
    job_id = int(context.task_result.id)
    if not SideEffect.objects.filter(job_id=job_id, label="snoozed").exists():
        SideEffect.objects.create(job_id=job_id, attempt=context.attempt, label="snoozed")
        raise Snooze(0)
    return context.attempt
