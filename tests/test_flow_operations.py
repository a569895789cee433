"""Operating flow control: ``manage.py jobs`` (why, queues, pause, resume, batches) and the
Queue, Batch and Job admin pages."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import CommandError
from django.urls import reverse

from durable_jobs import Batch
from durable_jobs.flow import queues
from durable_jobs.models import Job, Node, Queue
from durable_jobs.states import State, claim
from durable_jobs.testing import drain
from tests.conftest import command_output
from tests.testapp import jobs

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    return command_output("jobs", *args)


def test_why_explains_in_text_and_json() -> None:
    held = jobs.per_account.delay(account=1)
    claim(queue="default", limit=5, node_id=None, lease_seconds=30)
    waiting = jobs.per_account.delay(account=1)
    data = json.loads(run("why", str(waiting.pk), "--json"))
    assert data["id"] == waiting.pk
    assert data["state"] == "queued"
    codes = [r["code"] for r in data["reasons"]]
    assert codes == ["concurrency_key_held", "no_live_node"]
    assert data["reasons"][0]["detail"]["held_by"] == [held.pk]
    text = run("why", str(waiting.pk))
    assert f"held by job {held.pk}" in text
    assert "runworker --queues default" in text
    with pytest.raises(CommandError, match="No job with id 999999"):
        run("why", "999999")


def test_pause_and_resume_from_the_command_line() -> None:
    jobs.add.delay(a=1)
    assert "paused" in run("pause", "default")
    assert "already paused" in run("pause", "default")
    assert Queue.objects.get(name="default").paused
    assert drain() == {}
    listing = {q["name"]: q for q in json.loads(run("queues", "--json"))}
    assert listing["default"]["paused"] is True
    assert listing["default"]["waiting"] == 1
    assert "resumed" in run("resume", "default")
    assert drain() == {"completed": 1}
    out = run("pause", "--all")
    assert "default" in out
    assert "emails" in out
    assert all(q.paused for q in Queue.objects.all())
    run("resume", "--all")
    assert not Queue.objects.filter(paused=True).exists()
    with pytest.raises(CommandError, match="one queue, or --all"):
        run("pause")
    with pytest.raises(CommandError, match="one queue, or --all"):
        run("resume", "default", "--all")


def test_queues_table_shows_limits() -> None:
    queues.set_limits("webhooks", rate="30/1m", global_concurrency=5)
    Node.objects.create(name="n1", pid=1, queues={"webhooks": 3})
    listing = {q["name"]: q for q in json.loads(run("queues", "--json"))}
    assert listing["webhooks"]["rate"] == "30/1m"
    assert listing["webhooks"]["global_concurrency"] == 5
    assert listing["webhooks"]["live_nodes"] == 1
    table = run("queues")
    assert "30/1m" in table
    assert "running" in table


def test_batches_and_the_batch_filter() -> None:
    batch = Batch("nightly import", on_complete=jobs.batch_done.prepare(label="n")).enqueue(
        [jobs.batch_item.prepare(n=i, fail=i == 0) for i in range(3)]
    )
    (row,) = json.loads(run("batches", "--json"))
    assert row["status"] == "open"
    assert row["counts"] == {"queued": 3}
    assert row["done"] == 0
    assert len(json.loads(run("list", "--batch", str(batch.pk), "--json"))) == 3
    drain()
    (row,) = json.loads(run("batches", "--json"))
    assert row["status"] == "finished"
    assert row["counts"] == {"completed": 2, "dead": 1}
    assert row["done"] == 3
    assert row["callback_job_id"] is not None
    assert json.loads(run("batches", "--open", "--json")) == []
    assert "nightly import" in run("batches")
    retried = run("retry", "--all", "--batch", str(batch.pk), "--state", "dead", "--yes")
    assert "1 changed" in retried


def test_show_includes_progress_batch_and_flow_fields() -> None:
    job = jobs.per_account.delay(account=4)
    shown = json.loads(run("show", str(job.pk), "--json"))
    assert shown["concurrency_key"] == "account:4"
    assert shown["batch_id"] is None
    assert shown["progress"] is None
    unique = json.loads(run("show", str(jobs.unique_sync.delay(account_id=1).pk), "--json"))
    assert unique["unique_in"] == ["queued", "leased", "retrying"]
    progressed = jobs.logs.delay()
    drain()
    assert json.loads(run("show", str(progressed.pk), "--json"))["progress"] == 100.0


# -- admin ---------------------------------------------------------------------------------


def test_queue_admin_pauses_resumes_and_edits_limits(admin_client) -> None:
    queues.ensure(["default", "emails"])
    url = reverse("admin:durable_jobs_queue_changelist")
    page = admin_client.get(url)
    assert page.status_code == 200
    assert b"running" in page.content
    response = admin_client.post(
        url, {"action": "pause", "_selected_action": ["default"]}, follow=True
    )
    assert b"Paused: default" in response.content
    assert Queue.objects.get(name="default").paused
    admin_client.post(url, {"action": "resume", "_selected_action": ["default"]})
    assert not Queue.objects.get(name="default").paused
    change = reverse("admin:durable_jobs_queue_change", args=["emails"])
    bad = admin_client.post(change, {"rate": "fast", "global_concurrency": ""})
    assert b"30/1m" in bad.content  # the error names the format
    admin_client.post(change, {"rate": "10/1m", "global_concurrency": "2"})
    emails = Queue.objects.get(name="emails")
    assert (emails.rate, emails.global_concurrency) == ("10/1m", 2)


def test_a_view_only_user_cannot_pause(client) -> None:
    queues.ensure(["default"])
    user = User.objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_queue"))
    client.force_login(user)
    url = reverse("admin:durable_jobs_queue_changelist")
    assert client.get(url).status_code == 200
    client.post(url, {"action": "pause", "_selected_action": ["default"]})
    assert not Queue.objects.get(name="default").paused


def test_batch_admin_shows_progress_and_links(admin_client) -> None:
    batch = Batch("admin batch", on_complete=jobs.batch_done.prepare(label="a")).enqueue(
        [jobs.batch_item.prepare(n=i) for i in range(4)]
    )
    page = admin_client.get(reverse("admin:durable_jobs_batch_changelist"))
    assert page.status_code == 200
    assert b"admin batch" in page.content
    assert b"0/4" in page.content
    drain()
    detail = admin_client.get(reverse("admin:durable_jobs_batch_change", args=[batch.pk]))
    assert detail.status_code == 200
    assert b"4/4" in detail.content
    assert b"completed 4" in detail.content
    jobs_page = admin_client.get(
        reverse("admin:durable_jobs_job_changelist"), {"batch__id__exact": batch.pk}
    )
    assert jobs_page.status_code == 200
    assert jobs_page.context["cl"].result_count == 4


def test_job_admin_explains_a_waiting_job_and_shows_progress(admin_client) -> None:
    queues.pause("default")
    waiting = jobs.add.delay(a=1)
    page = admin_client.get(reverse("admin:durable_jobs_job_change", args=[waiting.pk]))
    assert b"Why isn&#x27;t it running?" in page.content or b"Why isn't it running?" in page.content
    assert b"is paused" in page.content
    queues.resume("default")
    done = jobs.logs.delay()
    drain()
    page = admin_client.get(reverse("admin:durable_jobs_job_change", args=[done.pk]))
    assert b"is paused" not in page.content
    assert b"100%" in page.content
    assert Job.objects.get(pk=done.pk).state == State.COMPLETED
