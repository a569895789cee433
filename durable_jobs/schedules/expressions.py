"""Schedule expressions: cron, intervals and one-off times, and when they next occur.

Cron is matched against the wall clock in the schedule's IANA timezone. Daylight
saving time makes some wall-clock times not exist (spring forward) and others
happen twice (fall back). The rule, in the order it is applied:

1. **A time that does not exist runs once, at the first instant after the gap.**
   ``30 2 * * *`` in America/New_York on the spring-forward day runs at 03:00 EDT.
   If that instant is also a regular occurrence (``0 * * * *`` at 02:00 and 03:00),
   it runs once.
2. **A time that happens twice runs once, at its first occurrence** (the earlier,
   daylight-time instant), so a daily job never runs twice in a day.
3. **Except when the hour field is** ``*``: such an expression means "every hour"
   (or every minute), not "at this hour of the day", so it runs at both instants
   of a repeated hour. ``0 * * * *`` therefore fires every real hour across both
   changes: no hour in UTC is doubled or lost.

Every occurrence is an aware UTC datetime; the same inputs give the same
occurrences on every node, which is what makes the heartbeat's idempotency keys
deduplicate.
"""

from __future__ import annotations

import datetime
import functools
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadCronError, CroniterBadDateError, CroniterError, croniter

from durable_jobs.exceptions import DurableJobsError

UTC = datetime.UTC

ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

_INTERVAL_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d)\s*$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
#: How far back a transition can move the wall clock (the largest DST shift is 2 h).
_MAX_SHIFT = datetime.timedelta(hours=3)
#: Candidates examined before deciding an expression has no further occurrence.
_MAX_CANDIDATES = 200_000
#: The longest interval (100 years), far inside what datetime arithmetic can hold.
MAX_INTERVAL_SECONDS = 36500 * 86400.0


class InvalidSchedule(DurableJobsError, ValueError):
    """The schedule's expression, timezone or options are invalid; nothing was saved."""


def get_zone(name: str) -> ZoneInfo:
    if not isinstance(name, str) or not name:
        raise InvalidSchedule("timezone must be an IANA name such as 'UTC' or 'Europe/Paris'")
    try:
        return ZoneInfo(name)
    # OSError: a name that is a directory of the zone database ("America") or too long
    # for a file name reaches the file system before ZoneInfo can call it unknown.
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidSchedule(
            f"Unknown timezone {name!r}. Use an IANA name such as 'UTC', 'Europe/Paris' or "
            "'America/New_York' (install the tzdata package if the system has no zone files)."
        ) from None


