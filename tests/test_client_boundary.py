"""The client boundary: HTTP clients request jobs and read their status, and nothing else.

Every test goes through Django's test client, the project's URLconf (``tests.urls``
includes ``durable_jobs.urls`` at ``jobs/``) and the real database. The last part
walks every URL and every admin action of the project with jobs in every state, and
shows that no path leads a client (or an operator) to lease or complete a job; the
same walk over a URLconf with such a path planted in it finds it.
"""

from __future__ import annotations

import ast
import contextlib
import datetime
import importlib
import inspect
import itertools
import json
import re
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any
from unittest import mock

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission, User
from django.contrib.contenttypes.models import ContentType
from django.contrib.messages.storage.fallback import FallbackStorage
from django.contrib.sessions.backends.db import SessionStore
from django.core import checks
from django.db import connection
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.test import Client, RequestFactory, override_settings
from django.urls import URLPattern, URLResolver, get_resolver, path, reverse
from django.utils import timezone
from django.utils.regex_helper import normalize

import tests.urls
from durable_jobs import Scheduler, actions
from durable_jobs.db import engine_for
from durable_jobs.flow import queues
from durable_jobs.maintenance.pruner import prune
from durable_jobs.models import Attempt, Job, JobRequest, Node, Schedule
from durable_jobs.redaction import MASK
from durable_jobs.registry import _handlers
from durable_jobs.states import State, claim, transition
from durable_jobs.testing import drain
from tests.testapp import jobs, requestable_jobs
from tests.testapp.models import SideEffect

pytestmark = pytest.mark.django_db

EXPORT = "tests.http.export"
KEY = "Idempotency-Key"


@pytest.fixture
def alice() -> User:
    return User.objects.create_user("alice", password="pw")


@pytest.fixture
def bob() -> User:
    return User.objects.create_user("bob", password="pw")


def logged_in(user: User, **options: Any) -> Client:
    client = Client(**options)
    client.force_login(user)
    return client


def request_url(name: str) -> str:
    return reverse("durable_jobs:request", kwargs={"name": name})


def status_url(job_id: int) -> str:
    return reverse("durable_jobs:status", kwargs={"job_id": job_id})


def post(
    client: Client,
    name: str,
    body: Any = None,
    *,
    key: str | None = "key-1",
    raw: bytes | str | None = None,
    content_type: str = "application/json",
    **headers: str,
) -> HttpResponse:
    """POST ``body`` (as JSON) or ``raw`` to the request endpoint of handler ``name``."""
    data = raw if raw is not None else ("" if body is None else json.dumps(body))
    if key is not None:
        headers[KEY] = key
    return client.post(request_url(name), data, content_type=content_type, headers=headers)


