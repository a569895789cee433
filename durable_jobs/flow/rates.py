"""Rate limits: ``"30/1m"`` parsing, and the sliding log a queue's claims keep.

The log is a list of ``[epoch seconds, starts]`` pairs, one per claim that started
jobs. A claim holds the queue row's lock while it reads the log, drops entries
older than the window, and appends its own, so "at most N starts in any window of
the period" holds exactly across every node. The log holds at most one entry per
claim in the window, and claims lease many jobs at once, so it stays short.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

#: Each unit's spellings, short and long ("30/1m", "10/minute", "100/hours").
_UNITS = {
    1: ("s", "sec", "secs", "second", "seconds"),
    60: ("m", "min", "mins", "minute", "minutes"),
    3600: ("h", "hr", "hrs", "hour", "hours"),
    86400: ("d", "day", "days"),
}
_UNIT_SECONDS = {name: seconds for seconds, names in _UNITS.items() for name in names}
_RATE = re.compile(
    r"^\s*(\d+)\s*/\s*(\d*(?:\.\d+)?)\s*("
    + "|".join(sorted(_UNIT_SECONDS, key=len, reverse=True))
    + r")?\s*$",
    re.I,
)


class InvalidRate(ValueError):
    pass


def parse_rate(text: str) -> tuple[int, float]:
    """``"30/1m"`` -> ``(30, 60.0)``: at most 30 starts per sliding minute.

    Units: ``s``, ``m``, ``h``, ``d``, or spelled out (``second``, ``minute``, ``hour``,
    ``day``, and their plurals); the number before the unit is optional (``100/s``,
    ``10/minute``).
    """
    match = _RATE.match(str(text))
    if not match:
        raise InvalidRate(
            f"Invalid rate {text!r}: write starts/period, as in 30/1m, 5/2s, 1000/h or 10/minute"
        )
    count, amount, unit = match.groups()
    if unit is None and not amount:
        raise InvalidRate(f"Invalid rate {text!r}: the period needs a unit, as in 30/1m")
    seconds = float(amount or 1) * _UNIT_SECONDS[(unit or "s").lower()]
    if int(count) < 1 or seconds <= 0:
        raise InvalidRate(
            f"Invalid rate {text!r}: the count and the period must both be > 0, as in 30/1m"
        )
    return int(count), seconds


def format_rate(limit: int | None, period: float | None) -> str:
    """``(30, 60.0)`` -> ``"30/1m"``; empty when there is no limit."""
    if not limit or not period:
        return ""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if period >= size and period % size == 0:
            return f"{limit}/{int(period // size)}{unit}"
    return f"{limit}/{period:g}s"


def window_entries(log: object, now: float, period: float) -> list[list[float]]:
    """The log's entries still inside the window ending at ``now`` (malformed ones dropped)."""
    kept: list[list[float]] = []
    if not isinstance(log, list):
        return kept
    for entry in log:
        if (
            isinstance(entry, Sequence)
            and len(entry) == 2
            and all(isinstance(v, (int, float)) for v in entry)
            and entry[0] > now - period
        ):
            kept.append([float(entry[0]), int(entry[1])])
    return kept


def remaining(log: object, now: float, limit: int, period: float) -> int:
    """How many more jobs may start at ``now``."""
    return max(0, limit - sum(int(n) for _, n in window_entries(log, now, period)))


def next_slot(log: object, now: float, limit: int, period: float) -> float | None:
    """The epoch time at which another start becomes allowed; None if one is allowed now."""
    entries = sorted(window_entries(log, now, period))
    excess = sum(int(n) for _, n in entries) - limit + 1
    if excess <= 0:
        return None
    for started, count in entries:
        excess -= int(count)
        if excess <= 0:
            return started + period
    return now + period
