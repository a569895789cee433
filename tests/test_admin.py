"""The admin dashboard: pages render from real rows; actions go through the state machine."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.urls import reverse

from durable_jobs import Scheduler
from durable_jobs.models import Job, Node, Schedule
from durable_jobs.states import State
from durable_jobs.testing import drain
from tests.testapp import jobs

pytestmark = pytest.mark.django_db


def changelist(model: str) -> str:
    return reverse(f"admin:durable_jobs_{model}_changelist")


def test_job_pages_render_with_masked_secrets_and_attempts(admin_client) -> None:
    job = jobs.sync_account.delay(account="acme", api_token="s3cr3t")
    jobs.always_fails.delay()
    drain()
    page = admin_client.get(changelist("job"))
    assert page.status_code == 200
    assert b"tests.sync_account" in page.content
    assert b"1/11" in page.content  # attempts / allowed
    detail = admin_client.get(reverse("admin:durable_jobs_job_change", args=[job.pk]))
    assert detail.status_code == 200
    assert b"s3cr3t" not in detail.content
    assert b"********" in detail.content
    failing = Job.objects.get(name="tests.always_fails")
    detail = admin_client.get(reverse("admin:durable_jobs_job_change", args=[failing.pk]))
    assert b"ValueError: cannot process" in detail.content  # the attempt inline, with its error
    assert admin_client.get(changelist("job"), {"q": str(job.pk)}).context["cl"].result_count == 1


def test_actions_report_changed_and_skipped(admin_client) -> None:
    done = jobs.add.delay(a=1)
    drain()
    waiting = jobs.add.delay(a=2)
    response = admin_client.post(
        changelist("job"),
        {"action": "cancel", "_selected_action": [done.pk, waiting.pk]},
        follow=True,
    )
    assert "1 job cancelled; 1 skipped (already finished)." in [
        str(m) for m in response.context["messages"]
    ]
    assert Job.objects.get(pk=waiting.pk).state == State.CANCELLED
    admin_client.post(changelist("job"), {"action": "retry_now", "_selected_action": [waiting.pk]})
    assert Job.objects.get(pk=waiting.pk).state == State.QUEUED


def test_viewing_needs_view_permission_and_actions_need_change(client) -> None:
    job = jobs.add.delay(a=1)
    user = User.objects.create_user("viewer", password="pw", is_staff=True)
    client.force_login(user)
    assert client.get(changelist("job")).status_code == 403
    user.user_permissions.add(Permission.objects.get(codename="view_job"))
    assert client.get(changelist("job")).status_code == 200
    client.post(changelist("job"), {"action": "cancel", "_selected_action": [job.pk]})
    assert Job.objects.get(pk=job.pk).state == State.QUEUED  # no change permission: nothing


def test_schedule_admin_previews_and_acts(admin_client) -> None:
    Scheduler().schedule(
        "weekly", name="tests.scheduled_report", expression="0 0 * * 0",
        timezone="America/Toronto", payload={"countries": ["CA"]},
    )  # fmt: skip
    assert admin_client.get(changelist("schedule")).status_code == 200
    detail = admin_client.get(reverse("admin:durable_jobs_schedule_change", args=["weekly"]))
    assert b"America/Toronto" in detail.content
    assert detail.content.count(b" UTC</td>") == 5  # the next 5 runs
    admin_client.post(changelist("schedule"), {"action": "pause", "_selected_action": ["weekly"]})
    assert not Schedule.objects.get().enabled
    admin_client.post(changelist("schedule"), {"action": "run_now", "_selected_action": ["weekly"]})
    assert Job.objects.get().meta["schedule"]["id"] == "weekly"


def test_node_admin_shows_live_and_stale(admin_client) -> None:
    from datetime import timedelta

    from django.utils import timezone

    Node.objects.create(name="fresh-node", pid=1)
    Node.objects.create(
        name="old-node", pid=2, last_heartbeat_at=timezone.now() - timedelta(hours=1)
    )
    page = admin_client.get(changelist("node"))
    assert page.status_code == 200
    content = page.content.decode()
    assert "live" in content
    assert "stale" in content
