"""The admin dashboard: pages render from real rows; actions go through the state machine.

Every test drives the admin through Django's test client against the real database
(SQLite or PostgreSQL). The jobs an action is tried on reach their states through the
real flows (enqueue, ``drain``, a worker's claim); only the bulk tests insert many
finished rows directly.
"""

from __future__ import annotations

import datetime
import html
import re
from zoneinfo import ZoneInfo

import pytest
from django.contrib.auth.models import Permission, User
from django.core.exceptions import BadRequest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from durable_jobs import Scheduler, enqueue_many, overview
from durable_jobs.admin.filters import CappedPaginator
from durable_jobs.flow import queues
from durable_jobs.models import Attempt, Job, Node, Queue, Schedule
from durable_jobs.states import State, claim
from durable_jobs.testing import drain
from tests.testapp import jobs

pytestmark = pytest.mark.django_db

OVERVIEW = "/admin/durable_jobs/overview/"
DELETE_CONFIRMATION = "admin/durable_jobs/job/delete_jobs_confirmation.html"


def changelist(model: str) -> str:
    return reverse(f"admin:durable_jobs_{model}_changelist")


def change(model: str, pk: object) -> str:
    return reverse(f"admin:durable_jobs_{model}_change", args=[pk])


def one_job_per_state() -> dict[str, int]:
    """One job in each of the six states, each reached through the real flow; state -> id.

    Runs (``drain``) every job already waiting, too.
    """
    made = [
        jobs.always_fails.delay(),  # fails once, then waits for its backoff: retrying
        jobs.add.delay(a=1),  # completed
        jobs.discarder.delay(),  # raises Discard: dead
        jobs.canceller.delay(),  # raises Cancel: cancelled
    ]
    drain()
    made.append(jobs.add.delay(a=2))  # queued
    made.append(jobs.add.using(queue="emails").delay(a=3))
    node = Node.objects.create(name="node-1", pid=1, queues={"emails": 1}, concurrency=1)
    (leased,) = claim(queue="emails", limit=1, node_id=node.pk, lease_seconds=300)
    assert leased.pk == made[-1].pk
    found = dict(Job.objects.filter(pk__in=[j.pk for j in made]).values_list("state", "pk"))
    assert sorted(found) == sorted(State.values), found
    return found


def states() -> dict[int, str]:
    return dict(Job.objects.values_list("pk", "state"))


def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def act(client: Client, action: str, ids, *, url: str = "", **extra) -> object:
    """POST an action as the changelist form does (the form's ``index`` included)."""
    data = {"action": action, "_selected_action": [str(i) for i in ids], "index": "0", **extra}
    return client.post(url or changelist("job"), data, follow=True)


def listed(client: Client, query: str = "", **params) -> list[int]:
    """The ids the job changelist shows for a query string or parameters."""
    response = client.get(changelist("job") + query, params)
    assert response.status_code == 200, response
    return sorted(job.pk for job in response.context["cl"].result_list)


def row_of(page: str, text: str) -> str:
    """The changelist table row (``<tr>...</tr>``) that contains ``text``."""
    (row,) = [r for r in re.findall(r"<tr[^>]*>.*?</tr>", page, re.S) if text in r]
    return row


# -- the job list: filters, search, paginator --------------------------------------------------


