"""Errors and results as text every database stores, whatever the handler raised or returned."""

from __future__ import annotations

import json
import traceback
from typing import Any

from durable_jobs.validate import first_unstorable

#: The longest text kept of a result JSON cannot hold.
RESULT_TEXT_MAX = 10_000


def clean_text(text: str) -> str:
    """Text every database will store: PostgreSQL refuses NUL characters in text columns,
    and no driver can encode a lone surrogate (an error message quoting a file name
    decoded with 'surrogateescape'); either would stop the worker recording the outcome."""
    if not text.isascii():
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text.replace("\x00", "\\x00")


class DescribedError(Exception):
    """An error known by its description only: raised in another process (a child of the
    process executor), whose exception object did not cross over, only its text."""

    def __init__(self, error_class: str, message: str, trace: str = "") -> None:
        super().__init__(message)
        self.error_class, self.message, self.trace = error_class, message, trace
        if trace:
            # Shown by logging's exc_info (so error trackers get the child's stack), the
            # way concurrent.futures shows a worker process's traceback.
            self.__cause__ = RemoteTraceback(trace)


class RemoteTraceback(Exception):
    def __init__(self, trace: str) -> None:
        super().__init__(trace)

    def __str__(self) -> str:
        return f'\n"""\n{self.args[0]}"""'


def describe_error(error: BaseException | None) -> tuple[str, str, str]:
    """(class path, the whole cause chain as text, the formatted traceback)."""
    if error is None:
        return "", "", ""
    if isinstance(error, DescribedError):
        return error.error_class, error.message, error.trace
    cls = type(error)
    chain, seen = [], set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        chain.append(f"{type(current).__qualname__}: {_text_of(current)}")
        current = current.__cause__ or (
            None if current.__suppress_context__ else current.__context__
        )
    message = "\ncaused by: ".join(chain)
    trace = "".join(traceback.format_exception(error)) if error.__traceback__ else ""
    return f"{cls.__module__}.{cls.__qualname__}", message, trace


def _text_of(error: BaseException) -> str:
    """``str(error)``, or a note when the exception's own ``__str__`` fails: this runs in
    the worker's loop, where an exception escaping would stop the worker."""
    try:
        return str(error)
    except Exception as exc:
        return f"<str() of the exception failed: {type(exc).__name__}>"


def storable(value: Any) -> Any:
    """The handler's return value if JSON keeps it (in every database), else its text.

    Never raises: the handler has already run, so a result that cannot be stored must
    not turn its success into a failure (and a retry that repeats its side effects).
    """
    try:
        # The payload's rules: text PostgreSQL refuses (NUL, lone surrogates) and nesting
        # too deep to show are kept as text too, the same on every database.
        if first_unstorable(value, "result") is None and (
            json.loads(json.dumps(value, allow_nan=False)) == value
        ):
            return value
    except (TypeError, ValueError, RecursionError):
        pass
    try:
        text = repr(value)
    except Exception as exc:  # RecursionError for deep values, or a __repr__ that fails
        text = f"<{type(value).__name__} that could not be shown: {type(exc).__name__}>"
    # A custom __repr__ may return NUL or lone surrogates itself.
    return {"repr": clean_text(text[:RESULT_TEXT_MAX])}
