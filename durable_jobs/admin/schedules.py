"""Schedules: state at a glance, pause / resume / run now, and the next runs previewed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext, ngettext, ngettext_lazy
from django.utils.translation import gettext_lazy as _

from durable_jobs.admin.display import badge, pretty_json
from durable_jobs.admin.filters import SafeLookupsMixin
from durable_jobs.exceptions import DurableJobsError
from durable_jobs.models import Schedule
from durable_jobs.schedules.expressions import get_zone

if TYPE_CHECKING:
    from django.utils.functional import _StrOrPromise

SCHEDULE_FIELDS = (
    "id",
    "enabled",
    "expression",
    "timezone",
    "name",
    "queue",
    "priority",
    "payload_json",
    "next_runs",
    "next_run_at",
    "last_run_at",
    "last_status",
    "last_error",
    "last_duration_ms",
    "last_job_id",
    "run_count",
    "fail_count",
    "consecutive_fails",
    "max_consecutive_fails",
    "retry_at",
    "catch_up",
    "catch_up_limit",
    "declared_in_settings",
    "created_at",
    "updated_at",
)

#: What each action did, counted.
PAUSED = ngettext_lazy("%(count)d schedule paused", "%(count)d schedules paused", "count")
RESUMED = ngettext_lazy("%(count)d schedule resumed", "%(count)d schedules resumed", "count")
RUN = ngettext_lazy("%(count)d schedule run", "%(count)d schedules run", "count")


@admin.register(Schedule)
class ScheduleAdmin(SafeLookupsMixin, admin.ModelAdmin):
    list_display = [
        "id",
        "enabled",
        "expression",
        "timezone",
        "name",
        "next_run_at",
        "status",
        "short_error",
        "run_count",
        "fail_count",
    ]
    list_filter = ["enabled", "last_status", "timezone", "declared_in_settings"]
    search_fields = ["id", "name"]
    actions = ["pause", "resume", "run_now"]
    fields = SCHEDULE_FIELDS
    readonly_fields = SCHEDULE_FIELDS

    def has_add_permission(self, request: HttpRequest) -> bool:
        # Schedules are defined in code, settings or `manage.py schedules add`, where they
        # are validated; the admin operates them.
        return False

    @admin.display(description=_("last status"), ordering="last_status")
    def status(self, schedule: Schedule) -> str:
        return badge(schedule.last_status)

    @admin.display(description=_("last error"))
    def short_error(self, schedule: Schedule) -> str:
        text = schedule.last_error.splitlines()[0] if schedule.last_error else ""
        return text[:80] + ("..." if len(text) > 80 else "")

    @admin.display(description=_("payload (secrets masked)"))
    def payload_json(self, schedule: Schedule) -> str:
        return pretty_json(schedule.payload)

    @admin.display(description=_("next 5 runs"))
    def next_runs(self, schedule: Schedule) -> str:
        from durable_jobs import Scheduler

        if not schedule.enabled:
            return gettext("- (not enabled)")
        try:
            runs = Scheduler().preview(schedule.pk, 5)
            zone = get_zone(schedule.timezone)
        except DurableJobsError as exc:
            return gettext("cannot compute: %(error)s") % {"error": exc}
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td></tr>",
            (
                (f"{t:%Y-%m-%d %H:%M:%S} UTC", t.astimezone(zone).strftime("%Y-%m-%d %H:%M:%S %Z"))
                for t in runs
            ),
        )
        return format_html(
            "<table><tr><th>UTC</th><th>{}</th></tr>{}</table>", schedule.timezone, rows
        )

    @admin.action(description=_("Pause (jobs already enqueued still run)"), permissions=["change"])
    def pause(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self._each(request, queryset, "pause", PAUSED)

    @admin.action(description=_("Resume (next run computed from now)"), permissions=["change"])
    def resume(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self._each(request, queryset, "resume", RESUMED)

    @admin.action(description=_("Run now (enqueue one occurrence)"), permissions=["change"])
    def run_now(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self._each(request, queryset, "run", RUN)

    def _each(
        self, request: HttpRequest, queryset: QuerySet[Schedule], method: str, done: _StrOrPromise
    ) -> None:
        from durable_jobs import Scheduler

        scheduler = Scheduler()
        succeeded, failed = 0, []
        for schedule_id in queryset.values_list("pk", flat=True):
            try:
                getattr(scheduler, method)(schedule_id)
                succeeded += 1
            except DurableJobsError as exc:
                failed.append(f"{schedule_id}: {exc}")
        message = done % {"count": succeeded}
        if failed:
            # Translators: e.g. "1 schedule paused; 2 failed (a: reason; b: reason)."
            message = ngettext(
                "%(done)s; %(count)d failed (%(errors)s).",
                "%(done)s; %(count)d failed (%(errors)s).",
                len(failed),
            ) % {"done": message, "count": len(failed), "errors": "; ".join(failed)}
        else:
            # Translators: the result of an admin action as a sentence, e.g. "3 jobs retried."
            message = gettext("%(done)s.") % {"done": message}
        self.message_user(request, message)