def test_each_filter_narrows_the_list_to_exactly_the_matching_jobs(admin_client) -> None:
    hook = jobs.noop.using(queue="webhooks").delay()
    failing = [jobs.always_fails.delay().pk for _ in range(2)]
    other_error = jobs.flaky.delay(fail_times=1).pk
    by_state = one_job_per_state()  # runs the jobs above, too
    old = jobs.noop.delay()
    Job.objects.filter(pk=old.pk).update(
        created_at=datetime.datetime(2020, 1, 1, 12, tzinfo=datetime.UTC)
    )
    everything = sorted(states())

    assert listed(admin_client) == everything
    assert listed(admin_client, state__exact="dead") == [by_state["dead"]]
    assert listed(admin_client, state__exact="leased") == [by_state["leased"]]
    assert listed(admin_client, queue="webhooks") == [hook.pk]
    assert listed(admin_client, queue="emails") == [by_state["leased"]]
    adds = sorted(Job.objects.filter(name="tests.add").values_list("pk", flat=True))
    assert len(adds) == 3
    assert listed(admin_client, name="tests.add") == adds
    # Filters combine.
    assert listed(admin_client, name="tests.add", state__exact="completed") == [
        by_state["completed"]
    ]
    # Django's date filter on created_at, with the bounds its links use.
    day = {
        "created_at__gte": "2020-01-01 00:00:00+00:00",
        "created_at__lt": "2020-01-02 00:00:00+00:00",
    }
    assert listed(admin_client, **day) == [old.pk]
    response = admin_client.get(changelist("job"))
    (created,) = [s for s in response.context["cl"].filter_specs if s.title == "created at"]
    week = next(c for c in created.choices(response.context["cl"]) if c["display"] == "Past 7 days")
    assert listed(admin_client, week["query_string"]) == [pk for pk in everything if pk != old.pk]

    # The error filter: jobs that failed with the error of an attempt, as the overview's
    # error groups link to it.
    since = timezone.now() - datetime.timedelta(hours=1)
    groups = {g["error_class"]: g for g in overview.error_groups(since)["groups"]}
    value_error = groups["builtins.ValueError"]["example_attempt"]
    runtime_error = groups["builtins.RuntimeError"]["example_attempt"]
    assert listed(admin_client, error=value_error) == sorted([by_state["retrying"], *failing])
    assert listed(admin_client, error=runtime_error) == [other_error]
    page = admin_client.get(changelist("job"), {"error": value_error}).content.decode()
    assert html.escape("builtins.ValueError: KeyError: 'missing'") in page  # the active choice


def test_error_filter_on_an_attempt_that_did_not_fail_or_is_gone_matches_nothing(
    admin_client,
) -> None:
    jobs.add.delay(a=1)
    drain()
    completed_attempt = Attempt.objects.get().pk
    assert listed(admin_client) != []
    assert listed(admin_client, error=completed_attempt) == []
    assert listed(admin_client, error=completed_attempt + 1000) == []  # pruned since
    assert listed(admin_client, error=2**63 - 1) == []  # the largest id there can be
    assert listed(admin_client, error="0007") == []  # leading zeros: still an id


@pytest.mark.parametrize(
    "value",
    [
        "99999999999999999999999",
        "9223372036854775808",  # 2**63: one past the largest id
        "9" * 5000,
        "abc",
        "\N{SUPERSCRIPT TWO}",  # isdigit() but not int()
        "\N{ARABIC-INDIC DIGIT ONE}",  # int() takes it; no id is spelled so
        "-1",
        "1.0",
        " 1",
    ],
)
def test_error_filter_refuses_a_value_that_is_no_attempt_id(admin_client, caplog, value) -> None:
    response = admin_client.get(changelist("job"), {"error": value})
    assert response.status_code == 400
    # Django logs the 400 with the refusal, which says what the parameter takes.
    (logged,) = [r for r in caplog.records if r.name == "django.request"]
    refusal = logged.exc_info[1]
    assert isinstance(refusal, BadRequest)
    assert str(refusal).startswith("?error= takes the id of an attempt")


def test_search_matches_an_id_a_handler_name_or_an_idempotency_key_exactly(admin_client) -> None:
    keyed = jobs.add.using(idempotency_key="order-42").delay(a=1)
    plain = jobs.add.delay(a=2)
    other = jobs.noop.delay()

    def search(term: str) -> list[int]:
        return listed(admin_client, q=term)

    assert search(str(other.pk)) == [other.pk]
    assert search("tests.add") == sorted([keyed.pk, plain.pk])
    assert search("  tests.add ") == sorted([keyed.pk, plain.pk])
    assert search("order-42") == [keyed.pk]
    assert search(noop_name := jobs.noop.name) == [other.pk]
    # Exact by design: no substring matches, which would scan every row.
    assert search("tests.ad") == []
    assert search("add") == []
    assert search("order-4") == []
    assert search(noop_name[:-1]) == []
    assert search("9" * 25) == []  # a huge number is no id, and no error either
    assert search("") == sorted([keyed.pk, plain.pk, other.pk])


