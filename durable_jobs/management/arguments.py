"""The argument types of ``manage.py jobs``: each turns one option's text into its value,
or raises :class:`argparse.ArgumentTypeError` saying what is wrong (argparse then exits 2
with the message)."""

from __future__ import annotations

import argparse
import datetime
import re

from django.utils import timezone

from durable_jobs import validate
from durable_jobs.lifecycle.states import State
from durable_jobs.limits import BIGINT_MAX, MAX_PRUNE_DAYS

_DURATION = re.compile(r"^(\d+)([smhd])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


#: Ids are BigAutoFields: anything outside this range can match no row, and would make
#: SQLite's driver raise OverflowError (PostgreSQL's: "bigint out of range") if queried.
MAX_ID = BIGINT_MAX


def since_value(text: str) -> datetime.datetime:
    """``--since``: a duration back from now (``30m``, ``2h``, ``7d``) or an aware ISO time."""
    problem = (
        f"{text!r} is not a duration back from now (30m, 2h, 7d) or an aware ISO 8601 time "
        "(2026-01-31T08:00:00+00:00)"
    )
    try:
        match = _DURATION.match(text.strip())
        if match:
            return timezone.now() - datetime.timedelta(**{_UNITS[match[2]]: int(match[1])})
        value = datetime.datetime.fromisoformat(text)
        if timezone.is_naive(value):
            raise argparse.ArgumentTypeError(f"{problem}: give the time's UTC offset")
        value.astimezone(datetime.UTC)  # the database compares in UTC
    # OverflowError: "99999999999d", or a time whose UTC falls outside years 1-9999.
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(problem) from None
    return value


def state_value(text: str) -> str:
    try:
        return State(text).value
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"unknown state {text!r}; states are {', '.join(State.values)}"
        ) from None


def id_value(text: str) -> int:
    """A job or batch id: a whole number from 1 to :data:`MAX_ID`."""
    try:
        number = int(text)
    except ValueError:
        number = 0
    if not 1 <= number <= MAX_ID:
        raise argparse.ArgumentTypeError(f"{text!r} is not an id: ids are whole numbers >= 1")
    return number


def limit_value(text: str) -> int:
    try:
        number = int(text)
    except ValueError:
        number = -1
    if not 0 <= number <= MAX_ID:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of rows (0 or more)")
    return number


def text_value(text: str) -> str:
    """A name to match: text the database can compare (argv may hold NUL-free but
    undecodable bytes, which Python turns into lone surrogates)."""
    problem = validate.text_problem(text)
    if problem:
        raise argparse.ArgumentTypeError(f"{text!r} is {problem}")
    return text


def queue_value(text: str) -> str:
    """A queue to pause or resume: a name a queue can have (its row is created if need be)."""
    text_value(text)
    if not validate.is_queue_name(text):
        raise argparse.ArgumentTypeError(
            f"{text[:120]!r} is not a queue name: queue names are {validate.queue_name_rule()}"
        )
    return text


def days_value(text: str) -> float:
    try:
        days = float(text)
    except ValueError:
        days = -1.0
    # "not <=" also refuses NaN; a negative number would prune jobs finished "in the
    # future", that is every finished job, which --days 0 says plainly if it is meant.
    if not 0 <= days <= MAX_PRUNE_DAYS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number of days from 0 to {MAX_PRUNE_DAYS}"
        )
    return days


def max_lag_value(text: str) -> float:
    """``--max-lag``: seconds, a finite number >= 0."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if validate.seconds_problem(seconds, zero=True):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number of seconds >= 0 (at most a year), as in --max-lag 300"
        )
    return seconds


def node_value(text: str) -> str:
    """``--node``: a node name, as ``runworker --name`` gave it."""
    if not text.strip():
        # What a Kubernetes exec probe passes for "$(POD_NAME)" when POD_NAME comes from
        # the downward API: the kubelet expands only literal env values in probes.
        raise argparse.ArgumentTypeError(
            "the node name is empty. In a Kubernetes exec probe, $(POD_NAME) expands to "
            'nothing: run the probe through a shell, with --node "$POD_NAME"'
        )
    return text_value(text)
