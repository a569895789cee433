"""The Job changelist and change page, with the attempts inline and state-machine actions."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin import helpers
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from django.utils.html import format_html, format_html_join
from django.utils.translation import gettext, ngettext_lazy
from django.utils.translation import gettext_lazy as _

from durable_jobs import actions
from durable_jobs.admin.display import age, badge, label, pretty_json, progress_bar, report
from durable_jobs.admin.filters import (
    CappedPaginator,
    ErrorFilter,
    NameFilter,
    QueueFilter,
    SafeLookupsMixin,
)
from durable_jobs.flow.why import explain
from durable_jobs.lifecycle.states import CLAIMABLE, FINAL, State
from durable_jobs.models import Attempt, Job

ATTEMPT_FIELDS = (
    "number",
    "outcome",
    "node",
    "started_at",
    "duration",
    "error_message",
    "traceback",
    "log",
)


#: Why each action skipped a job.
RUN_SKIPPED = _("not waiting for a later time")
RETRY_SKIPPED = _("not dead, cancelled or retrying")
CANCEL_SKIPPED = _("already finished")
DISCARD_SKIPPED = _("running or finished")
DELETE_SKIPPED = _("running: cancel first")

#: What each action did, counted (``display.report``).
MADE_AVAILABLE = ngettext_lazy(
    "%(count)d job made available now", "%(count)d jobs made available now", "count"
)
RETRIED = ngettext_lazy("%(count)d job retried", "%(count)d jobs retried", "count")
CANCELLED = ngettext_lazy("%(count)d job cancelled", "%(count)d jobs cancelled", "count")
DISCARDED = ngettext_lazy("%(count)d job discarded", "%(count)d jobs discarded", "count")
DELETED = ngettext_lazy("%(count)d job deleted", "%(count)d jobs deleted", "count")

#: The fields of the fieldsets shown only for some jobs (see JobAdmin.get_fieldsets).
WHY_FIELDS: list[Any] = ["why_waiting"]
TASK_FIELDS: list[Any] = ["task_path", "task_alias"]


class AttemptInline(admin.TabularInline):
    model = Attempt
    extra = 0
    can_delete = False
    show_change_link = False
    fields = ATTEMPT_FIELDS
    readonly_fields = ATTEMPT_FIELDS
    ordering = ["id"]

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Job)
class JobAdmin(SafeLookupsMixin, admin.ModelAdmin):
    list_display = [
        "id",
        "name",
        "queue",
        "state_badge",
        "attempts_of",
        "priority",
        "when",
        "age",
        "leased_by",
    ]
    list_filter = ["state", QueueFilter, NameFilter, "created_at", ErrorFilter]
    # Exact matches only (see get_search_results): each is one index probe.
    search_fields = ["=name", "=idempotency_key"]
    search_help_text = _("A job id, a handler's full name, or an idempotency key.")
    list_select_related = ["leased_by"]
    raw_id_fields = ["batch"]
    # Counting a large table on every page is what makes dashboards slow.
    show_full_result_count = False
    paginator = CappedPaginator
    list_per_page = 50
    inlines = [AttemptInline]
    # delete_selected is this class's own (below): it takes the place of Django's
    # site-wide action of that name, which would load every selected job into memory.
    actions = ["run_now", "retry_now", "cancel", "discard", "delete_selected"]
    fieldsets = [
        (None, {"fields": ["id", "name", "queue", "state", "priority", "idempotency_key"]}),
        (_("Django task"), {"fields": TASK_FIELDS}),
        (_("Why isn't it running?"), {"fields": WHY_FIELDS}),
        (
            _("Payload and result"),
            {"fields": ["payload_json", "result_json", "progress_bar", "last_error"]},
        ),
        (
            _("Flow control"),
            {"fields": ["batch", "concurrency_key", "concurrency_limit", "unique_in"]},
        ),
        (
            _("Timing and lease"),
            {
                "fields": [
                    "attempts",
                    "max_retries",
                    "timeout",
                    "created_at",
                    "available_at",
                    "attempted_at",
                    "finished_at",
                    "leased_by",
                    "lease_expires_at",
                    "lease_token",
                    "updated_at",
                ]
            },
        ),
        (_("Meta"), {"fields": ["meta_json"]}),
    ]

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        fieldsets = self.fieldsets or []
        if obj is None or obj.state not in CLAIMABLE:
            # Only a waiting job has reasons to explain.
            fieldsets = [f for f in fieldsets if f[1]["fields"] != WHY_FIELDS]
        if obj is None or obj.task_backend is None:
            # Only a job enqueued through Django's Tasks framework has a Task and an alias.
            fieldsets = [f for f in fieldsets if f[1]["fields"] != TASK_FIELDS]
        if not super().has_change_permission(request):
            # The lease token fences a worker's writes: only those who may act on jobs see it.
            fieldsets = [
                (name, {**options, "fields": [f for f in options["fields"] if f != "lease_token"]})
                for name, options in fieldsets
            ]
        return fieldsets

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        # Jobs are never edited by hand: state changes go through the actions below.
        return [str(f) for _, options in self.fieldsets for f in options["fields"]]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # A job's page is never a form: saving it would write back every column as read,
        # racing the workers. The permission still gates the actions (asked with no obj).
        if obj is not None:
            return False
        return super().has_change_permission(request)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # A running job is not deleted under its worker; cancel it first.
        if obj is not None and obj.state == State.LEASED:
            return False
        # Deleting is at least as strong as cancelling: it needs the change permission
        # too, on a job's own Delete page as for the action.
        return super().has_delete_permission(request, obj) and super().has_change_permission(
            request
        )

    def delete_model(self, request: HttpRequest, obj: Job) -> None:
        # The change page's Delete: the same path as the action (batches are finished).
        actions.delete_jobs(Job.objects.filter(pk=obj.pk))

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Job], search_term: str
    ) -> tuple[QuerySet[Job], bool]:
        # Equality on indexed columns, never LIKE '%term%' over every row.
        term = search_term.strip()
        if not term:
            return queryset, False
        matches = Q(name=term) | Q(idempotency_key=term)
        if term.isascii() and term.isdecimal() and len(term) < 19:
            matches |= Q(pk=int(term))
        return queryset.filter(matches), False

    @admin.display(description=_("state"), ordering="state")
    def state_badge(self, job: Job) -> str:
        return badge(job.state)

    @admin.display(description=_("attempts"))
    def attempts_of(self, job: Job) -> str:
        return f"{job.attempts}/{job.max_retries + 1}"

    @admin.display(description=_("available / finished"))
    def when(self, job: Job) -> Any:
        return job.finished_at if job.state in FINAL else job.available_at

    @admin.display(description=_("age"), ordering="created_at")
    def age(self, job: Job) -> str:
        return age(job.created_at)

    @admin.display(description=_("reasons"))
    def why_waiting(self, job: Job) -> str:
        return format_html(
            "<ul style='margin:0'>{}</ul>",
            format_html_join("", "<li>{}</li>", ((r.message,) for r in explain(job))),
        )

    @admin.display(description=_("progress"))
    def progress_bar(self, job: Job) -> str:
        return progress_bar(job.progress)

    @admin.display(description=_("unique while"))
    def unique_in(self, job: Job) -> str:
        return ", ".join(label(s) for s in job.unique_states.split(",") if s) or "-"

    @admin.display(description=_("payload (secrets masked)"))
    def payload_json(self, job: Job) -> str:
        return pretty_json(job.payload)

    @admin.display(description=_("result"))
    def result_json(self, job: Job) -> str:
        return pretty_json(job.result)

    @admin.display(description=_("meta"))
    def meta_json(self, job: Job) -> str:
        return pretty_json(job.meta)

    @admin.display(description=_("Task"))
    def task_path(self, job: Job) -> str:
        return job.name

    @admin.display(description=_("TASKS alias"))
    def task_alias(self, job: Job) -> str:
        return job.task_backend or ""

    @admin.action(
        description=_("Run now (delayed or retrying jobs, without waiting)"),
        permissions=["change"],
    )
    def run_now(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        report(self, request, MADE_AVAILABLE, *actions.run_jobs(queryset), RUN_SKIPPED)

    @admin.action(
        description=_("Retry now (dead, cancelled or retrying jobs)"), permissions=["change"]
    )
    def retry_now(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        report(self, request, RETRIED, *actions.retry_jobs(queryset), RETRY_SKIPPED)

    @admin.action(description=_("Cancel (waiting or running jobs)"), permissions=["change"])
    def cancel(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        report(self, request, CANCELLED, *actions.cancel_jobs(queryset), CANCEL_SKIPPED)

    @admin.action(description=_("Discard to dead (waiting jobs)"), permissions=["change"])
    def discard(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        report(self, request, DISCARDED, *actions.discard_jobs(queryset), DISCARD_SKIPPED)

    def has_delete_jobs_permission(self, request: HttpRequest) -> bool:
        # Like every action, deleting needs the change permission; it also needs delete.
        return self.has_change_permission(request) and self.has_delete_permission(request)

    @admin.action(description=_("Delete (jobs not running)"), permissions=["delete_jobs"])
    def delete_selected(self, request: HttpRequest, queryset: QuerySet[Job]) -> Any:
        if request.POST.get("post") != "yes":
            count = queryset.order_by()[: CappedPaginator.cap + 1].count()
            # Deleting loses history: ask first, as Django's own delete action does.
            return TemplateResponse(
                request,
                "admin/durable_jobs/job/delete_jobs_confirmation.html",
                {
                    **self.admin_site.each_context(request),
                    "title": gettext("Delete jobs?"),
                    "opts": self.model._meta,
                    "count": min(count, CappedPaginator.cap),
                    "more": count > CappedPaginator.cap,
                    "running": queryset.filter(state=State.LEASED).count(),
                    "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
                    "select_across": request.POST.get("select_across", "0"),
                    "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
                },
            )
        report(self, request, DELETED, *actions.delete_jobs(queryset), DELETE_SKIPPED)
        return None