def test_paginator_stops_counting_at_the_cap_and_says_so(admin_client, monkeypatch) -> None:
    monkeypatch.setattr(CappedPaginator, "cap", 5)
    first = enqueue_many(jobs.add.prepare(a=i) for i in range(5))[0]

    response = admin_client.get(changelist("job"))
    assert not response.context["cl"].paginator.capped
    assert "5 jobs" in response.content.decode()
    assert "more than" not in response.content.decode()

    enqueue_many(jobs.add.prepare(a=i) for i in range(5, 8))
    response = admin_client.get(changelist("job"))
    paginator = response.context["cl"].paginator
    assert paginator.capped
    assert paginator.count == 6  # counted up to cap + 1 rows, not the 8 there are
    page = response.content.decode()
    assert "more than 5 jobs (filter to narrow them down)" in page
    assert "8 jobs" not in page
    # A filter that brings the list under the cap counts it exactly again.
    response = admin_client.get(changelist("job"), {"q": str(first.pk)})
    assert not response.context["cl"].paginator.capped
    assert "1 job\n" in response.content.decode()


# -- the change page ---------------------------------------------------------------------------


def test_change_page_is_read_only_with_secrets_masked_and_no_add_page(admin_client) -> None:
    synced = jobs.sync_account.delay(account="acme", api_token="s3cr3t-token")
    failing = jobs.always_fails.delay()
    drain()
    (nested,) = Job.objects.bulk_create(
        [
            Job(
                name=jobs.noop.name,
                payload={"password": "hunter2", "nested": {"api_token": "deep-secret"}, "n": 7},
                meta={"secret_key": "meta-secret"},
            )
        ]
    )

    detail = admin_client.get(change("job", synced.pk))
    assert detail.status_code == 200
    assert detail.context["adminform"].form.fields == {}  # every field is read-only
    content = detail.content.decode()
    assert "s3cr3t-token" not in content
    assert "&quot;api_token&quot;: &quot;********&quot;" in content
    assert "&quot;account&quot;: &quot;acme&quot;" in content

    content = admin_client.get(change("job", nested.pk)).content.decode()
    for secret in ("hunter2", "deep-secret", "meta-secret"):
        assert secret not in content
    assert content.count("&quot;********&quot;") == 3
    assert "&quot;n&quot;: 7" in content

    content = admin_client.get(change("job", failing.pk)).content.decode()
    assert "ValueError: cannot process" in content  # the attempts inline, with the error

    # Posting a form changes nothing: there is no field to take values from.
    before = Job.objects.filter(pk=failing.pk).values().get()
    response = admin_client.post(
        change("job", failing.pk),
        {
            "name": "tests.add",
            "state": "completed",
            "priority": "99",
            "max_retries": "0",
            "attempt_set-TOTAL_FORMS": "0",
            "attempt_set-INITIAL_FORMS": "1",
            "_save": "Save",
        },
    )
    assert response.status_code == 403
    after = Job.objects.filter(pk=failing.pk).values().get()
    assert after == before
    assert Attempt.objects.filter(job_id=failing.pk).count() == 1

    # Jobs are enqueued by code, never added by hand.
    assert admin_client.get(reverse("admin:durable_jobs_job_add")).status_code == 403
    assert (
        'href="/admin/durable_jobs/job/add/"'
        not in admin_client.get(changelist("job")).content.decode()
    )


def test_change_page_offers_no_save_and_a_post_writes_nothing(admin_client) -> None:
    job = jobs.add.delay(a=1)
    content = admin_client.get(change("job", job.pk)).content.decode()
    with CaptureQueriesContext(connection) as captured:
        admin_client.post(
            change("job", job.pk),
            {"attempt_set-TOTAL_FORMS": "0", "attempt_set-INITIAL_FORMS": "0", "_save": "Save"},
        )
    writes = [q["sql"] for q in captured if q["sql"].startswith('UPDATE "durable_jobs_job"')]
    assert 'name="_save"' not in content
    assert writes == []


# -- actions -----------------------------------------------------------------------------------

ACTIONS = [
    # action, what the message says, the states it moves from, the state they move to, why
    # the others are skipped.
    (
        "retry_now",
        "retried",
        {"dead", "cancelled", "retrying"},
        "queued",
        "not dead, cancelled or retrying",
    ),
    ("cancel", "cancelled", {"queued", "leased", "retrying"}, "cancelled", "already finished"),
    ("discard", "discarded", {"queued", "retrying"}, "dead", "running or finished"),
]


