"""System checks: misconfiguration fails ``manage.py check``, not a worker at 3 a.m.

IDs are stable; each is documented with its fix in ``docs/checks.rst``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig, apps
from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning, register
from django.db import connections

from durable_jobs.conf import DEFAULTS, SETTINGS_NAME, merged_settings
from durable_jobs.payload import text_problem

HINT_DOCS = "See the settings reference in the durable_jobs documentation."
#: Upper bounds of numeric settings: larger values overflow datetime arithmetic.
MAX_SECONDS = 365 * 86400.0
MAX_PRUNE_DAYS = 36500
#: Job.max_retries is a PositiveIntegerField (PostgreSQL ``integer``).
MAX_RETRIES = 2**31 - 1


@register()
def check_settings(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    raw = getattr(settings, SETTINGS_NAME, {})
    if not isinstance(raw, dict):
        return [
            Error(
                f"{SETTINGS_NAME} must be a dict, not {type(raw).__name__}.",
                hint=HINT_DOCS,
                id="durable_jobs.E001",
            )
        ]
    unknown = sorted(set(raw) - set(DEFAULTS))
    if unknown:
        errors.append(
            Error(
                f"{SETTINGS_NAME} has unknown keys: {', '.join(unknown)}.",
                hint=f"Valid keys: {', '.join(sorted(DEFAULTS))}.",
                id="durable_jobs.E002",
            )
        )
    merged = merged_settings()
    errors += _check_queues(merged["QUEUES"])
    errors += _check_timing(merged)
    redact = merged["REDACT_KEYS"]
    if not isinstance(redact, list | tuple) or not all(isinstance(k, str) and k for k in redact):
        errors.append(
            Error(
                "REDACT_KEYS must be a list of non-empty strings.",
                hint='For example "REDACT_KEYS": ["password", "token"].',
                id="durable_jobs.E005",
            )
        )
    channel = merged["NOTIFY_CHANNEL"]
    if (
        not isinstance(channel, str)
        or not channel
        or len(channel.encode("utf-8", "replace")) > 63
        or text_problem(channel)
    ):
        # PostgreSQL refuses longer channel names in pg_notify(), which every enqueue calls.
        errors.append(
            Error(
                f"NOTIFY_CHANNEL must be a non-empty string of at most 63 bytes (got {channel!r}).",
                hint='The PostgreSQL LISTEN/NOTIFY channel, for example "durable_jobs".',
                id="durable_jobs.E009",
            )
        )
    errors += _check_listener(merged)
    if not settings.USE_TZ:
        errors.append(
            Error(
                "durable_jobs needs USE_TZ = True: job times are aware datetimes in UTC.",
                hint="Set USE_TZ = True in your settings.",
                id="durable_jobs.E006",
            )
        )
    return errors


def _check_listener(merged: dict[str, Any]) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    listen = merged["LISTEN_DATABASE"]
    if listen is not None and (not isinstance(listen, str) or listen not in connections.settings):
        errors.append(
            Error(
                f"LISTEN_DATABASE must be None or an alias in DATABASES (got {listen!r}).",
                hint="The alias whose settings the workers' LISTEN connection uses, for "
                "example one that reaches PostgreSQL directly rather than through PgBouncer.",
                id="durable_jobs.E017",
            )
        )
    elif listen is not None and connections[listen].vendor != "postgresql":
        errors.append(
            Error(
                f"LISTEN_DATABASE {listen!r} is not a PostgreSQL database; only PostgreSQL "
                "has LISTEN/NOTIFY.",
                hint="Point it at a PostgreSQL alias (the same server as the jobs), or leave it "
                "None.",
                id="durable_jobs.E017",
            )
        )
    prepared = merged["PREPARED_STATEMENTS"]
    if not isinstance(prepared, bool):
        errors.append(
            Error(
                f"PREPARED_STATEMENTS must be True or False (got {prepared!r}).",
                hint="False only behind a pooler that cannot keep prepared statements "
                "(PgBouncer in transaction mode before 1.21).",
                id="durable_jobs.E018",
            )
        )
    return errors


def _check_queues(queues: Any) -> list[CheckMessage]:
    if not isinstance(queues, dict) or not queues:
        return [
            Error(
                "QUEUES must be a non-empty dict of queue name -> options.",
                hint='For example "QUEUES": {"default": {"concurrency": 10}}.',
                id="durable_jobs.E003",
            )
        ]
    errors: list[CheckMessage] = []
    for name, options in queues.items():
        if (
            not isinstance(name, str)
            or not name
            or len(name) > 100
            or ":" in name
            or "," in name
            # NUL or a lone surrogate: PostgreSQL cannot store the queue's name.
            or text_problem(name)
        ):
            errors.append(
                Error(
                    f"Queue name {name!r} is invalid.",
                    hint="Queue names are 1-100 characters without ':' or ','.",
                    id="durable_jobs.E003",
                )
            )
            continue
        if options is None:
            options = {}
        concurrency = options.get("concurrency", 10) if isinstance(options, dict) else None
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            errors.append(
                Error(
                    f"Queue {name!r}: concurrency must be an integer >= 1 (got {concurrency!r}).",
                    hint=f'For example "QUEUES": {{"{name}": {{"concurrency": 10}}}}.',
                    id="durable_jobs.E003",
                )
            )
            continue
        errors += _check_queue_limits(name, options)
    return errors


def _check_queue_limits(name: str, options: dict[str, Any]) -> list[CheckMessage]:
    from durable_jobs.flow.queues import valid_global_concurrency
    from durable_jobs.flow.rates import InvalidRate, parse_rate

    errors: list[CheckMessage] = []
    unknown = sorted(set(options) - {"concurrency", "global_concurrency", "rate"})
    if unknown:
        errors.append(
            Error(
                f"Queue {name!r}: unknown option(s) {', '.join(map(repr, unknown))}.",
                hint="Queue options are concurrency (per node), global_concurrency and rate.",
                id="durable_jobs.E012",
            )
        )
    limit = options.get("global_concurrency")
    if not valid_global_concurrency(limit):
        errors.append(
            Error(
                f"Queue {name!r}: global_concurrency must be an integer >= 1 or None "
                f"(got {limit!r}).",
                hint="It caps the leased jobs of the queue across every node.",
                id="durable_jobs.E012",
            )
        )
    rate = options.get("rate")
    if rate is not None:
        try:
            parse_rate(rate)
        except InvalidRate as exc:
            errors.append(
                Error(
                    f"Queue {name!r}: {exc}.",
                    hint='For example "rate": "30/1m" (at most 30 starts per sliding minute).',
                    id="durable_jobs.E013",
                )
            )
    return errors


def _check_timing(merged: dict[str, Any]) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    # Setting -> whether 0 is allowed.
    numbers = {
        "LEASE_SECONDS": False,
        "HEARTBEAT_SECONDS": False,
        "SHUTDOWN_GRACE_SECONDS": True,
        "POLL_INTERVAL": False,
        "BACKOFF_BASE_SECONDS": True,
        "BACKOFF_MAX_SECONDS": True,
        "SCHEDULER_INTERVAL": False,
        "SCHEDULE_MISFIRE_GRACE_SECONDS": True,
    }
    for key, zero_ok in numbers.items():
        value = merged[key]
        bad_type = isinstance(value, bool) or not isinstance(value, int | float)
        if bad_type or value < 0 or (value == 0 and not zero_ok):
            errors.append(
                Error(
                    f"{key} must be a number {'>= 0' if zero_ok else '> 0'} (got {value!r}).",
                    hint=HINT_DOCS,
                    id="durable_jobs.E004",
                )
            )
        elif not value <= MAX_SECONDS:
            # NaN passes every comparison above, and inf or a huge number overflows the
            # datetime arithmetic the workers do with it: a crash in every worker's loop.
            errors.append(
                Error(
                    f"{key} must be a finite number of seconds, at most {MAX_SECONDS:g} "
                    f"(a year) (got {value!r}).",
                    hint=HINT_DOCS,
                    id="durable_jobs.E004",
                )
            )
    prune = merged["PRUNE_AFTER_DAYS"]
    if prune is not None and (
        isinstance(prune, bool)
        or not isinstance(prune, int | float)
        # "not <=" also refuses NaN; inf would crash every worker's pruner.
        or not 0 < prune <= MAX_PRUNE_DAYS
    ):
        errors.append(
            Error(
                f"PRUNE_AFTER_DAYS must be a positive number of at most {MAX_PRUNE_DAYS} "
                f"or None (got {prune!r}).",
                hint="None keeps finished jobs forever.",
                id="durable_jobs.E004",
            )
        )
    retries = merged["DEFAULT_MAX_RETRIES"]
    if (
        isinstance(retries, bool)
        or not isinstance(retries, int)
        # The column's limit: a larger default would make every enqueue fail.
        or not 0 <= retries <= MAX_RETRIES
    ):
        errors.append(
            Error(
                f"DEFAULT_MAX_RETRIES must be an integer from 0 to {MAX_RETRIES} "
                f"(got {retries!r}).",
                hint=HINT_DOCS,
                id="durable_jobs.E004",
            )
        )
    if errors:
        return errors
    if merged["SCHEDULER_INTERVAL"] >= merged["SCHEDULE_MISFIRE_GRACE_SECONDS"] > 0:
        errors.append(
            Warning(
                f"SCHEDULER_INTERVAL ({merged['SCHEDULER_INTERVAL']}) is not shorter than "
                f"SCHEDULE_MISFIRE_GRACE_SECONDS ({merged['SCHEDULE_MISFIRE_GRACE_SECONDS']}): "
                "occurrences may count as missed, and catch_up='skip' schedules drop them.",
                hint="Keep the grace several heartbeats long (defaults: 1 s and 60 s).",
                id="durable_jobs.W003",
            )
        )
    lease, beat = merged["LEASE_SECONDS"], merged["HEARTBEAT_SECONDS"]
    if lease <= 0 or beat <= 0 or beat * 2 > lease:
        errors.append(
            Error(
                f"HEARTBEAT_SECONDS ({beat}) must be positive and at most half of "
                f"LEASE_SECONDS ({lease}), or running jobs lose their leases between heartbeats.",
                hint="For example LEASE_SECONDS 60 with HEARTBEAT_SECONDS 10.",
                id="durable_jobs.E004",
            )
        )
    return errors


@register(deploy=False)
def check_databases(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    from durable_jobs import db

    return db.check()


@register()
def check_handler_queues(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """A handler whose queue no default worker serves would wait forever."""
    from durable_jobs.registry import all_handlers

    merged = merged_settings()
    queues = merged["QUEUES"]
    if not isinstance(queues, dict) or not queues:
        return []  # E003 already reports it
    used = {f"Job handler {h.name!r}": h.queue for h in all_handlers().values()}
    declared = merged["SCHEDULES"]
    if isinstance(declared, dict):
        used.update(
            {
                f"Schedule {key!r}": entry["queue"]
                for key, entry in declared.items()
                if isinstance(entry, dict) and isinstance(entry.get("queue"), str)
            }
        )
    return [
        Warning(
            f"{who} uses queue {queue!r}, which is not in {SETTINGS_NAME}['QUEUES']; a "
            "worker started without --queues will not run its jobs.",
            hint=f"Add {queue!r} to {SETTINGS_NAME}['QUEUES'], or start a worker with "
            f"--queues {queue}.",
            id="durable_jobs.W002",
        )
        for who, queue in used.items()
        if queue not in queues
    ]


@register()
def check_declared_schedules(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """Each DURABLE_JOBS["SCHEDULES"] entry must parse, name a known zone and a known handler."""
    from durable_jobs.exceptions import UnknownJob
    from durable_jobs.schedules.definitions import spec_from_settings
    from durable_jobs.schedules.expressions import InvalidSchedule

    declared = merged_settings()["SCHEDULES"]
    if not isinstance(declared, dict):
        return [
            Error(
                "SCHEDULES must be a dict of schedule id -> definition.",
                hint='For example {"nightly": {"cron": "0 3 * * *", "job": "app.task"}}.',
                id="durable_jobs.E010",
            )
        ]
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


@register()
def check_requestable_handlers(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """The client boundary's options of each handler (see ``durable_jobs.urls``)."""
    from durable_jobs.registry import all_handlers

    messages: list[CheckMessage] = []
    for handler in all_handlers().values():
        who = f"Job handler {handler.name!r}"
        if handler.requestable is not True:
            if handler.requestable is not False:
                messages.append(
                    Error(
                        f"{who}: requestable must be True or False (got {handler.requestable!r}).",
                        hint="@job(requestable=True) lets HTTP clients request it.",
                        id="durable_jobs.E016",
                    )
                )
            given = [
                option
                for option, value in (
                    ("permission", handler.permission),
                    ("throttle", handler.throttle),
                    ("expose_result", handler.expose_result or None),
                )
                if value is not None
            ]
            if given:
                messages.append(
                    Error(
                        f"{who} sets {', '.join(given)}, which apply only to requestable "
                        "handlers, but is not requestable.",
                        hint="Add requestable=True, or remove those options.",
                        id="durable_jobs.E016",
                    )
                )
            continue
        messages += _check_permission(who, handler.permission)
        messages += _check_throttle(who, handler.throttle)
        if not isinstance(handler.expose_result, bool):
            messages.append(
                Error(
                    f"{who}: expose_result must be True or False (got {handler.expose_result!r}).",
                    hint="expose_result=True shows a completed job's result to its requesters.",
                    id="durable_jobs.E016",
                )
            )
    return messages


