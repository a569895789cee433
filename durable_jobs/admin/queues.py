"""Queues: pause and resume (on every node at once), and their cluster-wide limits."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from durable_jobs import validate
from durable_jobs.admin.display import badge
from durable_jobs.admin.filters import SafeLookupsMixin
from durable_jobs.flow import queues
from durable_jobs.flow.rates import InvalidRate, parse_rate
from durable_jobs.models import Queue


class QueueForm(forms.ModelForm):
    rate = forms.CharField(
        label=_("Rate"),
        required=False,
        help_text=_("At most N starts per sliding window across every node, as in 30/1m."),
    )

    class Meta:
        model = Queue
        fields = ["global_concurrency"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance and self.instance.pk:
            self.fields["rate"].initial = self.instance.rate

    def clean_global_concurrency(self) -> int | None:
        value = self.cleaned_data.get("global_concurrency")
        if not validate.is_global_concurrency(value):
            raise forms.ValidationError(_("At least 1; leave it empty for no limit."))
        return value

    def clean_rate(self) -> tuple[int, float] | None:
        text = (self.cleaned_data.get("rate") or "").strip()
        if not text:
            return None
        try:
            return parse_rate(text)
        except InvalidRate as exc:
            raise forms.ValidationError(str(exc)) from None

    def save(self, commit: bool = True) -> Queue:
        queue = super().save(commit=False)
        rate = self.cleaned_data.get("rate")
        queue.rate_limit, queue.rate_period = rate if rate else (None, None)
        if commit:
            queue.save()
        return queue


@admin.register(Queue)
class QueueAdmin(SafeLookupsMixin, admin.ModelAdmin):
    form = QueueForm
    list_display = ["name", "status", "rate_shown", "global_concurrency", "paused_at"]
    list_filter = ["paused"]
    search_fields = ["name"]
    actions = ["pause", "resume"]
    readonly_fields = ["name", "paused", "paused_at", "created_at", "updated_at"]
    fields = [
        "name",
        "paused",
        "paused_at",
        "rate",
        "global_concurrency",
        "created_at",
        "updated_at",
    ]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # rows appear when a worker serves a queue or one is paused

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Deleting a row un-pauses its queue and drops its limits: a change, so it needs
        # the change permission as well.
        return super().has_delete_permission(request, obj) and self.has_change_permission(
            request, obj
        )

    @admin.display(description=_("status"), ordering="paused")
    def status(self, queue: Queue) -> str:
        return badge("paused" if queue.paused else "running")

    @admin.display(description=_("rate"))
    def rate_shown(self, queue: Queue) -> str:
        return queue.rate or "-"

    @admin.action(description=_("Pause (no new starts on any node)"), permissions=["change"])
    def pause(self, request: HttpRequest, queryset: QuerySet[Queue]) -> None:
        changed = [q.name for q in queryset if queues.pause(q.name, using=queryset.db)]
        if changed:
            message = gettext("Paused: %(queues)s.") % {"queues": ", ".join(changed)}
        else:
            message = gettext("Paused: none (already paused).")
        self.message_user(request, message)

    @admin.action(description=_("Resume"), permissions=["change"])
    def resume(self, request: HttpRequest, queryset: QuerySet[Queue]) -> None:
        changed = [q.name for q in queryset if queues.resume(q.name, using=queryset.db)]
        if changed:
            message = gettext("Resumed: %(queues)s.") % {"queues": ", ".join(changed)}
        else:
            message = gettext("Resumed: none (none was paused).")
        self.message_user(request, message)
