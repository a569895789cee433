"""``task_finished``, sent once a task's job is final and its outcome committed.

Connected to :data:`durable_jobs.signals.job_finished`, which every path to a final
state sends (the worker, the rescuer for a lost lease, ``testing.drain``). An attempt
that will be retried sends nothing: a receiver that re-enqueues on FAILED would double
the work. On failure the signal is sent from inside an ``except`` block, so that
``sys.exc_info()`` holds the error (Django's own receiver logs it from there).
"""

from __future__ import annotations

import logging
from typing import Any

from durable_jobs.backends import task_results
from durable_jobs.backends.compat import TaskResultStatus, task_finished
from durable_jobs.backends.resolving import backend_named
from durable_jobs.backends.task_handler import send_robust
from durable_jobs.exceptions import DurableJobsError
from durable_jobs.models import Attempt, Job

logger = logging.getLogger("durable_jobs")


def send_task_finished(job: Job, attempt: Attempt | None = None, error: Any = None) -> None:
    """A finish hook (:mod:`durable_jobs.hooks`): for a task's job, send ``task_finished``."""
    alias = job.task_backend
    if alias is None:
        return
    try:
        backend = backend_named(alias, job.name)
        result = task_results.read(job.pk, alias, using=job._state.db)
    except Exception as exc:
        logger.warning("task_finished was not sent for task %s (%s): %r", job.pk, job.name, exc)
        return
    if result.status != TaskResultStatus.FAILED:
        send_robust(task_finished, type(backend), result)
        return
    if not isinstance(error, BaseException):
        # Recorded without an exception object (an operator's action): one that says so.
        message = attempt.error_message if attempt is not None else job.last_error
        error = DurableJobsError(message or f"the task ended {job.state}")
    try:
        raise error
    except BaseException:
        send_robust(task_finished, type(backend), result)