def refusal(response: HttpResponse, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, (response.status_code, response.content)
    assert response["Content-Type"] == "application/json"
    data = response.json()
    assert data["error"] == code, data
    assert isinstance(data["message"], str)
    assert data["message"]
    return data


# -- requesting a job ------------------------------------------------------------------------


def test_a_request_is_accepted_with_the_jobs_status_and_goes_through_enqueue(alice) -> None:
    response = post(logged_in(alice), EXPORT, {"report": "sales", "rows": 3})

    assert response.status_code == 202
    data = response.json()
    job = Job.objects.get()
    assert data["id"] == job.pk
    assert data["status_url"] == response["Location"] == f"/jobs/{job.pk}/"
    assert data["name"] == EXPORT
    assert data["state"] == "queued"
    assert data["attempts"] == 0
    assert data["progress"] is None
    assert data["created_at"] == job.created_at.isoformat()
    assert "payload" not in data
    assert "result" not in data
    assert "no-store" in response["Cache-Control"]
    assert "Idempotent-Replayed" not in response
    # An ordinary job: the handler's queue and retries, the arguments as its payload,
    # and an idempotency key that is the client's, hashed with the user and handler.
    assert (job.name, job.queue, job.state) == (EXPORT, "default", State.QUEUED)
    assert job.payload == {"report": "sales", "rows": 3}
    assert re.fullmatch(r"http:[0-9a-f]{64}", job.idempotency_key or "")
    assert "key-1" not in job.idempotency_key
    assert job.meta == {"requested_by": {"user": str(alice.pk)}}
    (row,) = JobRequest.objects.all()
    assert (row.job_id, row.user, row.name, row.key) == (job.pk, str(alice.pk), EXPORT, "key-1")

    # It runs like any other job.
    drain()
    assert Job.objects.get().state == State.COMPLETED


def test_repeating_a_key_returns_the_same_job_and_a_new_key_a_new_one(alice) -> None:
    client = logged_in(alice)
    first = post(client, EXPORT, {"report": "sales"}, key="a")
    again = post(client, EXPORT, {"report": "sales"}, key="a")
    quoted = post(client, EXPORT, {"report": "sales"}, key='"a"')  # the draft's quoted form

    assert first.status_code == again.status_code == quoted.status_code == 202
    assert first.json()["id"] == again.json()["id"] == quoted.json()["id"]
    assert again["Idempotent-Replayed"] == "true"
    assert Job.objects.count() == 1
    assert JobRequest.objects.count() == 1

    other = post(client, EXPORT, {"report": "sales"}, key="b")
    assert other.status_code == 202
    assert other.json()["id"] != first.json()["id"]
    assert Job.objects.count() == 2

    # The same job even once it has finished.
    drain()
    late = post(client, EXPORT, {"report": "sales"}, key="a")
    assert late.json()["id"] == first.json()["id"]
    assert late.json()["state"] == "completed"


def test_a_key_reused_with_other_arguments_is_refused(alice) -> None:
    client = logged_in(alice)
    assert post(client, EXPORT, {"report": "sales"}, key="a").status_code == 202

    data = refusal(post(client, EXPORT, {"report": "costs"}, key="a"), 422, "key_reused")
    assert list(data["errors"]) == [KEY]
    assert Job.objects.count() == 1


def test_keys_belong_to_one_user_and_one_handler(alice, bob) -> None:
    mine = post(logged_in(alice), EXPORT, {"report": "sales"}, key="same")
    theirs = post(logged_in(bob), EXPORT, {"report": "sales"}, key="same")
    other_handler = post(logged_in(alice), "tests.http.quiet", {}, key="same")

    ids = {r.json()["id"] for r in (mine, theirs, other_handler)}
    assert len(ids) == 3
    assert Job.objects.count() == 3
    assert len(set(Job.objects.values_list("idempotency_key", flat=True))) == 3


def test_the_idempotency_key_is_required_and_checked(alice) -> None:
    client = logged_in(alice)

    missing = refusal(post(client, EXPORT, {"report": "x"}, key=None), 400, "invalid")
    assert list(missing["errors"]) == [KEY]
    assert "required" in missing["errors"][KEY][0]
    for bad in ["", "   ", "x" * 256, "caf\u00e9", "tab\tinside"]:
        response = client.post(
            request_url(EXPORT), "{}", content_type="application/json", headers={KEY: bad}
        )
        assert list(refusal(response, 400, "invalid")["errors"]) == [KEY], bad
    # A bad body and a missing key are reported together.
    both = refusal(post(client, EXPORT, raw="{", key=None), 400, "invalid")
    assert sorted(both["errors"]) == [KEY, "__all__"]
    assert Job.objects.count() == 0
    assert post(client, EXPORT, {"report": "x"}, key="k" * 255).status_code == 202


# -- who may ask -----------------------------------------------------------------------------


def test_unauthenticated_clients_get_401_even_without_a_csrf_token() -> None:
    for client in (Client(), Client(enforce_csrf_checks=True)):
        refusal(post(client, EXPORT, {"report": "x"}), 401, "not_authenticated")
        refusal(post(client, "no.such.job", {}), 401, "not_authenticated")
        refusal(client.get(status_url(1)), 401, "not_authenticated")
    assert Job.objects.count() == 0


@override_settings(
    AUTHENTICATION_BACKENDS=["django.contrib.auth.backends.AllowAllUsersModelBackend"]
)
def test_an_inactive_user_is_refused_403(alice) -> None:
    alice.is_active = False
    alice.save()
    client = logged_in(alice)
    refusal(post(client, EXPORT, {"report": "x"}), 403, "inactive_user")
    refusal(client.get(status_url(1)), 403, "inactive_user")
    assert Job.objects.count() == 0


def test_unknown_and_unrequestable_handlers_are_the_same_404(alice) -> None:
    client = logged_in(alice)
    unknown = refusal(post(client, "no.such.job", {}), 404, "not_found")
    # tests.add exists, but is not requestable: nothing tells it apart from a missing one.
    hidden = refusal(post(client, "tests.add", {"a": 1}), 404, "not_found")
    assert unknown == hidden
    assert Job.objects.count() == 0


def test_wrong_methods_are_405_with_allow(alice) -> None:
    client = logged_in(alice)
    job_id = post(client, EXPORT, {"report": "x"}).json()["id"]

    for method in ("get", "put", "patch", "delete"):
        response = getattr(client, method)(request_url(EXPORT))
        assert refusal(response, 405, "method_not_allowed")
        assert response["Allow"] == "POST"
    for method in ("post", "put", "patch", "delete"):
        response = getattr(client, method)(status_url(job_id))
        refusal(response, 405, "method_not_allowed")
        assert response["Allow"] == "GET, HEAD"
    assert client.head(status_url(job_id)).status_code == 200
    assert Job.objects.count() == 1


def test_a_handler_permission_is_required(alice) -> None:
    client = logged_in(alice)
    refusal(post(client, "tests.http.guarded", {"order": 1}), 403, "permission_denied")
    assert Job.objects.count() == 0

    alice.user_permissions.add(Permission.objects.get(codename="add_order"))
    assert post(client, "tests.http.guarded", {"order": 1}).status_code == 202


def test_session_clients_need_the_csrf_token(alice) -> None:
    client = logged_in(alice, enforce_csrf_checks=True)

    forged = refusal(post(client, EXPORT, {"report": "x"}), 403, "csrf_failed")
    assert "CSRF" in forged["message"]
    assert Job.objects.count() == 0

    client.get("/admin/login/")  # any page with a form sets the CSRF cookie
    token = client.cookies["csrftoken"].value
    response = post(client, EXPORT, {"report": "x"}, **{"X-CSRFToken": token})
    assert response.status_code == 202
    # Reading a status is safe: no token needed.
    assert client.get(response["Location"]).status_code == 200


class BearerTokenMiddleware:
    """What a project's token authentication for mobile clients looks like (docs/howto/http).

    Its credentials are not sent by the browser on its own, so it tells Django's CSRF
    check to stand aside, as the check itself documents.
    """

    TOKENS: dict[str, int] = {}

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        scheme, _, token = request.headers.get("Authorization", "").partition(" ")
        if scheme == "Bearer" and token in self.TOKENS:
            request.user = User.objects.get(pk=self.TOKENS[token])
            request._dont_enforce_csrf_checks = True  # type: ignore[attr-defined]
        return self.get_response(request)


def test_token_clients_authenticated_by_middleware_need_no_csrf_token(alice) -> None:
    from django.conf import settings

    client = Client(enforce_csrf_checks=True)  # no session: a mobile client
    with (
        override_settings(MIDDLEWARE=[*settings.MIDDLEWARE, f"{__name__}.BearerTokenMiddleware"]),
        mock.patch.dict(BearerTokenMiddleware.TOKENS, {"t0ken": alice.pk}),
    ):
        refusal(post(client, EXPORT, {"report": "x"}), 401, "not_authenticated")
        wrong = post(client, EXPORT, {"report": "x"}, Authorization="Bearer nope")
        refusal(wrong, 401, "not_authenticated")
        response = post(client, EXPORT, {"report": "x"}, Authorization="Bearer t0ken")
        assert response.status_code == 202
        status = client.get(response["Location"], headers={"Authorization": "Bearer t0ken"})
        assert status.json()["id"] == response.json()["id"]


# -- what may be asked -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "errors"),
    [
        ({}, {"report": ["This argument is required."]}),
        ({"report": "x", "colour": "red"}, {"colour": ["Unexpected argument."]}),
        ({"report": 7}, {"report": ["Expected a string, got a number."]}),
        ({"report": "x", "rows": "ten"}, {"rows": ["Expected an integer, got a string."]}),
        ({"report": "x", "rows": True}, {"rows": ["Expected an integer, got a boolean."]}),
        ({"report": "x", "rows": 1.5}, {"rows": ["Expected an integer, got a number."]}),
        (
            {"report": "x", "columns": ["a", 2]},
            {"columns": ["[1]: expected a string, got a number."]},
        ),
        ({"report": "x", "columns": "a"}, {"columns": ["Expected a list or null, got a string."]}),
        ({"report": "x", "fmt": "pdf"}, {"fmt": ['Expected one of "csv", "xlsx", got a string.']}),
        (
            {"report": "x", "options": {"a": "1"}},
            {"options": ["['a']: expected an integer, got a string."]},
        ),
        (
            {"report": "a\u0000b"},
            {"report": ["Contains a NUL character, which cannot be stored."]},
        ),
        (
            {"report": "x", "options": {"a\u0000": 1}},
            {"options": ["Contains a NUL character, which cannot be stored."]},
        ),
        (
            {"rows": "many", "extra": 1},
            {
                "report": ["This argument is required."],
                "extra": ["Unexpected argument."],
                "rows": ["Expected an integer, got a string."],
            },
        ),
    ],
)
def test_arguments_that_do_not_fit_are_400_with_field_errors(alice, body, errors) -> None:
    data = refusal(post(logged_in(alice), EXPORT, body), 400, "invalid")
    assert data["errors"] == errors
    assert Job.objects.count() == 0
    assert JobRequest.objects.count() == 0


