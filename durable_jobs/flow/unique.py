"""Unique jobs: ``@job(unique=Unique(...))`` derives the idempotency key from the arguments.

The key is ``unique:<handler>:<digest>[:<bucket>]`` where the digest covers the handler
name and the chosen arguments (defaults applied, canonical JSON), and the bucket is
the start of the ``period`` the enqueue falls in. The database's unique constraint
on the key decides between concurrent enqueues. A job holds its key while it is in
one of ``states``; the transition that first takes it elsewhere clears the key (see
:func:`durable_jobs.states.transition`), so a new job with the same arguments can
then be enqueued.
"""

from __future__ import annotations

import datetime
import hashlib
import inspect
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from durable_jobs.exceptions import EnqueueError
from durable_jobs.lifecycle.states import UNFINISHED, State


@dataclass(frozen=True)
class Unique:
    """Options for ``@job(unique=...)``.

    - ``fields``: the argument names that make two jobs "the same" (default: all of them).
    - ``period``: uniqueness holds within fixed time buckets of this length (default: forever).
    - ``states``: the states in which an existing job blocks a new one (default: unfinished).
    """

    fields: Sequence[str] | None = None
    period: datetime.timedelta | None = None
    # By default a key is held until the job finishes (completed, dead or cancelled).
    states: Iterable[str] = field(default=UNFINISHED)

    def __post_init__(self) -> None:
        states = tuple(State(s) for s in self.states)
        if State.QUEUED not in states:
            raise ValueError(
                "Unique(states=...) must include 'queued': a new job starts queued, and "
                "the key must hold then"
            )
        object.__setattr__(self, "states", states)
        if self.fields is not None:
            if isinstance(self.fields, str):
                raise ValueError('Unique(fields=...) takes a list of names, as in ["account_id"]')
            object.__setattr__(self, "fields", tuple(self.fields))
        if self.period is not None and (
            not isinstance(self.period, datetime.timedelta) or self.period.total_seconds() < 1
        ):
            raise ValueError("Unique(period=...) must be a timedelta of at least one second")

    def check_fields(self, handler_name: str, signature: inspect.Signature) -> None:
        """At decoration time: every field must be one of the handler's parameters."""
        accepts_any = any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
        unknown = [f for f in self.fields or () if f not in signature.parameters]
        if unknown and not accepts_any:
            raise ValueError(
                f"@job(unique=Unique(fields={list(self.fields or ())})) of {handler_name}: "
                f"{', '.join(unknown)} is not a parameter of the handler"
            )

    def stored_states(self) -> str:
        """The states as stored on the job: ``",queued,leased,retrying,"``."""
        return "," + ",".join(State(s).value for s in self.states) + ","

    def key(
        self,
        handler_name: str,
        signature: inspect.Signature,
        payload: Mapping[str, Any],
        now: datetime.datetime,
        *,
        scope: str | None = None,
    ) -> str:
        """The job's key. ``scope`` (for example ``"user:42"``) keeps jobs of different
        scopes apart even where their arguments match; None is the one global scope."""
        arguments = with_defaults(signature, payload)
        if self.fields is not None:
            arguments = {name: arguments.get(name) for name in self.fields}
        identity: list[Any] = [handler_name, arguments]
        if scope is not None:  # unscoped keys stay what they were before scopes existed
            identity.append(scope)
        canonical = json.dumps(identity, sort_keys=True, separators=(",", ":"), default=str)
        digest = hashlib.sha256(canonical.encode()).hexdigest()[:40]
        key = f"unique:{handler_name[:180]}:{digest}"
        if self.period is not None:
            key += f":{bucket_start(now, self.period)}"
        return key


def bucket_start(now: datetime.datetime, period: datetime.timedelta) -> int:
    """The start (epoch seconds) of the ``period``-long bucket containing ``now``."""
    size = period.total_seconds()
    return int(now.timestamp() // size * size)


def with_defaults(signature: inspect.Signature, payload: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments a call with ``payload`` binds, defaults included."""
    try:
        bound = signature.bind_partial(**payload)
    except TypeError as exc:  # already checked at enqueue; keep the message if not
        raise EnqueueError(str(exc)) from None
    bound.apply_defaults()
    arguments: dict[str, Any] = {}
    for name, value in bound.arguments.items():
        if signature.parameters[name].kind is inspect.Parameter.VAR_KEYWORD:
            arguments.update(value)
        else:
            arguments[name] = value
    return arguments
