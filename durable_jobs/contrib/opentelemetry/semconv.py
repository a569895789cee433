"""The spans' names and attributes: OpenTelemetry's messaging conventions, and
``durable_jobs.*`` for what they have no name for.

Written out rather than taken from ``opentelemetry-semantic-conventions``, which the
``opentelemetry`` extra does not need (the API alone is enough to trace).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from opentelemetry.util.types import Attributes

    from durable_jobs.models import Job

#: The instrumentation scope (the tracer's name).
SCOPE = "durable_jobs"

SYSTEM = "messaging.system"
OPERATION_TYPE = "messaging.operation.type"
OPERATION_NAME = "messaging.operation.name"
DESTINATION = "messaging.destination.name"
MESSAGE_ID = "messaging.message.id"
HANDLER = "durable_jobs.handler"
ATTEMPT = "durable_jobs.attempt"
OUTCOME = "durable_jobs.outcome"
#: On an enqueue span whose job already existed (its idempotency key was taken): no job
#: was created, and the existing one keeps the trace context it was enqueued with.
DUPLICATE = "durable_jobs.duplicate"
SNOOZE_SECONDS = "durable_jobs.snooze_seconds"


def enqueue_name(job: Job) -> str:
    return f"durable_jobs enqueue {job.name}"


def run_name(job: Job) -> str:
    return f"durable_jobs run {job.name}"


def enqueue_attributes(job: Job) -> Attributes:
    """The PRODUCER span's attributes known before the insert (the id comes after it)."""
    return {
        SYSTEM: SCOPE,
        OPERATION_TYPE: "send",
        OPERATION_NAME: "enqueue",
        DESTINATION: job.queue,
        HANDLER: job.name,
    }


def run_attributes(job: Job, attempt: int) -> Attributes:
    """The CONSUMER span's attributes known when the attempt starts."""
    return {
        SYSTEM: SCOPE,
        OPERATION_TYPE: "process",
        OPERATION_NAME: "run",
        DESTINATION: job.queue,
        MESSAGE_ID: str(job.pk),
        HANDLER: job.name,
        ATTEMPT: attempt,
    }
