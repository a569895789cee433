"""Turning keyword arguments into a stored payload, and a stored payload back into a call."""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping
from typing import Any

from durable_jobs.exceptions import EnqueueError, PayloadMismatch
from durable_jobs.validate import describe_unstorable, first_unstorable, text_problem

#: Values whose JSON text is certain once first_unstorable has passed them (an int only
#: up to 64 bits: a longer one may have no JSON text, see below).
PLAIN_TYPES = frozenset({str, float, bool, type(None)})


def _plain(value: Any) -> bool:
    kind = type(value)
    return kind in PLAIN_TYPES or (kind is int and -(2**63) <= value < 2**64)


def check_json(handler_name: str, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """Return ``kwargs`` as a payload, or refuse values that don't survive JSON unchanged."""
    for key, value in kwargs.items():
        # A name NUL or a lone surrogate spoils is refused like such a value: PostgreSQL
        # would refuse the row, SQLite store it (only a handler's **kwargs lets it through).
        problem = text_problem(key) if isinstance(key, str) else "not text"
        if problem:
            raise EnqueueError(f"{handler_name}: an argument's name is {problem}.")
        found = first_unstorable(value, key)
        if found:
            where, bad = found
            raise EnqueueError(
                f"{handler_name}: argument {where} is {describe_unstorable(bad)}. Job payloads are "
                "stored as JSON and must come back unchanged."
            )
    # A final round trip guards against subclasses with surprising JSON forms; plain
    # values, the common case (ids, text), have none.
    payload = dict(kwargs)
    if all(_plain(value) for value in payload.values()):
        return payload
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