@pytest.mark.parametrize(("action", "verb", "sources", "target", "why"), ACTIONS)
def test_action_moves_the_allowed_states_and_skips_the_others(
    admin_client, action, verb, sources, target, why
) -> None:
    by_state = one_job_per_state()
    before = states()
    started = timezone.now()

    response = act(admin_client, action, by_state.values())

    skipped = 6 - len(sources)
    assert messages_of(response) == [f"{len(sources)} jobs {verb}; {skipped} skipped ({why})."]
    expected = {pk: target if state in sources else state for pk, state in before.items()}
    assert states() == expected
    moved = Job.objects.filter(pk__in=[by_state[s] for s in sources])
    untouched = Job.objects.exclude(pk__in=[by_state[s] for s in sources])
    assert all(job.updated_at >= started for job in moved)
    assert all(job.updated_at < started for job in untouched)
    if target == "queued":
        assert all(job.available_at <= timezone.now() and job.finished_at is None for job in moved)
    else:
        assert all(job.finished_at >= started for job in moved)
    if action == "cancel":
        cancelled = Job.objects.get(pk=by_state["leased"])
        assert (cancelled.leased_by_id, cancelled.lease_expires_at) == (None, None)
        assert cancelled.last_error == "cancelled by an operator"


def test_one_job_is_reported_in_the_singular(admin_client) -> None:
    job = jobs.add.delay(a=1)
    response = act(admin_client, "cancel", [job.pk])
    assert messages_of(response) == ["1 job cancelled."]
    response = act(admin_client, "cancel", [job.pk])
    assert messages_of(response) == ["0 jobs cancelled; 1 skipped (already finished)."]


def test_delete_asks_first_then_deletes_every_job_but_the_running_one(admin_client) -> None:
    by_state = one_job_per_state()
    assert Attempt.objects.count() == 4  # one per job that ran

    response = act(admin_client, "delete_selected", by_state.values())

    assert response.status_code == 200
    assert DELETE_CONFIRMATION in [t.name for t in response.templates]
    assert Job.objects.count() == 6
    page = response.content.decode()
    assert "Delete 6 jobs and their attempts?" in page
    assert "1 of them is running and will be skipped" in page
    # The confirmation form carries the selection on; submit it as a browser would.
    hidden = re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', page)
    form: dict[str, list[str]] = {}
    for name, value in hidden:
        form.setdefault(name, []).append(value)
    assert sorted(form["_selected_action"]) == sorted(str(pk) for pk in by_state.values())
    assert form["post"] == ["yes"]
    response = admin_client.post(changelist("job"), form, follow=True)

    assert messages_of(response) == ["5 jobs deleted; 1 skipped (running: cancel first)."]
    assert list(Job.objects.values_list("pk", flat=True)) == [by_state["leased"]]
    assert not Attempt.objects.exists()


def test_the_change_page_delete_spares_a_running_job_too(admin_client) -> None:
    by_state = one_job_per_state()
    delete = "admin:durable_jobs_job_delete"
    refused = admin_client.post(reverse(delete, args=[by_state["leased"]]), {"post": "yes"})
    assert refused.status_code == 403
    assert Job.objects.filter(pk=by_state["leased"]).exists()
    # A finished job's Delete works, and takes its attempts along.
    admin_client.post(reverse(delete, args=[by_state["dead"]]), {"post": "yes"})
    assert not Job.objects.filter(pk=by_state["dead"]).exists()
    assert not Attempt.objects.filter(job_id=by_state["dead"]).exists()


def test_select_across_applies_the_action_to_every_matching_job(admin_client) -> None:
    now = timezone.now()
    Job.objects.bulk_create(
        Job(name="tests.add", queue="webhooks", state=State.DEAD, attempts=1, finished_at=now)
        for _ in range(60)
    )
    Job.objects.bulk_create(
        Job(name="tests.add", queue="emails", state=State.DEAD, attempts=1, finished_at=now)
        for _ in range(3)
    )
    url = changelist("job") + "?queue=webhooks"
    page = admin_client.get(url).context["cl"].result_list
    assert len(page) == 50  # one page of the 60

    response = act(admin_client, "retry_now", [j.pk for j in page], url=url, select_across="1")

    assert messages_of(response) == ["60 jobs retried."]
    assert Job.objects.filter(queue="webhooks", state=State.QUEUED).count() == 60
    assert Job.objects.filter(queue="emails", state=State.DEAD).count() == 3

    # Delete across pages goes through the confirmation with the selection intact.
    selected = [j.pk for j in page]
    response = act(admin_client, "delete_selected", selected, url=url, select_across="1")
    assert "Delete 60 jobs and their attempts?" in response.content.decode()
    assert Job.objects.count() == 63
    response = admin_client.post(
        url,
        {
            "action": "delete_selected",
            "_selected_action": [str(j.pk) for j in page],
            "select_across": "1",
            "post": "yes",
        },
        follow=True,
    )
    assert messages_of(response) == ["60 jobs deleted."]
    assert set(Job.objects.values_list("queue", flat=True)) == {"emails"}
    assert Job.objects.count() == 3