def _check_permission(who: str, permission: Any) -> list[CheckMessage]:
    if permission is None:
        return []
    hint = 'A Django permission as "app_label.codename", as in permission="reports.export_report".'
    if not isinstance(permission, str) or not re.fullmatch(r"[^.\s]+\.[^\s]+", permission):
        return [
            Error(
                f"{who}: permission must be a string 'app_label.codename' (got {permission!r}).",
                hint=hint,
                id="durable_jobs.E015",
            )
        ]
    label = permission.split(".", 1)[0]
    if not any(config.label == label for config in apps.get_app_configs()):
        return [
            Error(
                f"{who}: permission {permission!r} names app label {label!r}, which is not "
                "an installed app; nobody could ever have it.",
                hint=hint + " The app label is the app's, not its module path.",
                id="durable_jobs.E015",
            )
        ]
    return []


def _check_throttle(who: str, throttle: Any) -> list[CheckMessage]:
    from durable_jobs.flow.rates import InvalidRate, parse_rate

    if throttle is None:
        return []
    try:
        if not isinstance(throttle, str):
            raise InvalidRate(f"Invalid throttle {throttle!r}: it must be a string")
        _, period = parse_rate(throttle)
    except InvalidRate as exc:
        return [
            Error(
                f"{who}: {exc}.",
                hint='For example throttle="10/1m": at most 10 requests per user in any minute.',
                id="durable_jobs.E014",
            )
        ]
    prune = merged_settings()["PRUNE_AFTER_DAYS"]
    if (
        isinstance(prune, int | float)
        and not isinstance(prune, bool)
        and prune > 0
        and period > prune * 86400
    ):
        return [
            Warning(
                f"{who}: the throttle's period ({throttle}) is longer than PRUNE_AFTER_DAYS "
                f"({prune}); requests whose jobs were pruned stop counting.",
                hint="Shorten the period, or keep finished jobs longer.",
                id="durable_jobs.W004",
            )
        ]
    return []
