"""Validating what a schedule should be, from the API, the CLI or settings, before any write."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.core.checks import CheckMessage, Error

from durable_jobs import limits, resolve, validate
from durable_jobs.conf import merged_settings
from durable_jobs.exceptions import EnqueueError, UnknownJob
from durable_jobs.handlers import JobHandler
from durable_jobs.models import CatchUp
from durable_jobs.payload import check_json
from durable_jobs.schedules.expressions import (
    UTC,
    Cron,
    Expression,
    InvalidSchedule,
    Once,
    get_zone,
    once_at,
    parse,
    parse_interval,
)


@dataclass
class ScheduleSpec:
    id: str
    expression: Expression
    timezone: str
    name: str
    queue: str
    payload: dict[str, Any]
    priority: int
    enabled: bool = True
    max_consecutive_fails: int = 5
    catch_up: str = CatchUp.LATEST
    catch_up_limit: int = 10
    metadata: dict[str, Any] = field(default_factory=dict)

    def first_run_at(self, now: datetime.datetime) -> datetime.datetime | None:
        """When a new (or resumed, or redefined) schedule first runs."""
        if isinstance(self.expression, Once):
            return self.expression.at  # a one-off time in the past is simply overdue
        return self.expression.next_after(now, get_zone(self.timezone), anchor=now)


def build_spec(
    id: str,
    *,
    name: str | JobHandler,
    expression: str | datetime.timedelta | None = None,
    interval: str | datetime.timedelta | None = None,
    run_at: datetime.datetime | None = None,
    timezone: str = "UTC",
    queue: str | None = None,
    payload: Mapping[str, Any] | None = None,
    priority: int | None = None,
    enabled: bool = True,
    max_consecutive_fails: int = 5,
    catch_up: str = CatchUp.LATEST,
    catch_up_limit: int = 10,
    metadata: Mapping[str, Any] | None = None,
) -> ScheduleSpec:
    """A validated schedule definition; raises a clear error naming the first problem."""
    id_length = limits.length("Schedule", "id")
    if not isinstance(id, str) or not id.strip() or len(id) > id_length:
        raise InvalidSchedule(
            f"A schedule id must be a non-empty string of at most {id_length} characters"
        )
    problem = validate.text_problem(id)
    if problem:
        # PostgreSQL would refuse the row (and abort the caller's transaction).
        raise InvalidSchedule(f"A schedule id cannot be {problem}")
    for label, mapping in (("payload", payload), ("metadata", metadata)):
        if mapping is not None and not isinstance(mapping, Mapping):
            # dict("text") or dict(5) would raise a bare ValueError or TypeError.
            raise InvalidSchedule(
                f"Schedule {id!r}: {label} must be a dict, as in {{'order_id': 1}} "
                f"(got {type(mapping).__name__})."
            )
    given = [x for x in (expression, interval, run_at) if x is not None]
    if len(given) != 1:
        raise InvalidSchedule(
            f"Schedule {id!r}: give exactly one of expression (cron), interval or run_at "
            f"(got {len(given)})."
        )
    if expression is not None:
        parsed = parse(expression)
    elif interval is not None:
        parsed = parse_interval(interval)
    else:
        assert run_at is not None
        parsed = once_at(run_at)
    zone = get_zone(timezone)
    if isinstance(parsed, Cron) and parsed.next_after(datetime.datetime.now(UTC), zone) is None:
        # "0 0 30 2 *" (February 30th): saved, it would sit enabled and never run.
        raise InvalidSchedule(
            f"Cron expression {str(parsed)!r} never occurs (check the day of the month "
            "against the month); nothing was saved."
        )
    handler = name if isinstance(name, JobHandler) else resolve.handler_named(name)
    try:
        # Stored as given, the handler's keyword arguments: each occurrence checks them
        # again (a Task's handler stores them as {"args": [], "kwargs": ...}).
        checked_payload = dict(payload or {})
        handler.check_arguments((), checked_payload)
        # Metadata is stored as JSON too: a datetime would fail the save with a bare
        # TypeError, NUL text would abort PostgreSQL's transaction.
        checked_metadata = check_json(f"{handler.name} metadata", dict(metadata or {}))
    except EnqueueError as exc:  # a Task's TypeError too (TaskArgumentError)
        raise InvalidSchedule(f"Schedule {id!r}: {exc}") from None
    with validate.refused_as(InvalidSchedule, f"Schedule {id!r}"):
        queue_name = validate.queue_name(
            handler.queue if queue is None else queue, "the queue name"
        )
        prio = validate.priority(handler.priority if priority is None else priority)
    expression_length = limits.length("Schedule", "expression")
    if len(str(parsed)) > expression_length:
        # The column's length: PostgreSQL would refuse the row, SQLite keep it whole.
        raise InvalidSchedule(
            f"Schedule {id!r}: the expression is longer than {expression_length} "
            "characters; shorten it with ranges (1-5) and steps (*/15)."
        )
    if catch_up not in CatchUp.values:
        raise InvalidSchedule(
            f"Schedule {id!r}: catch_up must be one of {', '.join(CatchUp.values)} "
            f"(got {catch_up!r})."
        )
    for label, value in (
        ("max_consecutive_fails", max_consecutive_fails),
        ("catch_up_limit", catch_up_limit),
    ):
        # The upper bound is the column's (PositiveIntegerField): past it the save fails.
        with validate.refused_as(InvalidSchedule, f"Schedule {id!r}"):
            validate.count(value, label)
    return ScheduleSpec(
        id=id,
        expression=parsed,
        timezone=timezone,
        name=handler.name,
        queue=queue_name,
        payload=checked_payload,
        priority=prio,
        enabled=bool(enabled),
        max_consecutive_fails=max_consecutive_fails,
        catch_up=catch_up,
        catch_up_limit=catch_up_limit,
        metadata=checked_metadata,
    )


#: Keys of a DURABLE_JOBS["SCHEDULES"] entry -> build_spec arguments.
SETTINGS_KEYS = {
    "cron": "expression",
    "expression": "expression",
    "interval": "interval",
    "run_at": "run_at",
    "timezone": "timezone",
    "job": "name",
    "queue": "queue",
    "payload": "payload",
    "priority": "priority",
    "enabled": "enabled",
    "max_consecutive_fails": "max_consecutive_fails",
    "catch_up": "catch_up",
    "catch_up_limit": "catch_up_limit",
    "metadata": "metadata",
}


def spec_from_settings(id: str, entry: Any) -> ScheduleSpec:
    """A spec from one ``DURABLE_JOBS["SCHEDULES"]`` entry."""
    if not isinstance(entry, Mapping):
        raise InvalidSchedule(
            f"SCHEDULES[{id!r}] must be a dict, e.g. {{'cron': '0 3 * * *', 'job': 'app.task'}}"
        )
    unknown = sorted(set(entry) - set(SETTINGS_KEYS))
    if unknown:
        raise InvalidSchedule(
            f"SCHEDULES[{id!r}] has unknown keys {', '.join(unknown)}; valid keys: "
            f"{', '.join(sorted(SETTINGS_KEYS))}."
        )
    if "job" not in entry:
        raise InvalidSchedule(f"SCHEDULES[{id!r}] needs 'job': the handler's registered name.")
    if "cron" in entry and "expression" in entry:
        raise InvalidSchedule(f"SCHEDULES[{id!r}] gives both 'cron' and 'expression'; keep one.")
    kwargs = {SETTINGS_KEYS[k]: v for k, v in entry.items()}
    run_at = kwargs.get("run_at")
    if isinstance(run_at, str):
        try:
            kwargs["run_at"] = datetime.datetime.fromisoformat(run_at)
        except ValueError:
            raise InvalidSchedule(
                f"SCHEDULES[{id!r}]['run_at'] is not an ISO 8601 time: {run_at!r}"
            ) from None
    return build_spec(id, **kwargs)


def check() -> list[CheckMessage]:
    """Each ``DURABLE_JOBS["SCHEDULES"]`` entry must parse, name a known zone and a known
    handler (durable_jobs.E010, E011). SCHEDULES itself is the settings' check."""
    declared = merged_settings()["SCHEDULES"]
    if not isinstance(declared, dict):
        return []
    messages: list[CheckMessage] = []
    for key, entry in declared.items():
        try:
            spec_from_settings(key, entry)
        except UnknownJob as exc:
            messages.append(Error(str(exc), obj=f"SCHEDULES[{key!r}]", id="durable_jobs.E011"))
        except InvalidSchedule as exc:
            messages.append(
                Error(
                    str(exc),
                    obj=f"SCHEDULES[{key!r}]",
                    hint="See the schedules guide for expressions, timezones and options.",
                    id="durable_jobs.E010",
                )
            )
    return messages
