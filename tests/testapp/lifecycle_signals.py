"""Receivers that record each lifecycle signal a process sends as a SideEffect row.

``label`` is ``<signal>:<detail>``, where the detail says what the receiver was given
(the outcome and new state for ``attempt_finished``, the node's name for the worker
signals, ...), and ``attempt`` is the attempt number it was given. With
``DURABLE_JOBS_TEST_RAISING`` set, a receiver that raises is connected to
every signal as well, before the recording ones.
"""

from __future__ import annotations

import threading
from typing import Any

from durable_jobs import signals
from durable_jobs.models import Attempt, Job, Node
from tests.testapp.models import SideEffect


def _thread() -> str:
    return "main" if threading.current_thread() is threading.main_thread() else "other"


def _node_name(node: Any) -> str:
    assert node is None or isinstance(node, Node), node
    return node.name if node is not None else ""


def enqueued(sender: Any, job: Job, **kwargs: Any) -> None:
    assert isinstance(job, Job)
    assert job.pk
    SideEffect.objects.create(job_id=job.pk, attempt=0, label=f"job_enqueued:{job.name}")


def started(sender: Any, job: Job, attempt_number: int, node: Node | None, **kwargs: Any) -> None:
    SideEffect.objects.create(
        job_id=job.pk,
        attempt=attempt_number,
        label=f"attempt_started:{job.state}:{_node_name(node)}:{_thread()}",
    )


def attempt_finished(sender: Any, job: Job, attempt: Attempt, **kwargs: Any) -> None:
    assert isinstance(attempt, Attempt)
    assert attempt.job_id == job.pk
    SideEffect.objects.create(
        job_id=job.pk,
        attempt=attempt.number,
        label=f"attempt_finished:{attempt.outcome}:{job.state}",
    )


def job_finished(sender: Any, job: Job, attempt: Attempt, **kwargs: Any) -> None:
    SideEffect.objects.create(
        job_id=job.pk, attempt=attempt.number, label=f"job_finished:{job.state}"
    )


def job_dead(sender: Any, job: Job, attempt: Attempt, **kwargs: Any) -> None:
    SideEffect.objects.create(job_id=job.pk, attempt=attempt.number, label="job_dead:")


def worker(name: str) -> Any:
    def receiver(sender: Any, node: Node, **kwargs: Any) -> None:
        # The node's row still exists while the signal is sent.
        assert Node.objects.filter(pk=node.pk).exists()
        SideEffect.objects.create(job_id=node.pk, attempt=0, label=f"{name}:{node.name}")

    return receiver


def raising(sender: Any, **kwargs: Any) -> None:
    raise RuntimeError("a receiver that always fails")


RECEIVERS = {
    signals.job_enqueued: enqueued,
    signals.attempt_started: started,
    signals.attempt_finished: attempt_finished,
    signals.job_finished: job_finished,
    signals.job_dead: job_dead,
    signals.worker_started: worker("worker_started"),
    signals.worker_stopping: worker("worker_stopping"),
}


def connect(*, raise_first: bool = False) -> None:
    for signal, receiver in RECEIVERS.items():
        if raise_first:
            signal.connect(raising, dispatch_uid=f"tests.raising.{id(signal)}")
        signal.connect(receiver, dispatch_uid=f"tests.lifecycle.{id(signal)}")


def disconnect() -> None:
    for signal in RECEIVERS:
        signal.disconnect(dispatch_uid=f"tests.raising.{id(signal)}")
        signal.disconnect(dispatch_uid=f"tests.lifecycle.{id(signal)}")
