"""What crosses the boundary between a worker and the child processes that run its jobs.

Everything is JSON, never pickle: a job's row goes down as its field values (its
payload and meta are JSON already), and the attempt's end comes back as its outcome,
its result (made storable in the child, so JSON too), its kept log lines and its error
*described* (class path, message, traceback text). The worker rebuilds a
:class:`~durable_jobs.lifecycle.outcomes.RunResult` from that and decides the job's
next state itself, exactly as for a job that ran on one of its threads.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.utils.dateparse import parse_datetime

from durable_jobs.db.rows import from_row
from durable_jobs.lifecycle.errors import DescribedError, describe_error
from durable_jobs.lifecycle.outcomes import RunResult
from durable_jobs.models import Job, Outcome


def encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message, cls=DjangoJSONEncoder, separators=(",", ":")).encode()


def decode(data: bytes) -> dict[str, Any]:
    message: dict[str, Any] = json.loads(data)
    return message


def job_fields(job: Job) -> dict[str, Any]:
    """The job's row as JSON-ready values (datetimes and UUIDs become text)."""
    return {field.attname: getattr(job, field.attname) for field in _fields()}


def job_from_fields(fields: dict[str, Any], alias: str) -> Job:
    """The :class:`Job` that :func:`job_fields` described, as if read from ``alias``."""
    names, values = [], []
    for field in _fields():
        value = fields.get(field.attname)
        if value is not None and not isinstance(field, models.JSONField):
            value = field.to_python(value)  # text back to datetimes, UUIDs, decimals
        names.append(field.attname)
        values.append(value)
    return from_row(Job, names, values, alias)


def result_fields(result: RunResult, **extra: Any) -> dict[str, Any]:
    """How an attempt ended, for the worker: everything :func:`run_result` needs."""
    error_class, message, trace = describe_error(result.error)
    return {
        "outcome": str(result.outcome),
        "started_at": result.started_at,
        "finished_at": result.finished_at,
        "value": result.value,
        "error": [error_class, message, trace] if result.error is not None else None,
        "snooze_seconds": result.snooze_seconds,
        "log_lines": result.log_lines,
        **extra,
    }


def run_result(fields: dict[str, Any], job: Job, handler: Any) -> RunResult:
    """The worker's :class:`RunResult` for ``job`` from what its child reported."""
    error = fields.get("error")
    return RunResult(
        job=job,
        outcome=Outcome(fields["outcome"]),
        started_at=_datetime(fields["started_at"]),
        finished_at=_datetime(fields["finished_at"]),
        value=fields.get("value"),
        error=DescribedError(*error) if error else None,
        snooze_seconds=float(fields.get("snooze_seconds") or 0.0),
        log_lines=list(fields.get("log_lines") or []),
        handler=handler,
    )


def _fields() -> list[models.Field[Any, Any]]:
    return list(Job._meta.concrete_fields)


def _datetime(text: str) -> datetime.datetime:
    value = parse_datetime(text)
    if value is None:
        raise ValueError(f"not a datetime: {text!r}")
    return value
