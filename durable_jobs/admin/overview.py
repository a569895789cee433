"""The overview page: queues, throughput, failure rate, lag, nodes, error groups and
the handlers' recent history.

Registered on the ``Overview`` proxy model so that the admin index links to it; it
needs only the permission to view jobs. Every figure comes from
:mod:`durable_jobs.overview`, whose reads are bounded however large the tables are.
"""

from __future__ import annotations

import datetime
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.translation import gettext

from durable_jobs import overview
from durable_jobs.admin.display import badge, label
from durable_jobs.lifecycle.states import UNFINISHED, State
from durable_jobs.models import Overview

#: The finished states' columns, the usual outcome first.
FINISHED_COLUMNS = [State.COMPLETED.value, State.DEAD.value, State.CANCELLED.value]


def moment(value: str | None) -> datetime.datetime | None:
    """An ISO time of the overview's data, back to a datetime for the template to format."""
    return datetime.datetime.fromisoformat(value) if value else None


def job_list(**filters: Any) -> str:
    """The job changelist, filtered (the parameters of JobAdmin's list filters)."""
    return f"{reverse('admin:durable_jobs_job_changelist')}?{urlencode(filters)}"


@admin.register(Overview)
class OverviewAdmin(admin.ModelAdmin):
    #: The most index entries each figure reads (see :mod:`durable_jobs.overview`).
    cap = overview.CAP

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        user = request.user
        return user.has_perm("durable_jobs.view_job") or user.has_perm("durable_jobs.change_job")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        view = self.admin_site.admin_view(self.changelist_view)
        return [path("", view, name="{}_{}_changelist".format(*info))]

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        data = overview.overview(cap=self.cap)
        context = {
            **self.admin_site.each_context(request),
            "title": gettext("Jobs overview"),
            "opts": self.opts,
            "data": data,
            # The columns' headings: the states' words in the active language.
            "unfinished": [label(state) for state in UNFINISHED],
            "finished": [label(state) for state in FINISHED_COLUMNS],
            "capped_windows": [
                {"state": label(state), "since": window["since"]}
                for state, window in data["finished_windows"].items()
                if window["capped"]
            ],
            "queues": [self.queue_row(row, data["finished_windows"]) for row in data["queues"]],
            "bars": self.bars(data["throughput"]),
            "failure_percent": (
                "-"
                if data["failure_rate"]["rate"] is None
                else f"{100 * data['failure_rate']['rate']:.1f}%"
            ),
            "errors": [
                {
                    **group,
                    "last_seen": moment(group["last_seen"]),
                    "jobs_url": job_list(error=group["example_attempt"]),
                }
                for group in data["errors"]["groups"]
            ],
            "handlers": [
                {**row, "jobs_url": job_list(name=row["name"])}
                for row in data["history"]["handlers"]
            ],
            "nodes": [
                self.node_row(node, stale=group == "stale")
                for group in ("live", "stale")
                for node in data["nodes"][group]
            ],
            "generated_at": moment(data["generated_at"]),
            "job_changelist": reverse("admin:durable_jobs_job_changelist"),
            **(extra_context or {}),
        }
        return TemplateResponse(request, "admin/durable_jobs/overview/overview.html", context)

    @staticmethod
    def queue_row(row: dict[str, Any], windows: dict[str, Any]) -> dict[str, Any]:
        """A queue's cells: waiting and running counts, its lag, then the recent finished
        counts, each linking to the job list filtered the same way."""

        def cell(state: str, **filters: Any) -> dict[str, Any]:
            return {
                "count": row[state],
                "capped": state in row["capped"],
                "url": job_list(state__exact=state, queue=row["name"], **filters),
            }

        return {
            **row,
            "status": badge("paused" if row["paused"] else "running"),
            "waiting": [cell(state) for state in UNFINISHED],
            "finished": [
                cell(state, finished_at__gte=windows[state]["since"]) for state in FINISHED_COLUMNS
            ],
        }

    @staticmethod
    def node_row(node: dict[str, Any], *, stale: bool) -> dict[str, Any]:
        """A node's cells: its status (a stable value for the row's class, and its word),
        and its times back as datetimes."""
        status = "stale" if stale else ("stopping" if node["stopping"] else "live")
        return {
            **node,
            "status": status,
            "status_label": label(status),
            "started_at": moment(node["started_at"]),
            "last_heartbeat_at": moment(node["last_heartbeat_at"]),
        }

    @staticmethod
    def bars(throughput: dict[str, Any]) -> list[dict[str, Any]]:
        """One bar per minute, as a percentage of the busiest minute's height."""
        peak = throughput["peak"] or 1
        return [
            {
                "minute": (point["minute"] or "")[11:16],
                "count": point["completed"],
                "height": 0
                if point["completed"] is None
                else round(100 * point["completed"] / peak),
            }
            for point in throughput["per_minute"]
        ]
