"""The rules every input is checked by, each stated once: text and JSON every database
stores, queue names, priorities, retry counts, keys and seconds.

Handlers, enqueues, schedules, the settings checks, the worker's options, the CLI and
the admin all call these. A rule raises :class:`Invalid` with its own message, which
names the value (``label``) and what it must be; callers add where the value came from.
"""

from __future__ import annotations

import contextlib
import datetime
import decimal
import math
import uuid
from collections.abc import Iterator, Mapping
from typing import Any, TypeGuard

from durable_jobs import limits


class Invalid(ValueError):
    """A value breaks one of the rules; the message says which, and what would do."""


@contextlib.contextmanager
def refused_as(error: type[Exception], where: str) -> Iterator[None]:
    """Raise a broken rule as ``error``, its message after ``where``:
    ``with refused_as(EnqueueError, handler.name): priority(value)``."""
    try:
        yield
    except Invalid as exc:
        raise error(f"{where}: {exc}") from None


def _kind(value: Any) -> str:
    return "None" if value is None else type(value).__name__


# -- text ------------------------------------------------------------------------------------


def text_problem(text: str) -> str | None:
    """Why ``text`` cannot be stored in every supported database, or None if it can.

    SQLite stores both cases below, PostgreSQL refuses them (and aborts the
    transaction): refusing them everywhere keeps a project's tests on SQLite honest.
    """
    if "\x00" in text:
        return (
            "text containing a NUL character (\\x00), which PostgreSQL cannot store: "
            "remove it, or pass the data base64-encoded"
        )
    if not text.isascii():  # O(1) in CPython: the common case costs nothing
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return (
                "text with a lone surrogate (such as a file name decoded with "
                "'surrogateescape'), which is not valid Unicode: pass os.fsencode(name) "
                "base64-encoded, or text decoded with errors='replace'"
            )
    return None


def text(value: str, label: str) -> str:
    problem = text_problem(value)
    if problem:
        raise Invalid(f"{label} cannot be {problem}")
    return value


#: What a queue's name must be (written where a name is refused).
QUEUE_NAME_RULE = "1-{length} characters without ':' or ','"


def queue_name_rule() -> str:
    return QUEUE_NAME_RULE.format(length=limits.length("Job", "queue"))


def is_queue_name(value: Any) -> bool:
    return (
        isinstance(value, str)
        and 0 < len(value) <= limits.length("Job", "queue")
        # They separate the entries of ``runworker --queues``.
        and ":" not in value
        and "," not in value
        and text_problem(value) is None
    )


def queue_name(value: Any, label: str = "queue") -> str:
    """A queue's name: :func:`queue_name_rule`, and text every database stores."""
    if isinstance(value, str) and text_problem(value):
        text(value, label)
    if not is_queue_name(value):
        raise Invalid(f"{label} must be {queue_name_rule()} (got {value!r:.120})")
    return str(value)


def key(value: Any, label: str, *, model: str = "Job", field: str = "idempotency_key") -> str:
    """A key stored in ``model.field``: 1 to its length of characters, storable text."""
    length = limits.length(model, field)
    if not isinstance(value, str) or not 0 < len(value) <= length:
        raise Invalid(f"{label} must be a string of 1-{length} characters")
    return text(value, label)


# -- numbers ---------------------------------------------------------------------------------


def whole(value: Any) -> TypeGuard[int]:
    """An int that is not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


def priority(value: Any, label: str = "priority") -> int:
    if not whole(value):
        raise Invalid(
            f"{label} must be an integer from {limits.PRIORITY_MIN} to {limits.PRIORITY_MAX}"
        )
    if not limits.PRIORITY_MIN <= value <= limits.PRIORITY_MAX:
        raise Invalid(
            f"{label} {value} is out of range; use {limits.PRIORITY_MIN} (last) to "
            f"{limits.PRIORITY_MAX} (first)"
        )
    return int(value)


#: What a retry count must be.
RETRIES_RULE = f"an integer from 0 to {limits.INT32_MAX}"


def is_retries(value: Any) -> bool:
    return whole(value) and 0 <= value <= limits.INT32_MAX


def retries(value: Any, label: str = "max_retries") -> int:
    if not whole(value) or value < 0:
        raise Invalid(f"{label} must be an integer >= 0")
    if value > limits.INT32_MAX:
        # Past the column's range the insert fails with a bare OverflowError or DataError.
        raise Invalid(f"{label} can be at most {limits.INT32_MAX}")
    return int(value)


def count(value: Any, label: str, *, least: int = 1) -> int:
    """A whole number from ``least`` up to what the columns hold (limits, concurrency)."""
    if not whole(value) or not least <= value <= limits.INT32_MAX:
        raise Invalid(f"{label} must be an integer from {least} to {limits.INT32_MAX}")
    return int(value)


def is_global_concurrency(value: Any) -> bool:
    """A queue's ``global_concurrency``: None (no limit) or a whole number from 1."""
    return value is None or (whole(value) and 1 <= value <= limits.INT32_MAX)


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def seconds_problem(value: Any, *, zero: bool = False) -> str | None:
    """What is wrong with ``value`` as a number of seconds (``> 0``, or ``>= 0`` with
    ``zero``, and at most :data:`~durable_jobs.limits.MAX_SECONDS`), or None."""
    if not is_number(value) or value < 0 or (value == 0 and not zero):
        return f"must be a number {'>= 0' if zero else '> 0'}"
    # "not <=" also refuses NaN, which passes every comparison above; inf or a huge
    # number overflows the datetime arithmetic the workers do with it.
    if not value <= limits.MAX_SECONDS:
        return f"must be a finite number of seconds, at most {limits.MAX_SECONDS:g} (a year)"
    return None


