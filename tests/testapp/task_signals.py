"""Receivers that record each task signal a worker process sends as a SideEffect row:
``<signal>:<status>:<attempts>:<last worker>:<exception set in sys.exc_info()>``."""

from __future__ import annotations

import sys
from typing import Any

from durable_jobs.backends.compat import task_finished, task_started
from tests.testapp.models import SideEffect


def record(name: str) -> Any:
    def receiver(sender: Any, task_result: Any, **kwargs: Any) -> None:
        error = sys.exc_info()[0]
        last = task_result.worker_ids[-1] if task_result.worker_ids else ""
        SideEffect.objects.create(
            job_id=int(task_result.id),
            attempt=task_result.attempts,
            label=f"{name}:{task_result.status}:{last}:{error.__name__ if error else ''}",
        )

    return receiver


RECEIVERS = {task_started: record("started"), task_finished: record("finished")}


def connect() -> None:
    for signal, receiver in RECEIVERS.items():
        signal.connect(receiver, dispatch_uid=f"tests.{id(signal)}")
