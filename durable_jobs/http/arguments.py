"""A client's JSON body, checked against the handler's signature: one error list per argument.

The checks are those of an enqueue (:func:`durable_jobs.payload.check_binds` and
:func:`~durable_jobs.payload.check_json`), reported per argument so that a form can
show them, plus what an enqueue from trusted code does not need:

- the argument's annotation, where it is one of the JSON types (``int``, ``float``,
  ``str``, ``bool``, ``None``, ``list[...]``, ``dict[str, ...]``, unions and
  ``Literal``): ``"42"`` for an ``int`` is refused here, instead of making a job that
  fails in the handler. Other annotations (a dataclass, a ``TypedDict``) are not
  checked: the handler must check what it receives;
- text PostgreSQL cannot store (a NUL character) or that is not valid Unicode (a lone
  surrogate escape), which would otherwise fail the INSERT.
"""

from __future__ import annotations

import functools
import json
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, Union

from durable_jobs import payload as payloads
from durable_jobs.exceptions import EnqueueError

if typing.TYPE_CHECKING:
    from durable_jobs.handlers import JobHandler

#: The key of errors that are about the whole body, as in Django forms.
NON_FIELD_ERRORS = "__all__"

Errors = dict[str, list[str]]


class InvalidBody(ValueError):
    """The request body is not a JSON object of arguments."""


def parse_body(raw: bytes) -> dict[str, Any]:
    """The arguments in ``raw``: a JSON object, or nothing at all (no arguments)."""
    if not raw.strip():
        return {}
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidBody("The body is not UTF-8 text.") from None
    try:
        value = json.loads(text, parse_constant=_refuse_constant, object_pairs_hook=_no_repeats)
    except InvalidBody:
        raise
    except RecursionError:
        raise InvalidBody("The body is nested too deeply.") from None
    except ValueError as exc:
        raise InvalidBody(f"The body is not valid JSON: {exc}.") from None
    if not isinstance(value, dict):
        raise InvalidBody(
            f"The body must be a JSON object of keyword arguments, not {_json_type(value)}."
        )
    return value


def field_errors(handler: JobHandler, arguments: Mapping[str, Any]) -> Errors:
    """What is wrong with ``arguments`` for ``handler``, per argument; empty when nothing."""
    errors: Errors = {}
    params = handler.signature.parameters
    named = {
        name: p for name, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    }
    takes_any = any(p.kind == p.VAR_KEYWORD for p in params.values())
    for name in arguments:
        if name not in named and not takes_any:
            errors[name] = ["Unexpected argument."]
    for name, param in named.items():
        if param.default is param.empty and name not in arguments:
            errors[name] = ["This argument is required."]
    hints = _hints(handler.func)
    for name, value in arguments.items():
        if name in errors:
            continue
        problem = _text_problem(value) or _type_problem(value, hints.get(name, Any))
        if problem:
            errors[name] = [problem]
    if errors:
        return errors
    # Whatever the per-argument checks do not foresee (positional-only parameters), and
    # the JSON round trip, exactly as an enqueue checks them. The binding's own message
    # shows the handler's signature, defaults included (a DSN, say): never the client's.
    try:
        payloads.check_binds(handler.name, handler.signature, (), arguments)
    except EnqueueError:
        errors[NON_FIELD_ERRORS] = ["The arguments do not fit this job's parameters."]
        return errors
    try:
        payloads.check_json(handler.name, arguments)
    except EnqueueError as exc:
        errors[NON_FIELD_ERRORS] = [str(exc)]  # about the client's own values only
    except RecursionError:
        errors[NON_FIELD_ERRORS] = ["The arguments are nested too deeply."]
    return errors


def _refuse_constant(name: str) -> Any:
    raise InvalidBody(f"The body contains {name}, which is not JSON (and cannot be stored).")


def _no_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise InvalidBody(f"The body repeats the key {key!r}.")
        found[key] = value
    return found


@functools.lru_cache(maxsize=256)
def _hints(func: Callable[..., Any]) -> dict[str, Any]:
    """The handler's resolved annotations; none when they cannot be resolved (names
    imported only for type checkers), in which case no argument's type is checked."""
    try:
        return typing.get_type_hints(func)
    except Exception:
        return {}


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    return "an object"