def seconds(value: Any, label: str, *, zero: bool = False) -> float:
    problem = seconds_problem(value, zero=zero)
    if problem:
        raise Invalid(f"{label} {problem} (got {value!r})")
    return float(value)


# -- JSON ------------------------------------------------------------------------------------

#: How deeply lists and dicts may nest in a payload, the same in every database: MariaDB
#: refuses a JSON document nested more than 32 levels, and a stored payload wraps an
#: argument in up to three more (a Task's {"kwargs": {name: ...}}, the value under it).
#: Everything that reads a payload back also recurses into it (the admin's
#: pretty-printer, redaction, the CLI's JSON output). Real arguments are a few levels deep.
MAX_DEPTH = 28

#: From here up Python writes a float as 1e+16 (an exponent), which PostgreSQL's jsonb
#: reads back as an integer. Compared directly, not through repr(), on every float.
EXPONENT_FORM = 1e16


class TooDeep:
    """Marks the place where a value nests deeper than :data:`MAX_DEPTH`."""


def first_unstorable(value: Any, path: str, depth: int = 0) -> tuple[str, Any] | None:
    """The first part of ``value`` that would not come back unchanged from JSON, in every
    database: ``(where, the part)``, or None."""
    if value is None or isinstance(value, bool | int):
        return None
    if isinstance(value, str):
        return (path, value) if text_problem(value) else None
    if isinstance(value, float):
        finite = value == value and value not in (float("inf"), float("-inf"))
        # PostgreSQL's jsonb keeps numbers as decimals: 1e+16 comes back as the int
        # 10000000000000000, 6.02e+23 as an int that is not even equal to the float.
        return None if finite and abs(value) < EXPONENT_FORM else (path, value)
    if isinstance(value, list | dict) and depth >= MAX_DEPTH:
        # Checked before recursing further, so a 10,000-level value is refused with this
        # message instead of a RecursionError.
        return (path, TooDeep)
    if isinstance(value, list):
        for i, item in enumerate(value):
            found = first_unstorable(item, f"{path}[{i}]", depth + 1)
            if found:
                return found
        return None
    if isinstance(value, dict):
        for name, item in value.items():
            if not isinstance(name, str):
                return (f"{path}[{name!r}]", value)
            if text_problem(name):
                return (f"{path}[{name!r}]", name)
            found = first_unstorable(item, f"{path}[{name!r}]", depth + 1)
            if found:
                return found
        return None
    return (path, value)


def describe_unstorable(value: Any) -> str:
    """What ``value`` (found by :func:`first_unstorable`) is, and what to pass instead."""
    if value is TooDeep:
        return (
            f"nested more than {MAX_DEPTH} levels deep, deeper than every supported database "
            "stores: store the data elsewhere (a model, a file) and pass its id"
        )
    if isinstance(value, str):
        return text_problem(value) or "text"
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return "a date/time: pass value.isoformat() and parse it in the handler"
    if isinstance(value, decimal.Decimal):
        return "a Decimal: pass str(value) and rebuild it with Decimal(...) in the handler"
    if isinstance(value, uuid.UUID):
        return "a UUID: pass str(value)"
    if hasattr(value, "_meta") and hasattr(value, "pk"):
        return "a model instance: pass its primary key (obj.pk) and fetch it in the handler"
    if isinstance(value, tuple):
        return "a tuple, which JSON turns into a list: pass a list"
    if isinstance(value, set | frozenset):
        return "a set: pass a sorted list"
    if isinstance(value, bytes):
        return "bytes: pass text (for example base64) instead"
    if isinstance(value, float) and math.isfinite(value) and abs(value) >= EXPONENT_FORM:
        return (
            f"the float {value!r}, which PostgreSQL's JSON gives back as an integer: pass "
            "an int, or the number as a string and float() it in the handler"
        )
    if isinstance(value, float):
        return "a NaN or infinite float, which JSON cannot store: pass None or a string"
    if isinstance(value, Mapping):
        return "a dict with non-string keys, which JSON turns into strings: use string keys"
    return (
        f"a {_kind(value)}: pass ids or plain JSON values (str, int, float, bool, None, list, dict)"
    )


#: ``max_memory_per_child`` units: binary, as ``ps`` and ``top`` count resident memory.
SIZE_UNITS = {"B": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3, "TB": 1024**4}


def parse_size(value: Any) -> int:
    """``"512MB"`` -> 536870912; a whole number is bytes. ValueError if neither."""
    if whole(value) and value > 0:
        return int(value)
    if isinstance(value, str):
        text = value.strip().upper().replace("IB", "B").replace(" ", "")
        number = text.rstrip("KMGTB")
        unit = text[len(number) :].removesuffix("B") + "B"  # "512M" too
        if number.isdigit() and unit in SIZE_UNITS and int(number) > 0:
            return int(number) * SIZE_UNITS[unit]
    raise ValueError(f"{value!r} is not a size such as '512MB' (B, KB, MB, GB, TB) or bytes")
