"""The overview page and its figures: counts, throughput, failure rate, lag, nodes, errors.

Figures are computed from real rows on the test database; the caps that bound each
read are exercised with a small cap, so that the narrowing is seen to happen.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from durable_jobs import history, overview
from durable_jobs.flow import queues
from durable_jobs.models import Attempt, Job, Node, Outcome
from durable_jobs.states import State
from durable_jobs.testing import drain
from tests.testapp import jobs

pytestmark = pytest.mark.django_db

OVERVIEW = "/admin/durable_jobs/overview/"


def finished_jobs(
    now: datetime.datetime, minutes_ago: list[int], *, state: str = State.COMPLETED, queue="default"
) -> None:
    """Finished jobs, one per entry, finished that many minutes (and 10 s) before ``now``."""
    Job.objects.bulk_create(
        Job(
            name="tests.noop",
            queue=queue,
            state=state,
            attempts=1,
            created_at=now - datetime.timedelta(minutes=m, seconds=20),
            available_at=now - datetime.timedelta(minutes=m, seconds=20),
            finished_at=now - datetime.timedelta(minutes=m, seconds=10),
        )
        for m in minutes_ago
    )


def test_counts_per_queue_and_state_with_lag() -> None:
    now = timezone.now()
    jobs.add.delay(a=1)
    jobs.add.using(queue="webhooks").delay(a=2)
    jobs.add.using(queue="webhooks", run_at=now + datetime.timedelta(hours=1)).delay(a=3)
    Job.objects.filter(queue="default").update(available_at=now - datetime.timedelta(seconds=90))
    finished_jobs(now, [1, 2, 3])
    finished_jobs(now, [5], state=State.DEAD, queue="webhooks")
    finished_jobs(now, [60 * 30], state=State.COMPLETED)  # a month ago: outside the window
    queues.pause("webhooks")

    rows = {row["name"]: row for row in overview.overview()["queues"]}

    assert rows["default"]["queued"] == 1
    assert rows["default"]["completed"] == 3
    assert rows["default"]["lag_seconds"] == pytest.approx(90, abs=1)
    assert not rows["default"]["paused"]
    assert rows["webhooks"]["queued"] == 2
    assert rows["webhooks"]["dead"] == 1
    # The job due in an hour is not late: the lag is the one available now, just enqueued.
    assert rows["webhooks"]["lag_seconds"] == pytest.approx(0, abs=5)
    assert rows["webhooks"]["paused"]
    assert rows["default"]["capped"] == rows["webhooks"]["capped"] == []


def test_a_queue_with_only_future_jobs_has_no_lag() -> None:
    jobs.add.using(queue="emails", run_in=datetime.timedelta(hours=1)).delay(a=1)
    emails = next(row for row in overview.overview()["queues"] if row["name"] == "emails")
    assert emails["queued"] == 1
    assert emails["lag_seconds"] is None


def test_throughput_per_minute_and_failure_rate() -> None:
    now = timezone.now().replace(second=30, microsecond=0)
    finished_jobs(now, [0, 0, 1, 5, 5, 5, 59, 61, 120])
    failed = jobs.always_fails.delay()
    drain()  # one failed attempt, now

    figures = overview.overview(now + datetime.timedelta(seconds=1))
    per_minute = [p["completed"] for p in figures["throughput"]["per_minute"]]

    assert len(per_minute) == 60
    # The last bar is the current minute, the first one 59 minutes ago; 61 and 120
    # minutes ago fall outside.
    assert per_minute[-1] == 2
    assert per_minute[-2] == 1
    assert per_minute[-6] == 3
    assert per_minute[0] == 1
    assert sum(per_minute) == figures["throughput"]["total"] == 7
    assert figures["throughput"]["peak"] == 3
    rate = figures["failure_rate"]
    assert (rate["failed"], rate["completed"]) == (1, 7)
    assert rate["rate"] == pytest.approx(1 / 8, abs=1e-4)
    assert Attempt.objects.filter(job=failed.pk, outcome=Outcome.FAILED).count() == 1


def test_windows_narrow_to_the_cap_and_say_so() -> None:
    now = timezone.now().replace(second=30, microsecond=0)
    finished_jobs(now, [1, 2, 3, 4, 5, 6, 7, 8])
    for _ in range(3):
        jobs.add.delay(a=1)

    figures = overview.overview(now, cap=5)

    throughput = figures["throughput"]
    assert throughput["capped"]
    assert throughput["total"] == 5  # the newest five, minutes 1 to 5
    per_minute = [p["completed"] for p in throughput["per_minute"]]
    # Minutes before the narrowed window are "not counted", not zero.
    assert per_minute[-7] is None
    assert per_minute[-6:] == [1, 1, 1, 1, 1, 0]
    assert figures["finished_windows"]["completed"]["capped"]
    default = next(row for row in figures["queues"] if row["name"] == "default")
    assert default["completed"] == 5
    assert default["queued"] == 3  # under the cap: exact
    assert default["capped"] == []

    capped = overview.overview(now, cap=2)
    default = next(row for row in capped["queues"] if row["name"] == "default")
    assert default["queued"] == 2  # "more than 2": the cap, marked as capped
    assert default["capped"] == ["queued"]


def test_the_failure_rate_counts_failures_and_completions_over_one_window() -> None:
    now = timezone.now().replace(second=30, microsecond=0)
    finished_jobs(now, [1, 2, 3, 4, 5, 6, 7, 8])  # more completions than the cap of 5
    failed = jobs.always_fails.delay()
    drain()
    # A failure 50 minutes ago falls outside the narrowed window, with the completions
    # that happened then: neither is counted.
    Attempt.objects.filter(job=failed.pk).update(finished_at=now - datetime.timedelta(minutes=50))

    rate = overview.failure_rate(now, cap=5)

    assert rate["capped"]
    assert (rate["failed"], rate["completed"]) == (0, 5)
    assert rate["rate"] == 0


def test_error_groups_newest_first_with_root_cause_and_a_link() -> None:
    jobs.flaky.delay(fail_times=2)
    jobs.always_fails.delay()
    jobs.always_fails.delay()
    drain(with_scheduled=True)

    groups = overview.error_groups(timezone.now() - datetime.timedelta(hours=1))["groups"]

    by_class = {g["error_class"]: g for g in groups}
    assert by_class["builtins.ValueError"]["count"] == 6  # 2 jobs x 3 attempts
    assert by_class["builtins.ValueError"]["message"] == "ValueError: cannot process"
    assert by_class["builtins.ValueError"]["root_cause"] == "KeyError: 'missing'"
    # Two messages ("failure 1", "failure 2"), one root cause.
    flaky = [g for g in groups if g["error_class"] == "builtins.RuntimeError"]
    assert len(flaky) == 2
    assert {g["root_cause"] for g in flaky} == {"KeyError: 'root cause'"}
    assert [g["last_seen"] for g in groups] == sorted(
        (g["last_seen"] for g in groups), reverse=True
    )

    example = Attempt.objects.get(pk=by_class["builtins.ValueError"]["example_attempt"])
    matched = overview.jobs_with_error(example)
    assert set(matched.values_list("name", flat=True)) == {"tests.always_fails"}
    assert matched.count() == 2


def test_nodes_live_and_stale_with_running_jobs() -> None:
    live = Node.objects.create(name="node-live", pid=10, queues={"default": 2}, concurrency=2)
    Node.objects.create(
        name="node-gone", pid=11, last_heartbeat_at=timezone.now() - datetime.timedelta(hours=2)
    )
    job = jobs.add.delay(a=1)
    Job.objects.filter(pk=job.pk).update(state=State.LEASED, leased_by=live)

    found = overview.nodes(timezone.now())

    assert [n["name"] for n in found["live"]] == ["node-live"]
    assert found["live"][0]["running"] == 1
    assert [n["name"] for n in found["stale"]] == ["node-gone"]


def test_overview_page_renders_every_section(admin_client) -> None:
    jobs.always_fails.delay()
    jobs.add.delay(a=1)
    drain(with_scheduled=True)
    Node.objects.create(name="node-a", pid=1, queues={"default": 4})

    page = admin_client.get(OVERVIEW)

    assert page.status_code == 200
    html = page.content.decode()
    assert "<h1>Jobs overview</h1>" in html
    assert 'data-queue="default"' in html
    assert "builtins.ValueError" in html
    assert "KeyError: &#x27;missing&#x27;" in html
    assert "node-a" in html
    group = page.context["errors"][0]
    listing = admin_client.get(group["jobs_url"])
    assert listing.status_code == 200
    assert [j.name for j in listing.context["cl"].result_list] == ["tests.always_fails"]


def test_finished_counts_link_to_the_same_window(admin_client) -> None:
    now = timezone.now()
    finished_jobs(now, [5, 10])
    finished_jobs(now, [60 * 48])  # two days ago: in the table, not in the 24 h window
    page = admin_client.get(OVERVIEW)
    default = next(q for q in page.context["queues"] if q["name"] == "default")
    completed = default["finished"][0]
    assert completed["count"] == 2
    listing = admin_client.get(completed["url"])
    assert listing.status_code == 200
    assert len(listing.context["cl"].result_list) == 2


def test_odd_ids_searched_are_no_match_and_odd_error_groups_are_refused(admin_client) -> None:
    jobs.add.delay(a=1)
    for params in ({"q": "²"}, {"q": "9" * 30}):
        listing = admin_client.get(reverse("admin:durable_jobs_job_changelist"), params)
        assert listing.status_code == 200, params
        assert list(listing.context["cl"].result_list) == [], params
    # The error filter takes only what the overview links with: an attempt's id.
    for params in ({"error": "²"}, {"error": "12abc"}):
        listing = admin_client.get(reverse("admin:durable_jobs_job_changelist"), params)
        assert listing.status_code == 400, params


def test_admin_index_links_to_the_overview(admin_client) -> None:
    index = admin_client.get(reverse("admin:index"))
    assert reverse("admin:durable_jobs_overview_changelist") == OVERVIEW
    assert f'href="{OVERVIEW}"' in index.content.decode()


def test_overview_needs_the_job_view_permission(client) -> None:
    user = User.objects.create_user("viewer", password="pw", is_staff=True)
    client.force_login(user)
    assert client.get(OVERVIEW).status_code == 403
    assert OVERVIEW not in client.get(reverse("admin:index")).content.decode()
    user.user_permissions.add(Permission.objects.get(codename="view_job"))
    assert client.get(OVERVIEW).status_code == 200
    assert OVERVIEW in client.get(reverse("admin:index")).content.decode()


def test_the_number_of_queries_does_not_grow_with_the_rows(admin_client) -> None:
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert admin_client.get(OVERVIEW).status_code == 200
        return len(captured)

    now = timezone.now()
    finished_jobs(now, [1])
    jobs.add.delay(a=1)
    jobs.always_fails.delay()
    drain()  # an error group (its job is read by a second query) and two handlers' attempts
    jobs.add.delay(a=1)
    few = queries()
    finished_jobs(now, list(range(1, 300)))
    finished_jobs(now, list(range(1, 100)), state=State.DEAD)
    for n in range(50):
        jobs.add.delay(a=n)
    # More handlers with more attempts: the history is still read by the same queries.
    jobs.flaky.delay(fail_times=1)
    jobs.record.delay(label="x")
    drain(with_scheduled=True)
    assert len(admin_client.get(OVERVIEW).context["handlers"]) == 4
    assert queries() == few


def plan_of(sql: str, params: Any) -> str:
    """The query's plan, with its parameters bound as the application binds them (SQLite
    treats a bound parameter differently from the same value written in the SQL)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # With sequential scans priced out, a Seq Scan in the plan means that no
            # index could serve the query at all, whatever the table's size.
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute(f"EXPLAIN {sql}", params)
        elif connection.vendor == "mysql":
            # One row per table read. On tables this small MySQL may scan rather than
            # seek, so what is checked is that an index could serve: a full scan with no
            # possible key ("ALL ... None") would read the whole table at any size.
            cursor.execute(f"EXPLAIN {sql}", params)
            names = [column[0] for column in cursor.description]
            rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
            return "\n".join(
                f"{row['table']} {row['type']} {row['possible_keys']} {row['key']}" for row in rows
            )
        else:
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}", params)
        return "\n".join(str(row[-1]) for row in cursor.fetchall())