def test_arguments_that_fit_are_accepted(alice) -> None:
    client = logged_in(alice)
    body = {
        "report": "x",
        "rows": 2,
        "columns": None,
        "fmt": "xlsx",
        "ratio": 2,  # an integer is a number
        "options": {"a": 1},
    }
    assert post(client, EXPORT, body).status_code == 202
    assert Job.objects.get().payload == body
    # A handler taking **kwargs takes anything JSON; one with a context does not take it.
    assert post(client, "tests.http.anything", {"x": [1, {"y": None}]}).status_code == 202
    data = refusal(post(client, "tests.http.progress", {"context": 1}), 400, "invalid")
    assert data["errors"] == {"context": ["Unexpected argument."]}


def test_an_unpaired_surrogate_is_refused(alice) -> None:
    response = post(logged_in(alice), EXPORT, raw='{"report": "\\ud800"}')
    data = refusal(response, 400, "invalid")
    assert data["errors"] == {
        "report": ["Contains an unpaired surrogate escape, which is not valid Unicode."]
    }


@pytest.mark.parametrize(
    "raw",
    [
        b"report=x",
        b"{",
        b"[1, 2]",
        b'"text"',
        b"null",
        b'{"report": NaN}',
        b'{"report": "x", "rows": Infinity}',
        b'{"report": "x", "report": "y"}',
        b'{"report": "\xff"}',
        b"[" * 30_000 + b"]" * 30_000,  # deeper than any parser allows, inside 64 KiB
    ],
)
def test_a_body_that_is_not_a_json_object_is_400(alice, raw) -> None:
    data = refusal(post(logged_in(alice), EXPORT, raw=raw), 400, "invalid")
    assert list(data["errors"]) == ["__all__"]
    assert Job.objects.count() == 0


def test_a_body_must_say_it_is_json_and_may_be_absent(alice) -> None:
    client = logged_in(alice)
    form = post(client, EXPORT, raw="report=x", content_type="application/x-www-form-urlencoded")
    refusal(form, 415, "unsupported_media_type")
    text = post(client, EXPORT, {"report": "x"}, content_type="text/plain")
    refusal(text, 415, "unsupported_media_type")
    vendor_json = post(client, EXPORT, {"report": "x"}, content_type="application/vnd.x+json")
    assert vendor_json.status_code == 202
    # No body: no arguments, for a handler that needs none.
    assert post(client, "tests.http.quiet", key="empty").status_code == 202


@pytest.mark.parametrize(
    ("name", "body"),
    [
        # The handler's concurrency_key function raises, with a secret in its message.
        ("tests.http.regional", {"region": "us"}),
        # Positional-only parameters: Python's binding error shows the whole signature,
        # defaults (a DSN with its password) included.
        ("tests.http.positional", {}),
    ],
)
def test_a_400_names_the_problem_never_the_projects_text(alice, name, body) -> None:
    response = post(logged_in(alice), name, body)
    data = refusal(response, 400, "invalid")
    assert data["errors"]
    assert requestable_jobs.SECRET not in response.content.decode()
    assert "dsn" not in response.content.decode()
    assert Job.objects.count() == 0


@override_settings(DATA_UPLOAD_MAX_MEMORY_SIZE=100)
def test_a_body_too_large_is_413(alice) -> None:
    refusal(post(logged_in(alice), EXPORT, {"report": "x" * 200}), 413, "too_large")


def test_bodies_over_http_max_body_bytes_are_413_by_default(alice) -> None:
    """64 KiB by default, below Django's 2.5 MB: the body is refused unread, no job."""
    client = logged_in(alice)
    at_limit = '{"report": "' + "x" * (65536 - len('{"report": ""}')) + '"}'
    assert len(at_limit) == 65536
    assert post(client, EXPORT, raw=at_limit, key="1").status_code == 202
    over = refusal(post(client, EXPORT, raw=at_limit + " ", key="2"), 413, "too_large")
    assert "65536" in over["message"]
    assert Job.objects.count() == 1


@override_settings(DURABLE_JOBS={"HTTP_MAX_BODY_BYTES": 50})
def test_http_max_body_bytes_sets_the_limit(alice) -> None:
    client = logged_in(alice)
    assert post(client, EXPORT, {"report": "x"}, key="1").status_code == 202
    refusal(post(client, EXPORT, {"report": "x" * 60}, key="2"), 413, "too_large")


# -- the throttle ----------------------------------------------------------------------------


def test_the_throttle_refuses_requests_beyond_the_limit_per_user(alice, bob) -> None:
    client = logged_in(alice)
    name = "tests.http.throttled"  # throttle="2/1m"
    assert post(client, name, {"n": 1}, key="1").status_code == 202
    assert post(client, name, {"n": 2}, key="2").status_code == 202

    third = post(client, name, {"n": 3}, key="3")
    data = refusal(third, 429, "throttled")
    assert 1 <= int(third["Retry-After"]) <= 60
    assert str(third["Retry-After"]) in data["message"]
    refusal(post(client, name, {"n": 4}, key="4"), 429, "throttled")
    assert Job.objects.count() == 2

    # A retry of an accepted request is not a new request: it is answered, not throttled.
    assert post(client, name, {"n": 1}, key="1").status_code == 202
    # Another user, and another handler, have their own allowance.
    assert post(logged_in(bob), name, {"n": 1}, key="1").status_code == 202
    assert post(client, EXPORT, {"report": "x"}, key="3").status_code == 202

    # The window slides, and refused requests count in it too. Once every request of
    # alice's but the second accepted one is 50 s old, a slot frees in 10 s; once they
    # are more than a minute old, a third request is accepted.
    second = JobRequest.objects.get(user=str(alice.pk), name=name, key="2")
    others = JobRequest.objects.filter(user=str(alice.pk), name=name).exclude(pk=second.pk)
    assert others.filter(job__isnull=True).count() == 2  # the two 429s above
    others.update(created_at=timezone.now() - datetime.timedelta(seconds=50))
    assert 9 <= int(post(client, name, {"n": 3}, key="3")["Retry-After"]) <= 10
    others.update(created_at=timezone.now() - datetime.timedelta(seconds=61))
    assert post(client, name, {"n": 3}, key="3").status_code == 202
    refusal(post(client, name, {"n": 5}, key="5"), 429, "throttled")


