"""Handler names -> handlers. Filled by ``@job`` when each app's ``jobs.py`` is imported."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.core.checks import CheckMessage, Warning

from durable_jobs import limits
from durable_jobs.conf import SETTINGS_NAME, merged_settings
from durable_jobs.exceptions import UnknownJob
from durable_jobs.validate import text_problem

if TYPE_CHECKING:
    from durable_jobs.handlers import JobHandler

_handlers: dict[str, JobHandler] = {}


def register(handler: JobHandler) -> None:
    name = handler.name
    length = limits.length("Job", "name")
    problem = None
    if not isinstance(name, str):
        problem = "not a string"
    elif len(name) > length:
        problem = f"longer than {length} characters"
    elif text_problem(name):
        problem = "text with a NUL character or a lone surrogate, which PostgreSQL refuses"
    if problem:
        # Refused at import time: every enqueue would otherwise fail in the database
        # (the column's length; PostgreSQL refuses NUL), or only on PostgreSQL.
        shown = name[:80] + "..." if isinstance(name, str) and len(name) > 80 else name
        raise ValueError(
            f"The job handler name {shown!r} is {problem}. Give {_origin(handler)} "
            f"@job(name='...') with a name of 1-{length} characters."
        )
    existing = _handlers.get(handler.name)
    if existing is not None and _origin(existing) != _origin(handler):
        raise ValueError(
            f"Two job handlers are named {handler.name!r}: {_origin(existing)} and "
            f"{_origin(handler)}. Give one of them @job(name='...') with a unique name."
        )
    # Re-importing the same module (autoreload, tests) simply replaces the handler.
    _handlers[handler.name] = handler


def get_handler(name: str) -> JobHandler:
    try:
        return _handlers[name]
    # TypeError: an unhashable name (a list from a settings typo) is no handler's name
    # either, and deserves the same message.
    except (KeyError, TypeError):
        raise UnknownJob(name) from None


def all_handlers() -> dict[str, JobHandler]:
    return dict(_handlers)


def _origin(handler: JobHandler) -> str:
    func = handler.func
    return f"{func.__module__}.{func.__qualname__}"


def check() -> list[CheckMessage]:
    """A handler (or declared schedule) whose queue no default worker serves would wait
    forever (durable_jobs.W002)."""
    merged = merged_settings()
    queues = merged["QUEUES"]
    if not isinstance(queues, dict) or not queues:
        return []  # E003 already reports it
    used = {f"Job handler {h.name!r}": h.queue for h in _handlers.values()}
    declared = merged["SCHEDULES"]
    if isinstance(declared, dict):
        used.update(
            {
                f"Schedule {key!r}": entry["queue"]
                for key, entry in declared.items()
                if isinstance(entry, dict) and isinstance(entry.get("queue"), str)
            }
        )
    return [
        Warning(
            f"{who} uses queue {queue!r}, which is not in {SETTINGS_NAME}['QUEUES']; a "
            "worker started without --queues will not run its jobs.",
            hint=f"Add {queue!r} to {SETTINGS_NAME}['QUEUES'], or start a worker with "
            f"--queues {queue}.",
            id="durable_jobs.W002",
        )
        for who, queue in used.items()
        if queue not in queues
    ]
