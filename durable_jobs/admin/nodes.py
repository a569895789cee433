"""Worker nodes: live or stale by their last heartbeat, and what they run."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from durable_jobs.admin.display import ago, badge
from durable_jobs.admin.filters import SafeLookupsMixin
from durable_jobs.lifecycle.states import State
from durable_jobs.models import Node


@admin.register(Node)
class NodeAdmin(SafeLookupsMixin, admin.ModelAdmin):
    list_display = [
        "name",
        "status",
        "pid",
        "queues",
        "concurrency",
        "running",
        "started_at",
        "last_seen",
    ]
    readonly_fields = [
        "name",
        "pid",
        "queues",
        "concurrency",
        "started_at",
        "last_heartbeat_at",
        "stopping",
    ]
    ordering = ["-started_at"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Node]:
        return (
            super()
            .get_queryset(request)
            .annotate(running_jobs=Count("jobs", filter=Q(jobs__state=State.LEASED)))
        )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.display(description=_("status"))
    def status(self, node: Any) -> str:
        # Live while its heartbeat is more recent than a lease: after that its jobs are rescued.
        if node.last_heartbeat_at < Node.live_after():
            return badge("stale")
        return badge("stopping" if node.stopping else "live")

    @admin.display(description=_("running jobs"), ordering="running_jobs")
    def running(self, node: Any) -> int:
        return int(node.running_jobs)

    @admin.display(description=_("last seen"), ordering="last_heartbeat_at")
    def last_seen(self, node: Node) -> str:
        return ago(node.last_heartbeat_at)