@pytest.mark.django_db(transaction=True)
def test_the_throttle_holds_for_concurrent_requests_on_separate_connections(alice) -> None:
    """Eight clients at once, each on its own database connection: exactly two get in."""
    start = threading.Barrier(8)
    statuses: list[int] = []

    def one(i: int) -> None:
        try:
            client = logged_in(alice)
            start.wait(timeout=30)
            statuses.append(post(client, "tests.http.throttled", {"n": i}, key=str(i)).status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(statuses) == [202, 202] + [429] * 6
    assert Job.objects.count() == JobRequest.objects.filter(job__isnull=False).count() == 2
    assert JobRequest.objects.filter(job__isnull=True).count() == 6  # each 429 counted


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("level", ["READ_COMMITTED", "REPEATABLE_READ", "SERIALIZABLE"])
def test_the_throttle_holds_under_every_isolation_level(alice, monkeypatch, level) -> None:
    """Twelve requests at once against 2/1m, each on its own connection at ``level``:
    exactly two get in, the rest are 429, none is a 500. (PostgreSQL's and MySQL's
    levels; SQLite's transactions are always serializable, as the other concurrency
    tests show.)"""
    if connection.vendor == "postgresql":
        from psycopg import IsolationLevel

        setting: Any = getattr(IsolationLevel, level)
    elif connection.vendor == "mysql":
        setting = level.lower().replace("_", " ")
    else:
        pytest.skip("SQLite has no isolation levels to choose")

    # Logged in here, on this thread's connection: only the requests race.
    clients = [logged_in(alice, raise_request_exception=False) for _ in range(12)]
    options = connection.settings_dict.setdefault("OPTIONS", {})
    monkeypatch.setitem(options, "isolation_level", setting)
    start = threading.Barrier(12)
    statuses: list[int] = []

    def one(i: int) -> None:
        try:
            client = clients[i]  # a 500 is counted
            start.wait(timeout=30)
            statuses.append(post(client, "tests.http.throttled", {"n": i}, key=str(i)).status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(statuses) == [202, 202] + [429] * 10
    assert Job.objects.count() == JobRequest.objects.filter(job__isnull=False).count() == 2


@pytest.mark.django_db(transaction=True)
def test_a_refused_request_is_answered_without_waiting_for_the_write_lock(alice) -> None:
    """Bad arguments are refused before the endpoint's write transaction: while another
    connection holds that transaction's lock (SQLite: the database's write lock;
    PostgreSQL: the user and handler's advisory lock), an invalid request still gets its
    400, and the holder is never kept waiting. (The handler has no throttle, so the
    refusal is not recorded: that one short write would wait for SQLite's lock.)"""
    client = logged_in(alice, raise_request_exception=False)  # a 500 is counted
    held, release = threading.Event(), threading.Event()
    outcome: dict[str, bool] = {}

    def hold() -> None:
        engine = engine_for(None)
        try:
            with engine.keyed_transaction(f"durable_jobs.request:{alice.pk}:{EXPORT}"):
                held.set()
                # The request below must not need the lock: released by the test, not
                # by this timeout (which only keeps a broken endpoint from hanging here).
                outcome["released_by_the_test"] = release.wait(timeout=8)
        finally:
            connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(timeout=30)
        invalid = post(client, EXPORT, {"report": "x", "rows": "many"}, key="1")
    finally:
        release.set()
        holder.join(timeout=30)
    assert invalid.status_code == 400
    assert outcome == {"released_by_the_test": True}
    assert Job.objects.count() == JobRequest.objects.count() == 0


def test_refused_requests_count_toward_the_throttle(alice) -> None:
    """Against 2/1m: a 400, a 413 and a 429 each use up the user's requests as a job does,
    and the refused ones have no job and no key (a retry with a fixed body is free to
    use the key)."""
    name = "tests.http.throttled"
    client = logged_in(alice)
    refusal(post(client, name, {"n": "not a number"}, key="1"), 400, "invalid")
    assert post(client, name, {"n": 1}, key="1").status_code == 202
    refusal(post(client, name, {"n": 2}, key="2"), 429, "throttled")
    refused = JobRequest.objects.filter(job__isnull=True)
    assert refused.count() == 2
    assert set(refused.values_list("key", flat=True)) == {None}
    # Once the window has passed, the user may request again.
    JobRequest.objects.update(created_at=timezone.now() - datetime.timedelta(seconds=61))
    assert post(client, name, {"n": 3}, key="3").status_code == 202
    refusal(post(client, name, raw="x" * 70_000, key="4"), 413, "too_large")
    refusal(post(client, name, {"n": 5}, key="5"), 429, "throttled")


def test_the_pruner_forgets_old_refused_requests(alice) -> None:
    client = logged_in(alice)
    refusal(post(client, "tests.http.throttled", {"n": "x"}, key="1"), 400, "invalid")
    refusal(post(client, "tests.http.throttled", {"n": "y"}, key="2"), 400, "invalid")
    old = timezone.now() - datetime.timedelta(days=8)  # PRUNE_AFTER_DAYS is 7
    JobRequest.objects.filter(pk=JobRequest.objects.first().pk).update(created_at=old)
    prune()
    assert JobRequest.objects.filter(job__isnull=True).count() == 1


@pytest.mark.django_db(transaction=True)
def test_concurrent_requests_are_not_wrapped_in_the_projects_atomic_requests(
    alice, monkeypatch
) -> None:
    """A project with ATOMIC_REQUESTS (and, on SQLite, Django's default DEFERRED
    transactions): twelve requests at once, each on its own connection, get 202 or 429,
    never a 500. Inside the request's transaction, SQLite would refuse to upgrade the
    readers' locks ("database is locked"); the endpoint's views opt out of it."""
    monkeypatch.setitem(connection.settings_dict, "ATOMIC_REQUESTS", True)
    if connection.vendor == "sqlite":
        options = connection.settings_dict.setdefault("OPTIONS", {})
        monkeypatch.setitem(options, "transaction_mode", "DEFERRED")
    start = threading.Barrier(12)
    statuses: list[int] = []

    def one(i: int) -> None:
        try:
            client = logged_in(alice, raise_request_exception=False)  # a 500 is counted
            start.wait(timeout=30)
            statuses.append(post(client, "tests.http.throttled", {"n": i}, key=str(i)).status_code)
        finally:
            connection.close()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(12)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(statuses) == [202, 202] + [429] * 10
    assert Job.objects.count() == JobRequest.objects.filter(job__isnull=False).count() == 2


# -- status ----------------------------------------------------------------------------------


def test_the_status_shows_state_progress_and_an_opted_in_result_masked(alice) -> None:
    client = logged_in(alice)
    exported = post(client, EXPORT, {"report": "sales"}, key="1").json()
    quiet = post(client, "tests.http.quiet", {"note": "n"}, key="2").json()
    drain()

    data = client.get(exported["status_url"]).json()
    assert data["state"] == "completed"
    assert data["attempts"] == 1
    assert data["finished_at"]
    assert data["attempted_at"]
    # The result, with its secret-looking key masked.
    assert data["result"] == {"report": "sales", "rows": 10, "download_token": MASK}
    # A handler without expose_result keeps its result to itself.
    assert "result" not in client.get(quiet["status_url"]).json()
    for body in (data, client.get(quiet["status_url"]).json()):
        assert not {"payload", "last_error", "node", "meta", "idempotency_key"} & set(body)


def test_a_running_job_shows_its_progress(alice) -> None:
    client = logged_in(alice)
    made = post(client, "tests.http.progress", {}).json()
    node = Node.objects.create(name="n", pid=1, queues={"default": 1}, concurrency=1)
    (running,) = claim(queue="default", limit=1, node_id=node.pk, lease_seconds=60)
    Job.objects.filter(pk=running.pk).update(progress=50)  # as context.progress(50) writes it

    data = client.get(made["status_url"]).json()
    assert (data["state"], data["progress"], data["attempts"]) == ("leased", 50, 1)
    assert data["attempted_at"]
    assert data["finished_at"] is None


def test_a_failed_job_shows_its_state_but_not_its_error(alice) -> None:
    client = logged_in(alice)
    made = post(client, EXPORT, {"report": "x"}).json()
    transition(Job.objects.filter(pk=made["id"]), State.DEAD, last_error="db password=hunter2")
    data = client.get(made["status_url"]).json()
    assert data["state"] == "dead"
    assert "hunter2" not in json.dumps(data)


def test_another_users_job_is_404_like_a_missing_one(alice, bob) -> None:
    made = post(logged_in(alice), EXPORT, {"report": "x"}).json()
    server_side = jobs.add.delay(a=1)  # nobody requested it over HTTP

    theirs = refusal(logged_in(bob).get(made["status_url"]), 404, "not_found")
    unrequested = refusal(logged_in(alice).get(status_url(server_side.pk)), 404, "not_found")
    missing = refusal(logged_in(bob).get(status_url(10**12)), 404, "not_found")
    # Past the id column's range: the same 404, not a database error.
    huge = refusal(logged_in(bob).get(status_url(10**30)), 404, "not_found")
    assert theirs == unrequested == missing == huge
    assert logged_in(alice).get(made["status_url"]).status_code == 200


def test_a_unique_handler_stays_unique_for_requests(alice, bob) -> None:
    """@job(unique=...) applies to each user's requests: while alice's sync of account 1
    waits, her next request for it gets the same job."""
    name = "tests.http.sync"
    mine = post(logged_in(alice), name, {"account": 1}, key="a").json()
    again = post(logged_in(alice), name, {"account": 1, "reason": "b"}, key="b").json()
    other = post(logged_in(alice), name, {"account": 2}, key="c").json()

    assert mine["id"] == again["id"] != other["id"]
    assert Job.objects.count() == 2

    # Once finished, the unique key is free: a new request makes a new job, while a
    # retry of the first request still finds its own.
    drain()
    later = post(logged_in(alice), name, {"account": 1}, key="d").json()
    assert later["id"] not in (mine["id"], other["id"])
    assert post(logged_in(alice), name, {"account": 1}, key="a").json()["id"] == mine["id"]


def test_a_unique_handler_never_shares_a_job_between_users(alice, bob) -> None:
    """Two users requesting the same unique arguments get a job each: neither can read
    the other's status or (expose_result) result. Server code keeps its own key."""
    name = "tests.http.statement"
    alices = post(logged_in(alice), name, {"account": 1, "requested_by": "alice"}, key="k")
    bobs = post(logged_in(bob), name, {"account": 1, "requested_by": "bob"}, key="k")
    assert alices.status_code == bobs.status_code == 202
    alices_job, bobs_job = alices.json(), bobs.json()
    assert alices_job["id"] != bobs_job["id"]
    # Each user's second request still finds their own waiting job.
    repeat = post(logged_in(bob), name, {"account": 1, "requested_by": "bob"}, key="k2")
    assert repeat.json()["id"] == bobs_job["id"]
    server_side = requestable_jobs.statement.delay(account=1, requested_by="server")
    assert server_side.pk not in (alices_job["id"], bobs_job["id"])
    assert Job.objects.filter(name=name).count() == 3

    drain()
    refusal(logged_in(bob).get(alices_job["status_url"]), 404, "not_found")
    refusal(logged_in(alice).get(bobs_job["status_url"]), 404, "not_found")
    seen_by_bob = logged_in(bob).get(bobs_job["status_url"]).json()
    seen_by_alice = logged_in(alice).get(alices_job["status_url"]).json()
    assert seen_by_bob["result"] == {"account": 1, "for": "bob"}
    assert seen_by_alice["result"] == {"account": 1, "for": "alice"}


def test_the_job_and_its_request_are_written_together_or_not_at_all(alice) -> None:
    client = logged_in(alice)
    with (
        mock.patch.object(QuerySet, "create", side_effect=RuntimeError("disk full")),
        pytest.raises(RuntimeError, match="disk full"),
    ):
        post(client, EXPORT, {"report": "x"})
    assert Job.objects.count() == 0
    assert JobRequest.objects.count() == 0


def test_a_deleted_job_takes_its_requests_with_it(alice) -> None:
    client = logged_in(alice)
    first = post(client, EXPORT, {"report": "x"}, key="a").json()
    drain()
    actions.delete_jobs(Job.objects.all())
    assert JobRequest.objects.count() == 0
    refusal(client.get(first["status_url"]), 404, "not_found")
    # The key is free again, as a job's own idempotency key is once the job is gone.
    assert post(client, EXPORT, {"report": "x"}, key="a").json()["id"] != first["id"]


@contextlib.contextmanager
def foreign_key_checks_off() -> Iterator[None]:
    with connection.cursor() as cursor:
        cursor.execute("SET foreign_key_checks = 0")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET foreign_key_checks = 1")


def test_a_request_row_whose_job_vanished_frees_its_key(alice) -> None:
    """A job deleted outside Django (raw SQL) leaves its request row behind."""
    client = logged_in(alice)
    first = post(client, EXPORT, {"report": "x"}, key="a").json()
    with contextlib.ExitStack() as outside_django:
        if connection.vendor == "mysql":
            # MySQL checks foreign keys at once (the others at commit): as a raw delete
            # outside Django would have to, turn the check off for it.
            outside_django.enter_context(foreign_key_checks_off())
        Job.objects.filter(pk=first["id"])._raw_delete(Job.objects.db)  # type: ignore[attr-defined]
    assert JobRequest.objects.count() == 1
    refusal(client.get(first["status_url"]), 404, "not_found")
    again = post(client, EXPORT, {"report": "x"}, key="a")
    assert again.status_code == 202
    assert again.json()["id"] != first["id"]
    assert JobRequest.objects.get().job_id == again.json()["id"]


def test_the_endpoint_follows_the_namespace_it_is_included_under(alice) -> None:
    """``status_url`` is reversed in the namespace the request came through."""
    from django.urls import include

    urlconf = ModuleType("versioned")
    urlconf.urlpatterns = [  # type: ignore[attr-defined]
        path("api/v1/", include("durable_jobs.urls", namespace="v1")),
    ]
    with override_settings(ROOT_URLCONF=urlconf):
        response = logged_in(alice).post(
            "/api/v1/request/tests.http.quiet/", "{}", "application/json", headers={KEY: "k"}
        )
        assert response.status_code == 202
        assert response["Location"] == f"/api/v1/{response.json()['id']}/"


# -- system checks ---------------------------------------------------------------------------


def check_ids(name: str, **options: Any) -> list[tuple[str, str]]:
    from durable_jobs import job

    @job(name=name, **options)
    def handler() -> None:
        pass

    try:
        return [
            (m.id, m.msg)
            for m in checks.run_checks()
            if m.id and m.id.startswith("durable_jobs.") and name in m.msg
        ]
    finally:
        del _handlers[name]


@pytest.mark.parametrize(
    ("options", "expected", "fragment"),
    [
        ({"requestable": True, "throttle": "lots"}, "durable_jobs.E014", "Invalid rate 'lots'"),
        ({"requestable": True, "throttle": "0/1m"}, "durable_jobs.E014", "must both be > 0"),
        ({"requestable": True, "throttle": 10}, "durable_jobs.E014", "must be a string"),
        ({"requestable": True, "permission": "add_order"}, "durable_jobs.E015", "app_label"),
        ({"requestable": True, "permission": ["a.b"]}, "durable_jobs.E015", "app_label"),
        (
            {"requestable": True, "permission": "tests.testapp.add_order"},
            "durable_jobs.E015",
            "not an installed app",
        ),
        ({"throttle": "1/m"}, "durable_jobs.E016", "sets throttle"),
        ({"permission": "testapp.add_order"}, "durable_jobs.E016", "sets permission"),
        ({"expose_result": True}, "durable_jobs.E016", "sets expose_result"),
        ({"requestable": "yes"}, "durable_jobs.E016", "must be True or False"),
        ({"requestable": True, "expose_result": 1}, "durable_jobs.E016", "must be True or False"),
        ({"requestable": True, "throttle": "5/30d"}, "durable_jobs.W004", "PRUNE_AFTER_DAYS"),
    ],
)
def test_misconfigured_requestable_handlers_fail_check(options, expected, fragment) -> None:
    found = check_ids("tests.http.misconfigured", **options)
    assert [m[0] for m in found] == [expected], found
    assert fragment in found[0][1]


def test_well_configured_requestable_handlers_pass_check() -> None:
    ok = {"requestable": True, "permission": "testapp.add_order", "throttle": "10/1m"}
    assert check_ids("tests.http.fine", **ok) == []
    with override_settings(DURABLE_JOBS={"PRUNE_AFTER_DAYS": None}):
        assert check_ids("tests.http.fine", requestable=True, throttle="5/30d") == []


def test_a_throttle_or_permission_still_invalid_at_request_time_refuses(alice) -> None:
    """With the check silenced, a bad option fails closed: nobody gets through."""
    from django.core.exceptions import ImproperlyConfigured

    handler = _handlers["tests.http.throttled"]
    client = logged_in(alice)
    for option, value in (("throttle", "lots"), ("permission", "add_order")):
        with (
            mock.patch.object(handler, option, value),
            pytest.raises(ImproperlyConfigured, match=option),
        ):
            post(client, handler.name, {"n": 1})
    assert Job.objects.count() == 0


# -- no path leads to a leased or completed job ---------------------------------------------------
#
# The audit drives every URL pattern of a URLconf (admin included) and every action of
# every ModelAdmin of the admin sites that URLconf serves, as a superuser (the test
# client skips the CSRF check, as if every request held a valid token), with jobs in
# each of the six states: GET, a form POST carrying fields that would set a state or a
# lease, and a JSON POST (valid arguments, for the request endpoint). After each, no
# job may have become leased or completed (or been leased again under a new token), no
# attempt may have been recorded and no handler may have run. It also reads the code
# of the modules those views and actions live in, for calls that lease or acknowledge.
# The same audit finds the paths planted below.

#: What a form POST tries: write a state, a lease, a result, confirm any question.
HOSTILE_FORM = {
    "state": "completed",
    "lease_token": str(uuid.uuid4()),
    "lease_expires_at": "2100-01-01 00:00:00",
    "attempts": "1",
    "result": "{}",
    "finished_at": "2000-01-01 00:00:00",
    "progress": "100",
    "_save": "Save",
    "post": "yes",
    "index": "0",
}

#: Valid arguments per requestable handler, so that the audit's requests succeed.
VALID_ARGUMENTS = {
    EXPORT: {"report": "audit"},
    "tests.http.guarded": {"order": 1},
    "tests.http.throttled": {"n": 1},
    "tests.http.sync": {"account": 1},
}

#: Modules whose code leases or acknowledges jobs (the worker, and the test helpers that
#: run jobs in-process), and the calls that lease a job or act under its lease.
FORBIDDEN_MODULES = (
    "durable_jobs.lifecycle.outcomes",
    "durable_jobs.lifecycle.recording",
    "durable_jobs.worker",
    "durable_jobs.testing",
)
FORBIDDEN_CALLS = {"claim", "leased_under"}
RESERVED = {State.LEASED.value, State.COMPLETED.value}


@dataclass
class Audit:
    violations: list[str] = field(default_factory=list)
    urls: set[str] = field(default_factory=set)  # pattern names (or regexes) exercised
    requests: int = 0
    actions: set[str] = field(default_factory=set)  # "app.model.action"
    modules: set[str] = field(default_factory=set)  # modules whose code was read
    accepted: int = 0  # requests for jobs answered 202
    changed: set[str] = field(default_factory=set)  # what changed some job's state


def walk(resolver: URLResolver, prefix: str = "") -> Iterator[tuple[str, URLPattern]]:
    """Every URL pattern under ``resolver``, with its whole regular expression."""
    for pattern in resolver.url_patterns:
        piece = pattern.pattern.regex.pattern.removeprefix("^")
        if isinstance(pattern, URLResolver):
            yield from walk(pattern, prefix + piece)
        else:
            yield prefix + piece, pattern


Snapshot = dict[int, tuple[str, Any, int]]


def snapshot() -> Snapshot:
    rows = Job.objects.values_list("pk", "state", "lease_token", "attempts")
    return {pk: (state, token, attempts) for pk, state, token, attempts in rows}


def moved(before: Snapshot) -> list[str]:
    """Jobs that became leased or completed (or were leased again) since ``before``."""
    return [
        f"job {pk}: {before[pk][0] if pk in before else '(new)'} -> {now[0]}"
        for pk, now in snapshot().items()
        if now[0] in RESERVED and before.get(pk) != now
    ]


def newest(model: Any) -> int:
    """The highest id of ``model``'s rows: a row above it was written since."""
    return model.objects.order_by("-pk").values_list("pk", flat=True).first() or 0


class World:
    """Jobs in all six states (made again whenever a request changed that), a schedule, a
    paused queue, a user to act on, and the superuser who acts.

    The jobs made for it run on queues of their own, so that ``drain`` never runs the
    jobs the audit's requests made.
    """

    def __init__(self) -> None:
        self.nodes = itertools.count()
        self.root = User.objects.create_superuser("root", password="pw")
        self.victim = User.objects.create_user("victim", password="pw")

    def ensure(self) -> None:
        if not User.objects.filter(pk=self.victim.pk).exists():
            self.victim = User.objects.create_user("victim", password="pw")
        if not Schedule.objects.exists():
            Scheduler().schedule_interval("audit", "1h", name=jobs.add, payload={"a": 1})
        if set(Job.objects.values_list("state", flat=True).distinct()) >= set(State.values):
            return
        queues.resume_all()
        made = [
            jobs.always_fails.using(queue="seed").delay(),  # retrying
            jobs.add.using(queue="seed").delay(a=1),  # completed
            jobs.discarder.using(queue="seed").delay(),  # dead
            jobs.canceller.using(queue="seed").delay(),  # cancelled
        ]
        drain("seed")
        made.append(jobs.add.using(queue="seed").delay(a=2))  # queued
        made.append(jobs.add.using(queue="seed-lease").delay(a=3))
        node = Node.objects.create(
            name=f"audit-{next(self.nodes)}", pid=1, queues={"seed-lease": 1}, concurrency=1
        )
        claim(queue="seed-lease", limit=10, node_id=node.pk, lease_seconds=300)  # leased
        queues.pause("webhooks")
        states = Job.objects.filter(pk__in=[j.pk for j in made]).values_list("state", flat=True)
        assert set(states) == set(State.values), states

    def values(self, param: str, pattern: URLPattern) -> list[str]:
        """Values to put in a URL for ``param``: the pks of the pattern's model, else
        every job's id; plus one that matches nothing."""
        model_admin = getattr(pattern.callback, "model_admin", None)
        if param == "id" or (model_admin is not None and model_admin.model is User):
            return [str(self.victim.pk), "0"]
        if model_admin is not None:
            pks = model_admin.model._default_manager.values_list("pk", flat=True)[:12]
            return [str(pk) for pk in pks] + ["0"]
        if param == "name":
            return [*VALID_ARGUMENTS, "tests.http.quiet", "tests.add", "no.such"]
        if param == "content_type_id":
            return [str(ContentType.objects.get_for_model(Job).pk)]
        if param == "app_label":
            return ["durable_jobs", "auth"]
        if param == "url":
            return ["nothing/here/"]
        return [str(pk) for pk in Job.objects.values_list("pk", flat=True)] + ["0"]

    def selected(self, model: Any) -> QuerySet:
        """Every row of ``model``, but the acting superuser."""
        rows = model._default_manager.all()
        return rows.exclude(pk=self.root.pk) if model is User else rows


def audit(urlconf: str) -> Audit:
    """Drive every URL and admin action of ``urlconf``; read the code behind them."""
    result = Audit()
    world = World()
    client = Client()
    factory = RequestFactory()
    sites: set[admin.AdminSite] = set()
    modules: set[str] = set()

    def watched(what: str, send: Any, *args: Any, **kwargs: Any) -> Any:
        world.ensure()
        before = snapshot()
        attempts, effects = newest(Attempt), newest(SideEffect)
        client.force_login(world.root)  # again: some pages log out
        response = send(*args, **kwargs)
        result.requests += 1
        result.violations += [f"{what}: {m}" for m in moved(before)]
        if snapshot() != before:
            result.changed.add(what)
        ran = Attempt.objects.filter(pk__gt=attempts) or SideEffect.objects.filter(pk__gt=effects)
        if ran.exists():
            result.violations.append(f"{what}: a job ran")
        return response

    for regex, pattern in walk(get_resolver(urlconf)):
        callback = pattern.callback
        model_admin = getattr(callback, "model_admin", None)
        for site in (
            getattr(callback, "admin_site", None),
            getattr(model_admin, "admin_site", None),
        ):
            if site is not None:
                sites.add(site)
        modules.add(inspect.unwrap(callback).__module__)
        result.urls.add(pattern.name or regex)
        for fmt, params in normalize(regex):
            world.ensure()
            for combo in itertools.product(*(world.values(p, pattern) for p in params)):
                url = "/" + fmt % dict(zip(params, combo, strict=True))
                name = combo[params.index("name")] if "name" in params else ""
                body = json.dumps(VALID_ARGUMENTS.get(name, {"state": "completed"}))
                watched(f"GET {url}", client.get, url)
                watched(f"POST {url}", client.post, url, HOSTILE_FORM)
                response = watched(
                    f"POST {url} (JSON)",
                    client.post,
                    url,
                    body,
                    content_type="application/json",
                    headers={KEY: str(uuid.uuid4())},
                )
                result.accepted += response.status_code == 202

    for site in sites:
        for model, model_admin in site._registry.items():
            modules.add(type(model_admin).__module__)
            label = f"{model._meta.app_label}_{model._meta.model_name}"
            changelist = reverse(f"{site.name}:{label}_changelist")
            probe = factory.get(changelist)
            probe.user = world.root
            for name, action in model_admin.get_actions(probe).items():
                # Django 6.1 returns Action objects (unpacking them is deprecated), 5.2 tuples.
                func = action.func if hasattr(action, "func") else action[0]
                modules.add(func.__module__)
                result.actions.add(f"{model._meta.label_lower}.{name}")
                what = f"admin action {name} on {model._meta.model_name}"

                def send_form(name: str = name, model: Any = model, url: str = changelist) -> None:
                    # As the changelist's form sends it: every row selected, confirmed.
                    pks = [str(pk) for pk in world.selected(model).values_list("pk", flat=True)]
                    form = {k: v for k, v in HOSTILE_FORM.items() if k != "_save"}  # else no action
                    client.post(url, {**form, "action": name, "_selected_action": pks})

                def call(
                    func: Any = func, model_admin: Any = model_admin, url: str = changelist
                ) -> None:
                    # And called directly, whatever the form would have allowed.
                    request = factory.post(url, {"post": "yes"})
                    request.user = world.root
                    request.session = SessionStore()
                    request._messages = FallbackStorage(request)
                    func(model_admin, request, world.selected(model_admin.model))

                watched(f"{what} (POST)", send_form)
                watched(f"{what} (called)", call)

    for module_name in sorted(modules):
        if module_name.startswith("django."):
            continue
        module = importlib.import_module(module_name)
        scanned = [module]
        if module_name.startswith("durable_jobs."):
            scanned += durable_jobs_imports(module)
        for each in scanned:
            result.modules.add(each.__name__)
            result.violations += [f"{each.__name__}: {v}" for v in code_violations(each)]
    return result


def durable_jobs_imports(module: ModuleType) -> list[ModuleType]:
    """The durable_jobs modules ``module`` imports, but the state machine (which defines
    the moves), the models and the database layer."""
    found: list[ModuleType] = []
    for node in ast.walk(ast.parse(inspect.getsource(module))):
        if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith(
            "durable_jobs"
        ):
            continue
        for alias in node.names:
            submodule = f"{node.module}.{alias.name}"
            try:
                found.append(importlib.import_module(submodule))
            except ImportError:
                found.append(importlib.import_module(node.module or ""))
    skip = ("durable_jobs.states", "durable_jobs.models", "durable_jobs.db")
    return [m for m in found if m.__name__ != "durable_jobs" and not m.__name__.startswith(skip)]


def code_violations(module: ModuleType) -> list[str]:
    """Imports and calls in ``module`` that lease or acknowledge a job."""
    found = []
    for node in ast.walk(ast.parse(inspect.getsource(module))):
        if isinstance(node, ast.Import):
            imported = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            imported = [node.module or ""] + [f"{node.module}.{a.name}" for a in node.names]
        else:
            imported = []
        for name in imported:
            last = name.rpartition(".")[2]
            if name.startswith(FORBIDDEN_MODULES) or (
                name.startswith("durable_jobs.states.") and last in FORBIDDEN_CALLS
            ):
                found.append(f"imports {name} at line {node.lineno}")
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if called in FORBIDDEN_CALLS:
            found.append(f"calls {called}() at line {node.lineno}")
        if called == "transition" and len(node.args) >= 2:
            target = node.args[1]
            if isinstance(target, ast.Attribute) and target.attr in {"LEASED", "COMPLETED"}:
                found.append(f"moves jobs to {target.attr} at line {node.lineno}")
        if called == "update" and any(k.arg == "state" for k in node.keywords):
            found.append(f"writes Job.state directly at line {node.lineno}")
    return found


def test_no_url_or_admin_action_leases_or_completes_a_job() -> None:
    from django.conf import settings

    result = audit(settings.ROOT_URLCONF)

    assert result.violations == []
    # The audit was not vacuous: it reached the client endpoints, the admin's job pages
    # and each state-changing action, and read the code behind them.
    assert {
        "request",
        "status",
        "durable_jobs_job_changelist",
        "durable_jobs_job_delete",
        "durable_jobs_overview_changelist",
        "logout",
    } <= result.urls
    assert {
        "durable_jobs.job.retry_now",
        "durable_jobs.job.cancel",
        "durable_jobs.job.discard",
        "durable_jobs.job.delete_selected",
        "durable_jobs.queue.pause",
        "durable_jobs.queue.resume",
        "durable_jobs.schedule.run_now",
        "auth.user.delete_selected",
    } <= result.actions
    assert {
        "durable_jobs.http.views",
        "durable_jobs.http.requesting",
        "durable_jobs.actions",
        "durable_jobs.admin.jobs",
    } <= result.modules
    assert result.requests > 300
    # Its requests for jobs got through, one per requestable handler, and its admin
    # actions, sent as the changelist sends them, did what they do.
    assert result.accepted == len(VALID_ARGUMENTS)
    for action in ("retry_now", "cancel", "discard", "delete_selected"):
        assert f"admin action {action} on job (POST)" in result.changed, action


# The planted paths: what the audit must find.

planted_site = admin.AdminSite(name="planted")


class AcknowledgingJobAdmin(admin.ModelAdmin):
    actions = ["acknowledge"]

    @admin.action(description="Mark completed")
    def acknowledge(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        transition(queryset, State.COMPLETED, finished_at=timezone.now())


planted_site.register(Job, AcknowledgingJobAdmin)


def lease_one(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        claim(queue="seed", limit=1, node_id=None, lease_seconds=60)
    return HttpResponse("ok")


urlpatterns = [
    *tests.urls.urlpatterns,
    path("planted/lease/", lease_one),  # first: the admin's catch-all would hide it
    path("planted/", planted_site.urls),
]


def test_the_audit_finds_a_planted_leasing_view_and_acknowledging_action() -> None:
    with override_settings(ROOT_URLCONF=__name__):
        result = audit(__name__)

    text = "\n".join(result.violations)
    assert re.search(r"^POST /planted/lease/: job \d+: queued -> leased$", text, re.M), text
    for how in ("POST", "called"):
        found = rf"^admin action acknowledge on job \({how}\): job \d+: leased -> completed$"
        assert re.search(found, text, re.M), text
    assert re.search(rf"^{__name__}: calls claim\(\) at line \d+$", text, re.M), text
    assert re.search(rf"^{__name__}: moves jobs to COMPLETED at line \d+$", text, re.M), text
    # Nothing else: the project's own paths stay clean in the same run.
    planted = ("/planted/", "acknowledge", f"{__name__}:")
    assert [v for v in result.violations if not any(p in v for p in planted)] == []
