"""System checks of the client boundary: each requestable handler's options."""

from __future__ import annotations

import re
from typing import Any

from django.apps import apps
from django.core.checks import CheckMessage, Error, Warning

from durable_jobs.conf import merged_settings
from durable_jobs.flow.rates import InvalidRate, parse_rate
from durable_jobs.registry import all_handlers


def check() -> list[CheckMessage]:
    """The client boundary's options of each handler (durable_jobs.E014-E016, W004)."""
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