@dataclass(frozen=True)
class Cron:
    text: str
    has_seconds: bool
    #: The hour field is "*": a repeated hour runs at both of its instants (rule 3).
    every_hour: bool

    kind = "cron"

    def next_after(
        self, instant: datetime.datetime, zone: ZoneInfo, anchor: datetime.datetime | None = None
    ) -> datetime.datetime | None:
        """The first occurrence strictly after ``instant`` (aware), or None if there is none."""
        best: datetime.datetime | None = None
        horizon: datetime.datetime | None = None
        for candidate in self._candidates(instant, zone):
            if horizon is not None and candidate > horizon:
                break
            later = [t for t in self._instants(candidate, zone) if t > instant]
            if not later:
                continue
            if best is None:
                best = min(later)
                shift = _shift_near(best, zone)
                if not shift:
                    return best
                # Around a transition wall time and real time disagree in order (the
                # second pass of a repeated hour comes after later first-pass minutes),
                # so keep looking, as far as the clock shifts, for an earlier one.
                horizon = best.astimezone(zone).replace(tzinfo=None) + shift
            else:
                best = min(best, *later)
        return best

    def _candidates(
        self, instant: datetime.datetime, zone: ZoneInfo
    ) -> Iterator[datetime.datetime]:
        start = instant.astimezone(zone).replace(tzinfo=None)
        shift = _shift_near(instant, zone)
        if shift:
            # Near a transition, wall times before ``start`` may still lie ahead of
            # ``instant`` in real time (the second pass of a repeated hour).
            start -= shift
        # Start a second early so a candidate equal to ``start`` is included.
        it = _iterator(self.text, self.has_seconds)
        it.set_current(start - datetime.timedelta(seconds=1), force=True)
        try:
            for _ in range(_MAX_CANDIDATES):
                yield it.get_next(datetime.datetime)
        except CroniterBadDateError:
            return

    def _instants(self, wall: datetime.datetime, zone: ZoneInfo) -> list[datetime.datetime]:
        first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
        second = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
        first_ok = first.astimezone(zone).replace(tzinfo=None) == wall
        second_ok = second.astimezone(zone).replace(tzinfo=None) == wall
        if first_ok and second_ok:
            if first == second:
                return [first]
            # A repeated wall time (rule 2, or rule 3 for every-hour expressions).
            return [first, second] if self.every_hour else [min(first, second)]
        if first_ok or second_ok:
            return [first if first_ok else second]
        return [_end_of_gap(wall, zone, min(first, second), max(first, second))]

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class Interval:
    seconds: float

    kind = "interval"

    @property
    def delta(self) -> datetime.timedelta:
        return datetime.timedelta(seconds=self.seconds)

    def next_after(
        self, instant: datetime.datetime, zone: ZoneInfo, anchor: datetime.datetime | None = None
    ) -> datetime.datetime | None:
        """``anchor + k * interval`` for the smallest k that lands after ``instant``.

        Anchoring on the schedule's previous occurrence keeps every node's arithmetic
        identical, so their idempotency keys agree.
        """
        if anchor is None:
            return instant + self.delta
        steps = int((instant - anchor) / self.delta) + 1 if instant >= anchor else 0
        occurrence = anchor + steps * self.delta
        while occurrence <= instant:
            occurrence += self.delta
        return occurrence

    def __str__(self) -> str:
        return format_interval(self.seconds)


@dataclass(frozen=True)
class Once:
    at: datetime.datetime

    kind = "once"

    def next_after(
        self, instant: datetime.datetime, zone: ZoneInfo, anchor: datetime.datetime | None = None
    ) -> datetime.datetime | None:
        return self.at if self.at > instant else None

    def __str__(self) -> str:
        return f"once:{self.at.astimezone(UTC).isoformat()}"


Expression = Cron | Interval | Once


def parse(value: str | datetime.timedelta) -> Expression:
    """Parse a cron expression, an alias, an interval (``30s``, ``5m``, a timedelta) or
    ``once:<aware ISO time>``; raise :class:`InvalidSchedule` naming the problem."""
    if isinstance(value, datetime.timedelta):
        return parse_interval(value)
    if not isinstance(value, str) or not value.strip():
        raise InvalidSchedule("a schedule needs an expression: cron, an interval or once:<time>")
    return _parse_text(value.strip())


@functools.lru_cache(maxsize=4096)
def _parse_text(text: str) -> Expression:
    # Expressions are immutable, and the heartbeat parses the same few over and over.
    if text.lower().startswith("once:"):
        return parse_once(text[5:])
    if _INTERVAL_RE.match(text):
        return parse_interval(text)
    return parse_cron(text)


def parse_cron(text: str) -> Cron:
    expanded = ALIASES.get(text.lower(), text)
    if expanded.startswith("@"):
        raise InvalidSchedule(
            f"Unknown cron alias {text!r}; use one of {', '.join(sorted(ALIASES))}."
        )
    fields = expanded.split()
    if len(fields) not in (5, 6):
        raise InvalidSchedule(
            f"Cron expression {text!r} has {len(fields)} fields; use 5 (minute hour "
            "day-of-month month day-of-week) or 6 (seconds first), e.g. '30 2 * * *'."
        )
    has_seconds = len(fields) == 6
    try:
        croniter(" ".join(fields), second_at_beginning=has_seconds)
    except (CroniterBadCronError, CroniterError, ValueError) as exc:
        raise InvalidSchedule(f"Invalid cron expression {text!r}: {exc}") from None
    hour = fields[2] if has_seconds else fields[1]
    return Cron(text=" ".join(fields), has_seconds=has_seconds, every_hour=hour == "*")


