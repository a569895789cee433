"""A task of Django's own Tasks framework (``@task``), run by durable_jobs' backend.

Nothing here knows about durable_jobs: ``TASKS`` in settings points the framework at
``durable_jobs.backends.tasks.DurableJobsBackend``, so ``.enqueue()`` stores a durable
job and ``manage.py runworker`` runs it, with retries and leases like any ``@job``.
"""

from __future__ import annotations

import logging

try:
    from django.tasks import task
except ImportError:  # Django 5.2: the django-tasks backport
    from django_tasks import task  # type: ignore[no-redef]

logger = logging.getLogger(__name__)


@task(queue_name="emails")
def email_order_summary(order_id: int, lines: int) -> dict[str, int]:
    logger.info("order summary for order %s sent (%s lines)", order_id, lines)
    return {"order_id": order_id, "lines": lines}
