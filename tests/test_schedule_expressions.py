"""Expressions and the daylight-saving rule, checked against hand-made tables."""

from __future__ import annotations

import datetime
import itertools

import pytest

from durable_jobs.schedules.expressions import (
    InvalidSchedule,
    get_zone,
    parse,
    upcoming,
)

UTC = datetime.UTC


def utc(*args: int) -> datetime.datetime:
    return datetime.datetime(*args, tzinfo=UTC)


def runs(expression: str, zone: str, start: datetime.datetime, count: int) -> list[str]:
    """The next occurrences as 'UTC time | local time' strings."""
    z = get_zone(zone)
    return [
        f"{t:%m-%d %H:%M}Z | {t.astimezone(z):%H:%M %Z}"
        for t in upcoming(parse(expression), z, start, count)
    ]


def test_spring_forward_nonexistent_time_runs_once_at_the_end_of_the_gap() -> None:
    # 2026-03-08: New York skips from 02:00 EST to 03:00 EDT; 02:30 does not exist.
    assert runs("30 2 * * *", "America/New_York", utc(2026, 3, 6, 12), 4) == [
        "03-07 07:30Z | 02:30 EST",
        "03-08 07:00Z | 03:00 EDT",
        "03-09 06:30Z | 02:30 EDT",
        "03-10 06:30Z | 02:30 EDT",
    ]


def test_fall_back_the_daily_0230_is_not_repeated() -> None:
    # 2026-11-01: 02:00 EDT becomes 01:00 EST; 02:30 happens once (EST).
    assert runs("30 2 * * *", "America/New_York", utc(2026, 10, 30, 12), 4) == [
        "10-31 06:30Z | 02:30 EDT",
        "11-01 07:30Z | 02:30 EST",
        "11-02 07:30Z | 02:30 EST",
        "11-03 07:30Z | 02:30 EST",
    ]


def test_fall_back_a_repeated_time_runs_once_at_its_first_occurrence() -> None:
    # 01:30 happens at 05:30Z (EDT) and again at 06:30Z (EST) on 2026-11-01.
    assert runs("30 1 * * *", "America/New_York", utc(2026, 10, 31, 12), 3) == [
        "11-01 05:30Z | 01:30 EDT",
        "11-02 06:30Z | 01:30 EST",
        "11-03 06:30Z | 01:30 EST",
    ]


def test_hourly_across_spring_forward_loses_and_doubles_no_utc_hour() -> None:
    got = upcoming(parse("0 * * * *"), get_zone("America/New_York"), utc(2026, 3, 8, 3), 8)
    assert got == [utc(2026, 3, 8, h) for h in range(4, 12)]


def test_hourly_across_fall_back_loses_and_doubles_no_utc_hour() -> None:
    got = upcoming(parse("0 * * * *"), get_zone("America/New_York"), utc(2026, 11, 1, 2), 8)
    assert got == [utc(2026, 11, 1, h) for h in range(3, 11)]
    # The wall clock reads 01:00 twice: once in daylight time, once in standard time.
    assert runs("0 * * * *", "America/New_York", utc(2026, 11, 1, 4, 30), 3) == [
        "11-01 05:00Z | 01:00 EDT",
        "11-01 06:00Z | 01:00 EST",
        "11-01 07:00Z | 02:00 EST",
    ]


def test_half_hour_dst_lord_howe() -> None:
    # Lord Howe: +10:30 standard, +11:00 summer. 2026-10-04 02:00 -> 02:30 (gap of 30 min).
    assert runs("15 2 * * *", "Australia/Lord_Howe", utc(2026, 10, 2, 12), 3) == [
        "10-02 15:45Z | 02:15 +1030",
        "10-03 15:30Z | 02:30 +11",  # 02:15 does not exist on 10-04: the gap's end
        "10-04 15:15Z | 02:15 +11",
    ]
    # 2026-04-05 02:00 -> 01:30: 01:45 happens twice, runs once (the first, +11).
    assert runs("45 1 * * *", "Australia/Lord_Howe", utc(2026, 4, 4, 0), 3) == [
        "04-04 14:45Z | 01:45 +11",
        "04-05 15:15Z | 01:45 +1030",
        "04-06 15:15Z | 01:45 +1030",
    ]


def test_weekly_example_keeps_local_midnight_across_a_dst_change() -> None:
    # Sundays 00:00 in Toronto: EDT (-4) before 2026-11-01, EST (-5) after.
    assert runs("0 0 * * 0", "America/Toronto", utc(2026, 10, 20), 3) == [
        "10-25 04:00Z | 00:00 EDT",
        "11-01 04:00Z | 00:00 EDT",
        "11-08 05:00Z | 00:00 EST",
    ]


def test_aliases_seconds_and_intervals() -> None:
    assert runs("@daily", "UTC", utc(2026, 1, 1, 12), 2) == [
        "01-02 00:00Z | 00:00 UTC",
        "01-03 00:00Z | 00:00 UTC",
    ]
    sec = upcoming(parse("*/20 * * * * *"), get_zone("UTC"), utc(2026, 1, 1), 3)
    assert sec == [utc(2026, 1, 1, 0, 0, 20), utc(2026, 1, 1, 0, 0, 40), utc(2026, 1, 1, 0, 1)]
    assert str(parse("90m")) == "90m"
    assert str(parse(datetime.timedelta(hours=2))) == "2h"
    anchor = utc(2026, 1, 1, 0, 0, 7)
    assert parse("30s").next_after(utc(2026, 1, 1, 0, 1), get_zone("UTC"), anchor) == utc(
        2026, 1, 1, 0, 1, 7
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("* * * *", "has 4 fields"),
        ("* * * * * * *", "has 7 fields"),
        ("61 * * * *", "Invalid cron expression"),
        ("@fortnightly", "Unknown cron alias"),
        ("0s", "longer than zero"),
        (datetime.timedelta(seconds=-5), "longer than zero"),
        ("once:2026-01-01T10:00:00", "aware datetime"),
        ("once:tomorrow", "ISO 8601"),
        ("", "needs an expression"),
    ],
)
def test_bad_expressions_name_the_problem(value, message) -> None:
    with pytest.raises(InvalidSchedule, match=message):
        parse(value)


def test_unknown_timezone_names_the_fix() -> None:
    with pytest.raises(InvalidSchedule, match=r"Unknown timezone 'Mars/Olympus'.*IANA name"):
        get_zone("Mars/Olympus")


@pytest.mark.parametrize("expression", ["* * * * *", "*/15 * * * *", "*/30 * * * *", "0 * * * *"])
@pytest.mark.parametrize("start", [utc(2026, 3, 8, 4), utc(2026, 11, 1, 3)])
def test_every_hour_expressions_are_evenly_spaced_in_utc_across_dst(expression, start) -> None:
    got = upcoming(parse(expression), get_zone("America/New_York"), start, 60 * 3)
    gaps = {b - a for a, b in itertools.pairwise(got)}
    assert len(gaps) == 1  # nothing doubled, nothing lost, in either transition


def test_the_repeated_hour_keeps_first_pass_minutes() -> None:
    # 2026-11-01 01:00-02:00 New York happens twice: 05:00-06:00Z (EDT), 06:00-07:00Z (EST).
    got = upcoming(parse("*/30 * * * *"), get_zone("America/New_York"), utc(2026, 11, 1, 4, 50), 5)
    assert got == [
        utc(2026, 11, 1, 5),
        utc(2026, 11, 1, 5, 30),
        utc(2026, 11, 1, 6),
        utc(2026, 11, 1, 6, 30),
        utc(2026, 11, 1, 7),
    ]
