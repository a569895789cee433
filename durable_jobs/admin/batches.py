"""Batches: progress and counts per state, and the callback job once it exists."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from durable_jobs.admin.display import badge, label, pretty_json, progress_bar
from durable_jobs.admin.filters import SafeLookupsMixin
from durable_jobs.models import Batch
from durable_jobs.serializers import batch_to_dict

BATCH_FIELDS = (
    "id",
    "name",
    "status",
    "progress",
    "counts_shown",
    "total",
    "jobs_link",
    "callback_name",
    "callback_payload_json",
    "callback_link",
    "created_at",
    "finished_at",
)


@admin.register(Batch)
class BatchAdmin(SafeLookupsMixin, admin.ModelAdmin):
    list_display = ["id", "name", "status", "progress", "counts_shown", "created_at"]
    search_fields = ["name"]
    show_full_result_count = False
    fields = BATCH_FIELDS
    readonly_fields = BATCH_FIELDS

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a batch only changes as its jobs do

    def _summary(self, batch: Batch) -> dict[str, Any]:
        # Computed once per row and request: each open batch costs one grouped count.
        cache = getattr(batch, "_summary_cache", None)
        if cache is None:
            cache = batch_to_dict(batch)
            batch._summary_cache = cache  # type: ignore[attr-defined]
        return cache

    @admin.display(description=_("status"))
    def status(self, batch: Batch) -> str:
        return badge(self._summary(batch)["status"])

    @admin.display(description=_("progress"))
    def progress(self, batch: Batch) -> str:
        summary = self._summary(batch)
        percent = 100.0 * summary["done"] / summary["total"] if summary["total"] else 100.0
        return format_html("{} {}/{}", progress_bar(percent), summary["done"], summary["total"])

    @admin.display(description=_("jobs per state"))
    def counts_shown(self, batch: Batch) -> str:
        counts = self._summary(batch)["counts"].items()
        return ", ".join(f"{label(state)} {count}" for state, count in counts) or "-"

    @admin.display(description=_("jobs"))
    def jobs_link(self, batch: Batch) -> str:
        url = reverse("admin:durable_jobs_job_changelist") + f"?batch__id__exact={batch.pk}"
        return format_html('<a href="{}">{}</a>', url, gettext("the batch's jobs"))

    @admin.display(description=_("callback job"))
    def callback_link(self, batch: Batch) -> str:
        if not batch.callback_job_id:
            return "-"
        url = reverse("admin:durable_jobs_job_change", args=[batch.callback_job_id])
        text = gettext("job %(id)s") % {"id": batch.callback_job_id}
        return format_html('<a href="{}">{}</a>', url, text)

    @admin.display(description=_("callback payload (secrets masked)"))
    def callback_payload_json(self, batch: Batch) -> str:
        return pretty_json(batch.callback_payload)
