"""Structured job logs: lifecycle events on the ``durable_jobs`` logger, and a JSON formatter.

Every lifecycle record carries the same fields (``job_id``, ``queue``, ``name``,
``attempt``, ``state``, ``node``, ``duration_ms``, ``error``) as attributes of the
``LogRecord``, so any formatter or handler can use them. One exception: a
``LogRecord`` already has ``name`` (the logger's name), so the handler's name is
the attribute ``job_name``; :class:`JSONFormatter` prints it as ``name`` and the
logger's name as ``logger``::

    LOGGING = {
        "formatters": {"json": {"()": "durable_jobs.logging.JSONFormatter"}},
        ...
    }
"""

from __future__ import annotations

import datetime
import json
import logging
from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from durable_jobs.models import Job

logger = logging.getLogger("durable_jobs")
#: Records logged by handlers through ``context.logger``.
job_logger = logging.getLogger("durable_jobs.job")

#: LogRecord attribute -> field name in JSON output (``name`` is taken on a LogRecord).
RECORD_RENAMES = {"job_name": "name"}

# Attributes every LogRecord has; anything else on a record was passed in ``extra``.
_RECORD_ATTRS = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


def job_fields(job: Job, **overrides: Any) -> dict[str, Any]:
    """The standard fields for ``job``; ``overrides`` fill or replace them."""
    fields: dict[str, Any] = {
        "job_id": job.pk,
        "queue": job.queue,
        "job_name": job.name,
        "attempt": job.attempts,
        "state": job.state,
        "node": None,
        "duration_ms": None,
        "error": None,
    }
    fields.update(overrides)
    return fields


def log_event(
    level: int, event: str, job: Job, *, exc_info: BaseException | None = None, **fields: Any
) -> None:
    """Log one lifecycle event of ``job`` (``enqueued``, ``completed``, ``dead``, ...),
    with the exception it ended with, if any."""
    if logger.isEnabledFor(level):
        extra = job_fields(job, **fields)
        extra["event"] = event
        logger.log(level, "job %s %s (%s)", job.pk, event, job.name, extra=extra, exc_info=exc_info)


class JobLoggerAdapter(logging.LoggerAdapter):
    """``context.logger``: stamps each record with the job's fields and keeps its lines.

    The kept lines are stored on the attempt, so the admin shows what the handler said
    even when the process's own logs are gone. At most ``max_lines`` are kept.
    """

    def __init__(self, fields: dict[str, Any], max_lines: int = 500) -> None:
        super().__init__(job_logger, fields)
        self.lines: list[str] = []
        self.max_lines = max_lines

    def process(
        self, msg: Any, kwargs: MutableMapping[str, Any]
    ) -> tuple[Any, MutableMapping[str, Any]]:
        kwargs["extra"] = {**(self.extra or {}), **kwargs.get("extra", {})}
        return msg, kwargs

    def log(self, level: int, msg: Any, *args: Any, **kwargs: Any) -> None:
        if len(self.lines) < self.max_lines:
            from django.utils import timezone

            stamp = timezone.now().strftime("%H:%M:%S.%f")[:-3]
            try:
                text = str(msg) % args if args else str(msg)
            except (TypeError, ValueError):
                # Logging itself reports such mistakes without failing the caller; so do we.
                text = f"{msg!s} {args!r}"
            self.lines.append(f"{stamp} {logging.getLevelName(level)} {text}")
        elif len(self.lines) == self.max_lines:
            self.lines.append("... further lines not kept")
        super().log(level, msg, *args, **kwargs)


class JSONFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, and every extra field."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _RECORD_ATTRS and not key.startswith("_"):
                data[RECORD_RENAMES.get(key, key)] = value
        if record.exc_info:
            data["exc_info"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str)