def parse_interval(value: str | datetime.timedelta) -> Interval:
    if isinstance(value, datetime.timedelta):
        seconds = value.total_seconds()
    else:
        # A number (from settings, say) would reach re.match and raise a bare TypeError.
        match = _INTERVAL_RE.match(value) if isinstance(value, str) else None
        if not match:
            raise InvalidSchedule(
                f"Invalid interval {value!r}; use a number and a unit: 30s, 5m, 2h or 1d."
            )
        seconds = float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    if seconds <= 0:
        raise InvalidSchedule(f"An interval must be longer than zero (got {value!r}).")
    if not seconds <= MAX_INTERVAL_SECONDS:
        # "99999999999d" (or "9" * 400 + "s", which is inf) would overflow the datetime
        # arithmetic of every next run: refused here, before anything is saved.
        raise InvalidSchedule(
            f"An interval can be at most {MAX_INTERVAL_SECONDS // 86400:g}d (got {value!r}); "
            "use a cron expression or once:<time> for rarer runs."
        )
    return Interval(seconds=seconds)


def parse_once(text: str) -> Once:
    try:
        at = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidSchedule(
            f"Invalid time {text!r} in once:<time>; use an ISO 8601 time with its offset, "
            "e.g. once:2026-12-24T18:00:00+01:00."
        ) from None
    return once_at(at)


def once_at(at: datetime.datetime) -> Once:
    if not isinstance(at, datetime.datetime) or at.tzinfo is None or at.utcoffset() is None:
        raise InvalidSchedule(
            "A one-off schedule needs an aware datetime (with a timezone or offset), e.g. "
            "timezone.now() + timedelta(hours=1) or datetime(..., tzinfo=ZoneInfo('UTC'))."
        )
    try:
        return Once(at=at.astimezone(UTC))
    except OverflowError:
        # 9999-12-31T23:00:00-05:00 is after the last datetime in UTC.
        raise InvalidSchedule(f"The time {at.isoformat()} is out of range in UTC.") from None


def format_interval(seconds: float) -> str:
    for unit in ("d", "h", "m"):
        size = _UNIT_SECONDS[unit]
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def upcoming(
    expression: Expression,
    zone: ZoneInfo,
    after: datetime.datetime,
    count: int,
    anchor: datetime.datetime | None = None,
) -> list[datetime.datetime]:
    """The next ``count`` occurrences after ``after`` (for previews)."""
    out: list[datetime.datetime] = []
    current = after
    while len(out) < count:
        nxt = expression.next_after(current, zone, anchor if not out else out[-1])
        if nxt is None:
            break
        out.append(nxt)
        current = nxt
    return out


_iterators = threading.local()


def _iterator(text: str, has_seconds: bool) -> croniter:
    """A croniter for ``text``, kept per thread: parsing the expression costs several times
    more than stepping it, and croniter objects are not safe to share between threads."""
    cache = getattr(_iterators, "cache", None)
    if cache is None:
        cache = _iterators.cache = {}
    it = cache.get((text, has_seconds))
    if it is None:
        if len(cache) > 1024:
            cache.clear()
        it = cache[(text, has_seconds)] = croniter(
            text, ret_type=datetime.datetime, second_at_beginning=has_seconds
        )
    return it


def _shift_near(instant: datetime.datetime, zone: ZoneInfo) -> datetime.timedelta:
    """How far the wall clock jumps at a transition within reach of ``instant`` (0 if none)."""
    offsets = [(instant + d).astimezone(zone).utcoffset() for d in (-_MAX_SHIFT, _MAX_SHIFT)]
    offset = instant.astimezone(zone).utcoffset()
    assert offset is not None
    return max((abs(o - offset) for o in offsets if o is not None), default=datetime.timedelta(0))


def _end_of_gap(
    wall: datetime.datetime, zone: ZoneInfo, low: datetime.datetime, high: datetime.datetime
) -> datetime.datetime:
    """The first instant in [low, high] whose wall time is past ``wall``: the transition."""
    # Transitions fall on whole seconds; bisect the (at most few-hour) span to the second.
    lo, hi = int(low.timestamp()), int(high.timestamp())
    while lo < hi:
        mid = (lo + hi) // 2
        local = datetime.datetime.fromtimestamp(mid, zone).replace(tzinfo=None)
        if local > wall:
            hi = mid
        else:
            lo = mid + 1
    return datetime.datetime.fromtimestamp(lo, UTC)