def reads_whole(table: str, plan: str) -> bool:
    """Whether the plan reads all of ``table`` (no index could serve the read)."""
    if connection.vendor == "postgresql":
        return f"Seq Scan on {table}" in plan
    if connection.vendor == "mysql":
        return f"{table} ALL None" in plan
    # SEARCH walks an index range; SCAN of the table (or of a whole index) does not.
    return f"SCAN {table}" in plan


@pytest.mark.parametrize("table", ["durable_jobs_job", "durable_jobs_attempt"])
def test_no_figure_reads_a_whole_table(table: str) -> None:
    now = timezone.now()
    finished_jobs(now, [1, 2])
    jobs.always_fails.delay()
    jobs.add.delay(a=1)
    drain()
    statements: list[tuple[str, Any]] = []

    def capture(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if table in sql:
            statements.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        overview.overview()
    assert statements

    for sql, params in statements:
        plan = plan_of(sql, params)
        assert not reads_whole(table, plan), f"{sql}\n{plan}"


def test_the_handler_history_reads_the_attempts_index_and_no_job() -> None:
    jobs.always_fails.delay()
    jobs.add.delay(a=1)
    drain(with_scheduled=True)
    statements: list[tuple[str, Any]] = []

    def capture(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        statements.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        figure = history.handler_history(timezone.now() - overview.FINISHED_WINDOW, cap=50)
    assert {row["name"] for row in figure["handlers"]} == {"tests.add", "tests.always_fails"}

    # The window's edge, then the summary: two statements however many handlers.
    assert len(statements) == 2
    for sql, params in statements:
        plan = plan_of(sql, params)
        assert "durable_attempt_finished_idx" in plan, f"{sql}\n{plan}"
        # Every read is cut at the cap (+ 1 for the window's edge).
        assert "LIMIT" in sql, sql
        assert not reads_whole("durable_jobs_attempt", plan), f"{sql}\n{plan}"
        # Each attempt carries its handler's name: the job table is not read at all.
        assert "durable_jobs_job" not in plan.replace("durable_jobs_jobs", ""), plan


def test_in_constants_refuses_anything_but_short_identifiers() -> None:
    assert Attempt.objects.filter(outcome__in_constants=["failed"]).count() == 0
    with pytest.raises(ValueError, match="short lowercase identifiers"):
        list(Attempt.objects.filter(outcome__in_constants=["failed') OR ('1'='1"]))
    with pytest.raises(ValueError, match="short lowercase identifiers"):
        list(Attempt.objects.filter(outcome__in_constants=[]))
