"""Handler names -> handlers. Filled by ``@job`` when each app's ``jobs.py`` is imported."""

from __future__ import annotations

from typing import TYPE_CHECKING

from durable_jobs.exceptions import UnknownJob

if TYPE_CHECKING:
    from durable_jobs.handlers import JobHandler

_handlers: dict[str, JobHandler] = {}


def register(handler: JobHandler) -> None:
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
    except KeyError:
        raise UnknownJob(name) from None


def all_handlers() -> dict[str, JobHandler]:
    return dict(_handlers)


def _origin(handler: JobHandler) -> str:
    func = handler.func
    return f"{func.__module__}.{func.__qualname__}"
