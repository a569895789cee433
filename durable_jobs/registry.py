"""Handler names -> handlers. Filled by ``@job`` when each app's ``jobs.py`` is imported."""

from __future__ import annotations

from typing import TYPE_CHECKING

from durable_jobs.exceptions import UnknownJob

if TYPE_CHECKING:
    from durable_jobs.handlers import JobHandler

_handlers: dict[str, JobHandler] = {}


def register(handler: JobHandler) -> None:
    from durable_jobs.payload import text_problem

    name = handler.name
    problem = None
    if not isinstance(name, str):
        problem = "not a string"
    elif len(name) > 255:
        problem = "longer than 255 characters"
    elif text_problem(name):
        problem = "text with a NUL character or a lone surrogate, which PostgreSQL refuses"
    if problem:
        # Refused at import time: every enqueue would otherwise fail in the database
        # (Job.name is 255 characters; PostgreSQL refuses NUL), or only on PostgreSQL.
        shown = name[:80] + "..." if isinstance(name, str) and len(name) > 80 else name
        raise ValueError(
            f"The job handler name {shown!r} is {problem}. Give {_origin(handler)} "
            "@job(name='...') with a name of 1-255 characters."
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
