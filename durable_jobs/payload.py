"""Turning keyword arguments into a stored payload, and a stored payload back into a call."""

from __future__ import annotations

import datetime
import decimal
import inspect
import json
import math
import uuid
from collections.abc import Mapping
from typing import Any

from durable_jobs.exceptions import EnqueueError, PayloadMismatch

#: How deeply lists and dicts may nest in a payload. Everything that reads a payload back
#: recurses into it (the admin's pretty-printer, redaction, the CLI's JSON output), and at
#: a few hundred levels Python's recursion limit stops them: a deeper payload could be
#: stored but its job could never be shown. Real arguments are a few levels deep.
MAX_DEPTH = 100


class _TooDeep:
    """Marks the place where a payload nests deeper than :data:`MAX_DEPTH`."""


#: From here up Python writes a float as 1e+16 (an exponent), which PostgreSQL's jsonb
#: reads back as an integer. Compared directly, not through repr(), on every float.
EXPONENT_FORM = 1e16


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


def _describe(value: Any) -> str:
    if value is _TooDeep:
        return (
            f"nested more than {MAX_DEPTH} levels deep, deeper than the admin and the CLI "
            "can show: store the data elsewhere (a model, a file) and pass its id"
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
        f"a {type(value).__name__}: pass ids or plain JSON values "
        "(str, int, float, bool, None, list, dict)"
    )


def first_unstorable(value: Any, path: str, depth: int = 0) -> tuple[str, Any] | None:
    """The first part of ``value`` that would not come back unchanged from JSON."""
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
        return (path, _TooDeep)
    if isinstance(value, list):
        for i, item in enumerate(value):
            found = first_unstorable(item, f"{path}[{i}]", depth + 1)
            if found:
                return found
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                return (f"{path}[{key!r}]", value)
            if text_problem(key):
                return (f"{path}[{key!r}]", key)
            found = first_unstorable(item, f"{path}[{key!r}]", depth + 1)
            if found:
                return found
        return None
    return (path, value)


def check_json(handler_name: str, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``kwargs`` as a payload, or refuse values that don't survive JSON unchanged."""
    for key, value in kwargs.items():
        found = first_unstorable(value, key)
        if found:
            where, bad = found
            raise EnqueueError(
                f"{handler_name}: argument {where} is {_describe(bad)}. Job payloads are "
                "stored as JSON and must come back unchanged."
            )
    # A final round trip guards against subclasses with surprising JSON forms.
    payload = dict(kwargs)
    try:
        same = json.loads(json.dumps(payload, allow_nan=False)) == payload
    except ValueError as exc:
        # An int of more than 4,300 digits (sys.get_int_max_str_digits()) has no JSON text;
        # without this, the caller would see a bare ValueError from the json module.
        raise EnqueueError(
            f"{handler_name}: the arguments cannot be written as JSON ({exc}); pass very "
            "large numbers as strings."
        ) from None
    if not same:
        raise EnqueueError(
            f"{handler_name}: the arguments do not survive a JSON round trip; pass plain JSON "
            "values (ids, ISO strings) instead of objects."
        )
    return payload


def parameters(func: Any, *, takes_context: bool) -> inspect.Signature:
    """The handler's signature as callers see it (without the ``context`` parameter)."""
    sig = inspect.signature(func)
    params = list(sig.parameters.values())
    if takes_context:
        if not params or params[0].name != "context":
            raise TypeError(
                f"{func.__qualname__} uses @job(takes_context=True), so its first parameter "
                "must be named 'context'."
            )
        params = params[1:]
    return sig.replace(parameters=params)


def check_binds(
    handler_name: str, signature: inspect.Signature, args: tuple, kwargs: Mapping
) -> None:
    """Refuse positional arguments and anything the handler's signature would reject."""
    if args:
        raise EnqueueError(
            f"{handler_name}: positional arguments are not accepted (got {len(args)}). "
            "Jobs store their arguments by name; call it with keywords, "
            f"for example .delay({_example(signature)})."
        )
    try:
        signature.bind(**kwargs)
    except TypeError as exc:
        raise EnqueueError(
            f"{handler_name}: {exc}. The handler's signature is {handler_name}{plain(signature)}; "
            "pass exactly the keyword arguments it takes."
        ) from None


def bind_stored(handler_name: str, signature: inspect.Signature, payload: Any) -> dict[str, Any]:
    """The keyword arguments for a stored payload, or PayloadMismatch if they no longer fit."""
    if not isinstance(payload, dict):
        raise PayloadMismatch(
            f"the stored payload of {handler_name} is {type(payload).__name__}, not an object "
            "of keyword arguments"
        )
    try:
        signature.bind(**payload)
    except TypeError as exc:
        raise PayloadMismatch(
            f"the stored payload no longer fits {handler_name}{plain(signature)}: {exc}. "
            "The handler's signature changed after the job was enqueued; enqueue it again "
            "with the new arguments (or give the new parameter a default)."
        ) from None
    return payload


def plain(signature: inspect.Signature) -> str:
    """``(a, b=0)``: the signature as a caller writes it, without annotations."""
    params = [p.replace(annotation=p.empty) for p in signature.parameters.values()]
    return str(signature.replace(parameters=params, return_annotation=signature.empty))


def _example(signature: inspect.Signature) -> str:
    names = [
        p.name
        for p in signature.parameters.values()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    ]
    return ", ".join(f"{n}=..." for n in names) or ""