def _text_problem(value: Any, where: str = "") -> str | None:
    """A string in ``value`` (or a key) that cannot be stored, described; else None."""
    pending: list[tuple[Any, str]] = [(value, where)]
    while pending:
        item, path = pending.pop()
        texts: list[str] = []
        if isinstance(item, str):
            texts = [item]
        elif isinstance(item, list):
            pending.extend((v, f"{path}[{i}]") for i, v in enumerate(item))
        elif isinstance(item, dict):
            texts = list(item)
            pending.extend((v, f"{path}[{k!r}]") for k, v in item.items())
        for text in texts:
            at = f" (at {path})" if path else ""
            if "\x00" in text:
                return f"Contains a NUL character{at}, which cannot be stored."
            try:
                text.encode("utf-8")
            except UnicodeEncodeError:
                return f"Contains an unpaired surrogate escape{at}, which is not valid Unicode."
    return None


_SIMPLE: dict[Any, tuple[Callable[[Any], bool], str]] = {
    bool: (lambda v: isinstance(v, bool), "true or false"),
    int: (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    float: (lambda v: isinstance(v, int | float) and not isinstance(v, bool), "a number"),
    str: (lambda v: isinstance(v, str), "a string"),
    type(None): (lambda v: v is None, "null"),
    None: (lambda v: v is None, "null"),
}

#: (where, what was expected, the value found there)
Mismatch = tuple[str, str, Any]


def _type_problem(value: Any, hint: Any) -> str | None:
    """Why ``value`` does not fit the annotation ``hint``; None when it does, or when the
    annotation is not one of the JSON types."""
    found = _mismatch(value, hint, "")
    if found is None:
        return None
    where, expected, actual = found
    at = f"{where}: expected" if where else "Expected"
    return f"{at} {expected}, got {_json_type(actual)}."


def _simple(hint: Any) -> tuple[Callable[[Any], bool], str] | None:
    try:
        return _SIMPLE.get(hint)
    except TypeError:  # an unhashable annotation: not one of ours
        return None


def _mismatch(value: Any, hint: Any, where: str) -> Mismatch | None:
    simple = _simple(hint)
    if simple is not None:
        fits, expected = simple
        return None if fits(value) else (where, expected, value)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Union or origin is types.UnionType:
        found = [_mismatch(value, arg, where) for arg in args]
        if any(f is None for f in found):
            return None
        described = [_describe(arg) for arg in args]
        if None in described:
            return None  # a member that is not checked might accept it
        deeper = [f for f in found if f is not None and f[0] != where]
        if len(deeper) == 1:
            return deeper[0]  # the one member of the right kind, with a wrong item
        return (where, " or ".join(d for d in described if d), value)
    if origin is Literal:
        if any(value == arg and type(value) is type(arg) for arg in args):
            return None
        return (where, _describe(hint) or "", value)
    kind = origin or hint
    if kind in (list, Sequence):
        if not isinstance(value, list):
            return (where, "a list", value)
        for i, item in enumerate(value):
            found_item = _mismatch(item, args[0] if args else Any, f"{where}[{i}]")
            if found_item:
                return found_item
        return None
    if kind in (dict, Mapping):
        if not isinstance(value, dict):
            return (where, "an object", value)
        for key, item in value.items():
            found_item = _mismatch(item, args[1] if len(args) == 2 else Any, f"{where}[{key!r}]")
            if found_item:
                return found_item
        return None
    return None  # Any, or not a JSON type: the handler checks it


def _describe(hint: Any) -> str | None:
    """A short description of a checked annotation; None for one that is not checked."""
    simple = _simple(hint)
    if simple is not None:
        return simple[1]
    origin = typing.get_origin(hint)
    if (origin or hint) in (list, Sequence):
        return "a list"
    if (origin or hint) in (dict, Mapping):
        return "an object"
    if origin is Literal:
        shown = [
            json.dumps(arg) if isinstance(arg, str | int | bool | None) else repr(arg)
            for arg in typing.get_args(hint)
        ]
        return "one of " + ", ".join(shown)
    return None
