"""Signals sent at each step of a job's life and a worker's, for a project's own code.

Every signal is sent with ``send_robust``: a receiver that raises is logged on the
``durable_jobs`` logger and changes nothing (the job's outcome is already committed,
or the job runs as it would have). Receivers run synchronously in the thread named below,
so keep them short: a slow ``attempt_finished`` receiver slows the worker's loop.

Job signals are sent with ``sender=Job``; worker signals with ``sender=Node``. Each
signal caches its receivers per sender (as Django's model signals do), since the job
signals are sent for every job.
"""

import logging
from typing import Any

from django.dispatch import Signal

logger = logging.getLogger("durable_jobs")

#: A new job's row was inserted. Sent in the enqueuing process and thread, right after
#: the insert (inside the caller's transaction, if there is one: a rollback later
#: removes the job again). Once per new job, for ``.delay()``, ``enqueue_many``, a
#: ``django.tasks`` enqueue, a schedule's occurrence and a batch's callback; not for an
#: enqueue that found an existing job holding its idempotency key.
#: Arguments: ``job``.
job_enqueued = Signal(use_caching=True)

#: An attempt is about to run the handler. Sent in the worker's pool thread that runs
#: it, after the job was leased. Arguments: ``job`` (``job.attempts`` is this attempt's
#: number), ``attempt_number`` and ``node`` (the worker's :class:`~durable_jobs.models.Node`
#: row; ``None`` under :func:`durable_jobs.testing.drain`).
attempt_started = Signal(use_caching=True)

#: An attempt's outcome was written and committed, whatever it was (completed, failed,
#: timed_out, snoozed, interrupted, lost, cancelled, discarded). Sent in the worker's
#: loop thread (or the rescuer's, for a lost attempt). Arguments: ``job`` (with its new
#: ``state``) and ``attempt`` (the :class:`~durable_jobs.models.Attempt`, with
#: ``outcome`` and ``duration``). Not sent when the write was refused because the job
#: had moved on without this worker (rescued, or cancelled by an operator).
attempt_finished = Signal(use_caching=True)

#: A job reached a final state through an attempt (completed, dead, cancelled). Sent
#: after ``attempt_finished``, in the same thread. Arguments: ``job`` (with its new
#: ``state``), ``attempt`` and ``error`` (the exception the attempt ended with, or None).
#: An operator's cancel or discard (admin, ``manage.py jobs``) sends nothing.
job_finished = Signal(use_caching=True)

#: A job reached ``dead`` (retries exhausted, discarded, or its payload no longer
#: binds). Sent after ``job_finished``, in the same thread. Arguments: ``job`` and
#: ``attempt``.
job_dead = Signal(use_caching=True)

#: A worker registered its node and is about to claim. Sent in the thread that runs the
#: worker (the main thread of ``runworker``). Arguments: ``node``.
worker_started = Signal(use_caching=True)

#: A worker stopped claiming and is finishing: after a stop signal, ``stop()``, the
#: end of a ``--burst`` run or ``--max-jobs``. Sent in the worker's thread before the
#: grace period, while its node row still exists. Arguments: ``node``.
worker_stopping = Signal(use_caching=True)


def send(signal: Signal, sender: type, **arguments: Any) -> None:
    """Send ``signal`` robustly, logging each receiver that raised, with its traceback.

    Django logs them too, on ``django.dispatch``, but its default logging shows that
    logger only when ``DEBUG`` is on; a worker's failing receiver must show in its log.
    """
    if not signal.receivers:  # none is the common case, and then this is free
        return
    for receiver, response in signal.send_robust(sender=sender, **arguments):
        if isinstance(response, Exception):
            logger.error(
                "%s receiver %r failed: %s",
                _NAMES.get(id(signal), "signal"),
                receiver,
                response,
                exc_info=response,
            )


_NAMES = {id(value): name for name, value in list(globals().items()) if isinstance(value, Signal)}