def test_actions_need_a_post_with_the_csrf_token() -> None:
    admin = User.objects.create_superuser("root", password="pw")
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin)
    job = jobs.add.delay(a=1)

    # A GET with the action's parameters runs nothing (the admin calls them unknown filters).
    page = client.get(changelist("job"), {"action": "cancel", "_selected_action": job.pk})
    assert page.status_code == 302
    assert page["Location"].endswith("?e=1")
    assert Job.objects.get(pk=job.pk).state == State.QUEUED

    forged = client.post(
        changelist("job"), {"action": "cancel", "_selected_action": [job.pk], "index": "0"}
    )
    assert forged.status_code == 403
    assert Job.objects.get(pk=job.pk).state == State.QUEUED

    assert client.get(changelist("job")).status_code == 200  # sets the CSRF cookie
    token = client.cookies["csrftoken"].value
    response = client.post(
        changelist("job"),
        {"action": "cancel", "_selected_action": [job.pk], "index": "0",
         "csrfmiddlewaretoken": token},
        follow=True,
    )  # fmt: skip
    assert messages_of(response) == ["1 job cancelled."]
    assert Job.objects.get(pk=job.pk).state == State.CANCELLED


# -- permissions -------------------------------------------------------------------------------


def staff(client: Client, *codenames: str) -> User:
    user = User.objects.create_user("staff", password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    client.force_login(user)
    return user


def test_staff_without_view_permission_sees_nothing(client) -> None:
    staff(client)
    Node.objects.create(name="node-1", pid=1)
    queues.ensure(["default"])
    job = jobs.add.delay(a=1)
    pages = [changelist(m) for m in ("job", "node", "schedule", "queue", "batch")]
    for url in [*pages, OVERVIEW, change("job", job.pk)]:
        assert client.get(url).status_code == 403, url
    act(client, "cancel", [job.pk])
    assert Job.objects.get(pk=job.pk).state == State.QUEUED


def test_view_permission_shows_pages_but_no_action_runs(client) -> None:
    staff(client, "view_job")
    by_state = one_job_per_state()
    before = states()

    response = client.get(changelist("job"))
    assert response.status_code == 200
    assert response.context["action_form"] is None
    assert 'name="action"' not in response.content.decode()
    detail = client.get(change("job", by_state["retrying"]))
    assert detail.status_code == 200
    assert 'name="_save"' not in detail.content.decode()
    assert client.get(OVERVIEW).status_code == 200

    for action in ("run_now", "retry_now", "cancel", "discard", "delete_selected"):
        act(client, action, by_state.values())
        act(client, action, by_state.values(), post="yes")
    assert states() == before
    assert client.post(change("job", by_state["queued"]), {"state": "dead"}).status_code == 403
    assert states() == before


def test_run_now_makes_a_delayed_job_available_and_skips_the_others(admin_client) -> None:
    delayed = jobs.add.using(run_in=datetime.timedelta(hours=1)).delay(a=1)
    ready = jobs.add.delay(a=2)
    response = act(admin_client, "run_now", [delayed.pk, ready.pk])
    assert messages_of(response) == [
        "1 job made available now; 1 skipped (not waiting for a later time)."
    ]
    assert Job.objects.get(pk=delayed.pk).available_at <= timezone.now()
    assert Job.objects.get(pk=delayed.pk).state == State.QUEUED


def test_change_permission_runs_state_actions_and_delete_needs_delete(client) -> None:
    user = staff(client, "change_job")
    job = jobs.add.delay(a=1)

    response = client.get(changelist("job"))
    choices = [name for name, _ in response.context["action_form"].fields["action"].choices]
    assert choices == ["", "run_now", "retry_now", "cancel", "discard"]
    assert messages_of(act(client, "discard", [job.pk])) == ["1 job discarded."]
    assert messages_of(act(client, "retry_now", [job.pk])) == ["1 job retried."]
    assert messages_of(act(client, "cancel", [job.pk])) == ["1 job cancelled."]
    assert Job.objects.get(pk=job.pk).state == State.CANCELLED

    act(client, "delete_selected", [job.pk], post="yes")
    assert Job.objects.filter(pk=job.pk).exists()

    user.user_permissions.add(Permission.objects.get(codename="delete_job"))
    response = client.get(changelist("job"))
    choices = [name for name, _ in response.context["action_form"].fields["action"].choices]
    assert choices == ["", "run_now", "retry_now", "cancel", "discard", "delete_selected"]
    response = act(client, "delete_selected", [job.pk], post="yes")
    assert messages_of(response) == ["1 job deleted."]
    assert not Job.objects.filter(pk=job.pk).exists()


def test_delete_without_change_permission_is_refused(client) -> None:
    staff(client, "view_job", "delete_job")
    job = jobs.add.delay(a=1)

    assert client.get(changelist("job")).context["action_form"] is None
    act(client, "delete_selected", [job.pk], post="yes")
    assert Job.objects.filter(pk=job.pk).exists()


# -- nodes, queues, schedules ------------------------------------------------------------------


def test_node_admin_shows_live_stale_stopping_and_running_jobs(admin_client) -> None:
    fresh = Node.objects.create(name="fresh-node", pid=1, queues={"default": 2}, concurrency=2)
    Node.objects.create(name="leaving-node", pid=2, stopping=True)
    Node.objects.create(
        name="old-node", pid=3, last_heartbeat_at=timezone.now() - datetime.timedelta(hours=1)
    )
    enqueue_many(jobs.add.prepare(a=i) for i in range(3))
    assert len(claim(queue="default", limit=2, node_id=fresh.pk, lease_seconds=300)) == 2

    response = admin_client.get(changelist("node"))
    assert response.status_code == 200
    page = response.content.decode()
    fresh_row = row_of(page, ">fresh-node<")
    assert ">live<" in fresh_row
    assert '<td class="field-running">2</td>' in fresh_row
    leaving_row = row_of(page, ">leaving-node<")
    assert ">stopping<" in leaving_row
    assert '<td class="field-running">0</td>' in leaving_row
    old_row = row_of(page, ">old-node<")
    assert ">stale<" in old_row
    assert ">live<" not in old_row
    assert "1h ago" in old_row
    assert admin_client.get(reverse("admin:durable_jobs_node_add")).status_code == 403


def test_queue_admin_pauses_and_resumes(admin_client) -> None:
    queues.ensure(["default", "emails", "webhooks"])
    queues.pause("webhooks")
    names = ["default", "webhooks"]

    page = admin_client.get(changelist("queue")).content.decode()
    assert ">paused<" in row_of(page, ">webhooks<")
    assert ">running<" in row_of(page, ">default<")

    response = admin_client.post(
        changelist("queue"), {"action": "pause", "_selected_action": names}, follow=True
    )
    assert messages_of(response) == ["Paused: default."]
    assert set(Queue.objects.filter(paused=True).values_list("name", flat=True)) == set(names)
    assert Queue.objects.get(name="default").paused_at is not None
    response = admin_client.post(
        changelist("queue"), {"action": "pause", "_selected_action": names}, follow=True
    )
    assert messages_of(response) == ["Paused: none (already paused)."]

    response = admin_client.post(
        changelist("queue"), {"action": "resume", "_selected_action": names}, follow=True
    )
    assert messages_of(response) == ["Resumed: default, webhooks."]
    assert not Queue.objects.filter(paused=True).exists()
    response = admin_client.post(
        changelist("queue"), {"action": "resume", "_selected_action": ["emails"]}, follow=True
    )
    assert messages_of(response) == ["Resumed: none (none was paused)."]


def test_schedule_admin_previews_five_runs_and_acts(admin_client) -> None:
    Scheduler().schedule(
        "weekly", name="tests.scheduled_report", expression="0 0 * * 0",
        timezone="America/Toronto", payload={"countries": ["CA"]},
    )  # fmt: skip
    assert admin_client.get(changelist("schedule")).status_code == 200
    detail = admin_client.get(change("schedule", "weekly")).content.decode()
    assert "<th>UTC</th><th>America/Toronto</th>" in detail
    runs = re.findall(r"<tr><td>([^<]+) UTC</td><td>([^<]+) (E[SD]T)</td></tr>", detail)
    assert len(runs) == 5
    toronto = ZoneInfo("America/Toronto")
    previous = None
    for utc_text, local_text, abbreviation in runs:
        utc = datetime.datetime.fromisoformat(utc_text).replace(tzinfo=datetime.UTC)
        local = utc.astimezone(toronto)
        # Midnight on a Sunday in Toronto, and the same moment as the UTC column.
        assert local.strftime("%Y-%m-%d %H:%M:%S") == local_text
        assert (local.weekday(), local.hour, local.minute) == (6, 0, 0)
        assert local.tzname() == abbreviation
        assert utc > timezone.now()
        if previous is not None:
            assert datetime.timedelta(days=7) - (utc - previous) in (
                datetime.timedelta(0), datetime.timedelta(hours=1), -datetime.timedelta(hours=1)
            )  # fmt: skip
        previous = utc

    def post(action: str):
        return admin_client.post(
            changelist("schedule"), {"action": action, "_selected_action": ["weekly"]}, follow=True
        )

    assert messages_of(post("pause")) == ["1 schedule paused."]
    assert not Schedule.objects.get().enabled
    assert "- (not enabled)" in admin_client.get(change("schedule", "weekly")).content.decode()
    assert messages_of(post("run_now")) == ["1 schedule run."]
    job = Job.objects.get()
    assert job.meta["schedule"]["id"] == "weekly"
    assert (job.name, job.payload) == ("tests.scheduled_report", {"countries": ["CA"]})
    assert messages_of(post("resume")) == ["1 schedule resumed."]
    schedule = Schedule.objects.get()
    assert schedule.enabled
    assert schedule.next_run_at > timezone.now()
    assert admin_client.get(reverse("admin:durable_jobs_schedule_add")).status_code == 403


def test_deleting_needs_the_change_permission_too(client) -> None:
    """Deleting a Queue row un-pauses its queue and drops its limits; deleting a job is at
    least as strong as cancelling it: the delete permission alone allows neither."""
    user = staff(client, "view_job", "delete_job", "view_queue", "delete_queue")
    queues.pause("webhooks")
    job = jobs.add.delay(a=1)
    queue_delete = reverse("admin:durable_jobs_queue_delete", args=["webhooks"])
    job_delete = reverse("admin:durable_jobs_job_delete", args=[job.pk])
    assert client.get(queue_delete).status_code == 403
    assert client.post(queue_delete, {"post": "yes"}).status_code == 403
    assert client.get(job_delete).status_code == 403
    assert client.post(job_delete, {"post": "yes"}).status_code == 403
    assert Queue.objects.get(name="webhooks").paused
    assert Job.objects.filter(pk=job.pk).exists()

    user.user_permissions.add(
        *Permission.objects.filter(codename__in=["change_job", "change_queue"])
    )
    user = User.objects.get(pk=user.pk)  # drop the cached permissions
    client.force_login(user)
    assert client.get(queue_delete).status_code == 200
    assert client.post(job_delete, {"post": "yes"}).status_code == 302
    assert not Job.objects.filter(pk=job.pk).exists()


def test_the_lease_token_is_shown_only_with_the_change_permission(client) -> None:
    user = staff(client, "view_job")
    job = jobs.add.using(queue="emails").delay(a=1)
    node = Node.objects.create(name="node-1", pid=1, queues={"emails": 1}, concurrency=1)
    (leased,) = claim(queue="emails", limit=1, node_id=node.pk, lease_seconds=300)
    token = str(leased.lease_token)
    page = client.get(change("job", job.pk)).content.decode()
    assert "Lease token" not in page
    assert token not in page
    user.user_permissions.add(Permission.objects.get(codename="change_job"))
    client.force_login(User.objects.get(pk=user.pk))
    page = client.get(change("job", job.pk)).content.decode()
    assert "Lease token" in page
    assert token in page
