"""Small rendering helpers shared by the admin pages."""

from __future__ import annotations

import datetime
import json
from typing import Any

from django.utils import timezone
from django.utils.html import format_html

from durable_jobs.redaction import redact

#: Badge colours per job state (and schedule status).
COLOURS = {
    "queued": "#417690",
    "leased": "#b58900",
    "completed": "#2e7d32",
    "retrying": "#ef6c00",
    "dead": "#c62828",
    "cancelled": "#6d6d6d",
    "enqueued": "#417690",
    "failed": "#ef6c00",
    "disabled": "#c62828",
    "paused": "#6d6d6d",
}


def badge(text: str) -> str:
    colour = COLOURS.get(text, "#6d6d6d")
    return format_html(
        '<span style="background:{};color:#fff;padding:1px 6px;border-radius:8px">{}</span>',
        colour,
        text or "-",
    )


def pretty_json(value: Any, *, secret: bool = True) -> str:
    """JSON on several lines, secret-looking keys masked."""
    shown = redact(value) if secret else value
    return format_html("<pre>{}</pre>", json.dumps(shown, indent=2, sort_keys=True, default=str))


def age(moment: datetime.datetime | None) -> str:
    if moment is None:
        return "-"
    seconds = int((timezone.now() - moment).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if abs(seconds) >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def report(admin: Any, request: Any, verb: str, changed: int, skipped: int, why: str) -> None:
    """'3 jobs retried; 2 skipped (why).' as an admin message."""
    message = f"{changed} {'job' if changed == 1 else 'jobs'} {verb}"
    if skipped:
        message += f"; {skipped} skipped ({why})"
    admin.message_user(request, message + ".")


def progress_bar(percent: float | None) -> str:
    if percent is None:
        return "-"
    percent = max(0.0, min(100.0, float(percent)))
    return format_html(
        '<span style="display:inline-block;width:120px;background:#ddd;border-radius:4px">'
        '<span style="display:block;width:{}%;background:#417690;height:10px;'
        'border-radius:4px"></span></span> {}%',
        f"{percent:.0f}",
        f"{percent:.0f}",
    )
