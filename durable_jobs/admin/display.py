"""Small rendering helpers shared by the admin pages.

Every word they render is translatable: a badge shows its state's label in the active
language, and messages count with ``ngettext`` so that a translation agrees with the
number.
"""

from __future__ import annotations

import datetime
import json
from typing import TYPE_CHECKING, Any

from django.utils import timezone
from django.utils.html import format_html
from django.utils.translation import gettext, ngettext, pgettext_lazy

from durable_jobs.redaction import redact

if TYPE_CHECKING:
    # A str, or a lazy translation that becomes one (django-stubs' name for it).
    from django.utils.functional import _StrOrPromise

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


#: What a badge says for each state or status. In English it is the stored value
#: itself, so that the admin reads like the CLI and the logs.
LABELS = {
    "queued": pgettext_lazy("status", "queued"),
    "leased": pgettext_lazy("status", "leased"),
    "completed": pgettext_lazy("status", "completed"),
    "retrying": pgettext_lazy("status", "retrying"),
    "dead": pgettext_lazy("status", "dead"),
    "cancelled": pgettext_lazy("status", "cancelled"),
    "enqueued": pgettext_lazy("status", "enqueued"),
    "failed": pgettext_lazy("status", "failed"),
    "disabled": pgettext_lazy("status", "disabled"),
    "paused": pgettext_lazy("status", "paused"),
    "running": pgettext_lazy("status", "running"),
    "live": pgettext_lazy("status", "live"),
    "stopping": pgettext_lazy("status", "stopping"),
    "stale": pgettext_lazy("status", "stale"),
}


def label(value: str) -> str:
    """A state's or status's word in the active language; an unknown value as it is."""
    return str(LABELS.get(value, value))


def badge(value: str) -> str:
    colour = COLOURS.get(value, "#6d6d6d")
    return format_html(
        '<span style="background:{};color:#fff;padding:1px 6px;border-radius:8px">{}</span>',
        colour,
        label(value) or "-",
    )


def pretty_json(value: Any, *, secret: bool = True) -> str:
    """JSON on several lines, secret-looking keys masked."""
    shown = redact(value) if secret else value
    return format_html("<pre>{}</pre>", json.dumps(shown, indent=2, sort_keys=True, default=str))


#: The units of ``age``, largest first: each a short form of a count, as in "5m".
AGE_UNITS = (
    (86400, pgettext_lazy("age in days", "%(count)dd")),
    (3600, pgettext_lazy("age in hours", "%(count)dh")),
    (60, pgettext_lazy("age in minutes", "%(count)dm")),
)
SECONDS = pgettext_lazy("age in seconds", "%(count)ds")


def age(moment: datetime.datetime | None) -> str:
    if moment is None:
        return "-"
    seconds = int((timezone.now() - moment).total_seconds())
    for size, unit in AGE_UNITS:
        if abs(seconds) >= size:
            return unit % {"count": seconds // size}
    return SECONDS % {"count": seconds}


def ago(moment: datetime.datetime | None) -> str:
    """``age`` as "5m ago"."""
    # Translators: the age of something, e.g. "5m ago".
    return gettext("%(age)s ago") % {"age": age(moment)}


def report(
    admin: Any,
    request: Any,
    done: _StrOrPromise,
    changed: int,
    skipped: int,
    why: _StrOrPromise,
) -> None:
    """'3 jobs retried; 2 skipped (why).' as an admin message.

    ``done`` is an ``ngettext_lazy`` message whose number is ``count`` (the jobs
    changed), such as "%(count)d job retried", so that its words agree with the number
    in every language.
    """
    message = done % {"count": changed}
    if skipped:
        # Translators: the result of an admin action, e.g. "3 jobs retried; 2 skipped
        # (already finished)."; the part before the semicolon is translated on its own.
        message = ngettext(
            "%(done)s; %(count)d skipped (%(why)s).",
            "%(done)s; %(count)d skipped (%(why)s).",
            skipped,
        ) % {"done": message, "count": skipped, "why": why}
    else:
        # Translators: the result of an admin action as a sentence, e.g. "3 jobs retried."
        message = gettext("%(done)s.") % {"done": message}
    admin.message_user(request, message)


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
