"""The overview's per-handler history: attempts, failures and duration percentiles.

Real attempt rows with known durations and finish times, on the test database; the
window's 24 hour edge and its cap are exercised with times set on the rows and a small
cap, and the admin page is read as a logged-in staff user.
"""

from __future__ import annotations

import datetime
import importlib
import io
import json
import types
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from durable_jobs import history, overview
from durable_jobs.admin.overview import OverviewAdmin
from durable_jobs.models import Attempt, Job, Outcome
from durable_jobs.states import State
from durable_jobs.testing import drain
from tests.testapp import jobs

pytestmark = pytest.mark.django_db

OVERVIEW = "/admin/durable_jobs/overview/"
DAY = datetime.timedelta(hours=24)


def attempts(
    name: str,
    durations_ms: list[float],
    *,
    finished_at: datetime.datetime,
    outcomes: list[str] | None = None,
    spacing: datetime.timedelta = datetime.timedelta(seconds=1),
    named: bool = True,
) -> list[Attempt]:
    """Attempts of one job of handler ``name``, one per duration, the last finished at
    ``finished_at`` and each earlier one ``spacing`` before the next; ``named=False``
    leaves the attempts' own ``name`` empty, as versions before it wrote them."""
    job = Job.objects.create(name=name, state=State.COMPLETED, finished_at=finished_at)
    outcomes = outcomes or [Outcome.COMPLETED] * len(durations_ms)
    rows = []
    for number, (ms, outcome) in enumerate(zip(durations_ms, outcomes, strict=True), start=1):
        finished = finished_at - (len(durations_ms) - number) * spacing
        duration = datetime.timedelta(milliseconds=ms)
        rows.append(
            Attempt(
                job=job,
                number=number,
                name=name if named else "",
                started_at=finished - duration,
                finished_at=finished,
                duration=duration,
                outcome=outcome,
            )
        )
    return Attempt.objects.bulk_create(rows)


def by_name(figure: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["name"]: row for row in figure["handlers"]}


@pytest.fixture
def staff_client(client: Client) -> Client:
    """A staff user who may view jobs, and nothing more: what the overview asks for."""
    user = User.objects.create_user("ops", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_job"))
    client.force_login(user)
    return client


# -- the percentile's definition ---------------------------------------------------------------


def test_percentiles_are_nearest_rank() -> None:
    one_to_hundred = [float(n) for n in range(1, 101)]
    assert history.percentile(one_to_hundred, 50) == 50
    assert history.percentile(one_to_hundred, 95) == 95
    # Of 20 values p95 is the 19th: the second largest (and of 10, the largest).
    assert history.percentile([float(n) for n in range(20, 0, -1)], 95) == 19
    assert history.percentile([float(n) for n in range(1, 11)], 95) == 10
    assert history.percentile([7.0], 50) == history.percentile([7.0], 95) == 7
    assert [history.nearest_rank(50, n) for n in (1, 2, 3, 4)] == [1, 1, 2, 2]
    with pytest.raises(ValueError, match="at least one"):
        history.percentile([], 50)


# -- the figure --------------------------------------------------------------------------------


def test_each_handler_gets_its_count_failures_and_percentiles() -> None:
    now = timezone.now()
    attempts("shop.receipt", [float(n) for n in range(100, 0, -1)], finished_at=now)
    outcomes = [Outcome.FAILED] * 3 + [Outcome.TIMED_OUT, Outcome.LOST] + [Outcome.COMPLETED] * 15
    outcomes[5] = Outcome.SNOOZED  # given back, not a failure
    attempts("shop.webhook", [n * 10.0 for n in range(1, 21)], finished_at=now, outcomes=outcomes)
    attempts("shop.single", [2.5], finished_at=now)

    figure = history.handler_history(now - DAY)

    assert not figure["capped"]
    assert [row["name"] for row in figure["handlers"]] == [
        "shop.receipt",
        "shop.webhook",
        "shop.single",
    ]  # the busiest first
    rows = by_name(figure)
    assert rows["shop.receipt"] == {
        "name": "shop.receipt", "attempts": 100, "failed": 0, "p50_ms": 50.0, "p95_ms": 95.0,
    }  # fmt: skip
    assert rows["shop.webhook"] == {
        "name": "shop.webhook", "attempts": 20, "failed": 5, "p50_ms": 100.0, "p95_ms": 190.0,
    }  # fmt: skip
    assert rows["shop.single"] == {
        "name": "shop.single", "attempts": 1, "failed": 0, "p50_ms": 2.5, "p95_ms": 2.5,
    }  # fmt: skip


def test_equal_durations_and_sub_millisecond_precision() -> None:
    now = timezone.now()
    attempts("shop.same", [4.0] * 7, finished_at=now)
    attempts("shop.fine", [0.001, 0.25, 1.125], finished_at=now)

    rows = by_name(history.handler_history(now - DAY))

    assert (rows["shop.same"]["p50_ms"], rows["shop.same"]["p95_ms"]) == (4.0, 4.0)
    assert (rows["shop.fine"]["p50_ms"], rows["shop.fine"]["p95_ms"]) == (0.25, 1.125)


def test_attempts_older_than_24_hours_are_not_counted() -> None:
    now = timezone.now()
    attempts("shop.receipt", [10.0], finished_at=now - DAY + datetime.timedelta(minutes=1))
    attempts("shop.receipt", [5000.0], finished_at=now - DAY - datetime.timedelta(minutes=1))
    attempts("shop.old", [1.0, 2.0], finished_at=now - datetime.timedelta(days=3))

    figure = overview.overview(now)["history"]

    assert figure["since"] == (now - DAY).isoformat()
    assert by_name(figure) == {
        "shop.receipt": {
            "name": "shop.receipt", "attempts": 1, "failed": 0, "p50_ms": 10.0, "p95_ms": 10.0,
        }
    }  # fmt: skip


def test_past_the_cap_only_the_newest_attempts_are_read_and_it_says_so() -> None:
    now = timezone.now().replace(microsecond=0)
    # Eight attempts one minute apart, the newest now, lasting 8, 7, ... 1 ms.
    attempts(
        "shop.receipt",
        [8.0, 7.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0],
        finished_at=now,
        spacing=datetime.timedelta(minutes=1),
    )

    figure = history.handler_history(now - DAY, cap=5)

    assert figure["capped"]
    # The window starts just after the sixth newest attempt (five minutes ago).
    assert figure["since"] == (now - datetime.timedelta(minutes=5)).isoformat()
    assert by_name(figure)["shop.receipt"] == {
        "name": "shop.receipt", "attempts": 5, "failed": 0, "p50_ms": 3.0, "p95_ms": 5.0,
    }  # fmt: skip
    assert not history.handler_history(now - DAY, cap=8)["capped"]


def test_attempts_the_worker_wrote_are_counted_with_their_durations() -> None:
    for a in range(3):
        jobs.add.delay(a=a)
    jobs.always_fails.delay()
    drain(with_scheduled=True)  # always_fails: 3 attempts, all failed

    rows = by_name(history.handler_history(timezone.now() - DAY))

    assert (rows["tests.add"]["attempts"], rows["tests.add"]["failed"]) == (3, 0)
    assert (rows["tests.always_fails"]["attempts"], rows["tests.always_fails"]["failed"]) == (3, 3)
    recorded = sorted(
        history.milliseconds(d)
        for d in Attempt.objects.filter(job__name="tests.add").values_list("duration", flat=True)
    )
    assert rows["tests.add"]["p50_ms"] == recorded[1]
    assert rows["tests.add"]["p95_ms"] == recorded[2]
    # The worker copied each job's handler name onto its attempts.
    assert set(Attempt.objects.values_list("job__name", "name")) == {
        ("tests.add", "tests.add"),
        ("tests.always_fails", "tests.always_fails"),
    }


def test_the_migration_names_the_last_days_attempts_only() -> None:
    from django.apps import apps
    from django.db import connection

    migration = importlib.import_module("durable_jobs.migrations.0010_attempt_history")
    now = timezone.now()
    recent = attempts("tests.add", [10, 20], finished_at=now, named=False)
    old = attempts("tests.old", [5], finished_at=now - 2 * DAY, named=False)

    # The function reads only the editor's connection (SQLite refuses a schema editor
    # inside the test's transaction).
    migration.name_recent_attempts(apps, types.SimpleNamespace(connection=connection))

    assert {a.name for a in Attempt.objects.filter(pk__in=[a.pk for a in recent])} == {"tests.add"}
    assert Attempt.objects.get(pk=old[0].pk).name == ""
    assert by_name(history.handler_history(now - DAY))["tests.add"]["attempts"] == 2


def test_no_attempts_no_handlers() -> None:
    since = timezone.now() - DAY
    assert history.handler_history(since) == {
        "since": since.isoformat(),
        "capped": False,
        "handlers": [],
    }


# -- the admin page and the command ------------------------------------------------------------


def test_the_overview_page_shows_the_handler_table(staff_client: Client) -> None:
    now = timezone.now()
    attempts("shop.receipt", [float(n) for n in range(1, 101)], finished_at=now)
    attempts("shop.webhook", [1500.0, 2500.0], finished_at=now, outcomes=["failed", "completed"])

    page = staff_client.get(OVERVIEW)

    assert page.status_code == 200
    html = page.content.decode()
    assert "Handlers, last 24 hours" in html
    assert ">p50</th>" in html
    assert ">p95</th>" in html
    rows = {row["name"]: row for row in page.context["handlers"]}
    assert (rows["shop.receipt"]["p50_ms"], rows["shop.receipt"]["p95_ms"]) == (50.0, 95.0)
    receipt = html[html.index('data-handler="shop.receipt"') :].split("</tr>")[0]
    cells = [cell.split("</td>")[0] for cell in receipt.split('<td class="dj-count">')[1:]]
    assert cells == ["100", "0", "50.0 ms", "95.0 ms"]
    webhook = html[html.index('data-handler="shop.webhook"') :].split("</tr>")[0]
    cells = [cell.split("</td>")[0] for cell in webhook.split('<td class="dj-count">')[1:]]
    assert cells == ["2", "1", "1,500.0 ms", "2,500.0 ms"]
    # The handler's name links to its jobs.
    listing = staff_client.get(rows["shop.webhook"]["jobs_url"])
    assert [j.name for j in listing.context["cl"].result_list] == ["shop.webhook"]
    assert "Only the newest attempts were counted" not in html
    assert "No attempts in the last 24 hours." not in html


def test_a_capped_history_says_since_when(
    staff_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = timezone.now().replace(microsecond=0)
    attempts("shop.receipt", [1.0, 2.0, 3.0], finished_at=now, spacing=datetime.timedelta(hours=1))
    monkeypatch.setattr(OverviewAdmin, "cap", 2)

    html = staff_client.get(OVERVIEW).content.decode()

    since = (now - datetime.timedelta(hours=2)).isoformat()
    assert f"Only the newest attempts were counted: since {since}." in html


def test_without_attempts_the_page_says_so(staff_client: Client) -> None:
    attempts("shop.old", [1.0], finished_at=timezone.now() - 2 * DAY)
    html = staff_client.get(OVERVIEW).content.decode()
    assert "No attempts in the last 24 hours." in html
    assert 'class="dj-handler"' not in html


def test_jobs_stats_carries_the_same_history() -> None:
    now = timezone.now()
    attempts("shop.receipt", [float(n) for n in range(1, 101)], finished_at=now)
    out = io_of("stats", "--json")
    figure = json.loads(out)["history"]
    assert set(figure) == {"since", "capped", "handlers"}
    assert figure["handlers"] == [
        {"name": "shop.receipt", "attempts": 100, "failed": 0, "p50_ms": 50.0, "p95_ms": 95.0}
    ]
    text = io_of("stats")
    assert "Attempts per handler, last 24 hours:" in text
    header, row = text.split("Attempts per handler, last 24 hours:\n")[1].splitlines()[:2]
    assert header.split() == ["HANDLER", "ATTEMPTS", "FAILED", "P50", "P95"]
    assert row.split() == ["shop.receipt", "100", "0", "50ms", "95ms"]


def io_of(*args: str) -> str:
    out = io.StringIO()
    call_command("jobs", *args, stdout=out)
    return out.getvalue()
