"""Flow control in one process: queue pause and limits in the claim, concurrency keys,
unique jobs, bulk enqueue, batches, progress throttling, and "why isn't it running?".

The cross-process races are in test_flow_races.py.
"""

from __future__ import annotations

import datetime
from unittest import mock

import pytest
from django.db import connection, transaction
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import durable_jobs
from durable_jobs import Batch, EnqueueError, Unique, job
from durable_jobs.exceptions import ImproperlyConfiguredQueue
from durable_jobs.flow import queues, rates
from durable_jobs.flow.batches import finish_ready
from durable_jobs.flow.why import explain
from durable_jobs.maintenance.batch_sweeper import sweep
from durable_jobs.maintenance.pruner import prune
from durable_jobs.models import Batch as BatchRow
from durable_jobs.models import Job, Node, Queue
from durable_jobs.states import State, claim
from durable_jobs.testing import drain
from durable_jobs.worker import Worker
from durable_jobs.worker.config import parse_queue_spec
from tests.testapp import jobs

pytestmark = pytest.mark.django_db


def claim_from(queue: str = "default", limit: int = 10) -> list[Job]:
    return claim(
        queue=queue,
        limit=limit,
        node_id=None,
        lease_seconds=30,
        limited=queue in queues.limited([queue]),
    )


def run_one(queue: str = "default") -> Job:
    (job_row,) = claim_from(queue, 1)
    complete(job_row)
    return job_row


def complete(job_row: Job) -> None:
    from durable_jobs.lifecycle import outcomes, recording
    from durable_jobs.worker.execute import execute

    recording.write_now([outcomes.decide(execute(job_row, node="t"), node="t")])


# -- rates ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "parsed", "shown"),
    [
        ("30/1m", (30, 60.0), "30/1m"),
        ("5/2s", (5, 2.0), "5/2s"),
        ("100/s", (100, 1.0), "100/1s"),
        ("1000/h", (1000, 3600.0), "1000/1h"),
        (" 7 / 90s ", (7, 90.0), "7/90s"),
    ],
)
def test_rates_parse_and_format(text: str, parsed: tuple[int, float], shown: str) -> None:
    assert rates.parse_rate(text) == parsed
    assert rates.format_rate(*parsed) == shown


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("10/second", (10, 1.0)),
        ("10/seconds", (10, 1.0)),
        ("10/sec", (10, 1.0)),
        ("10/minute", (10, 60.0)),
        ("10/minutes", (10, 60.0)),
        ("10/Minute", (10, 60.0)),
        ("100/hour", (100, 3600.0)),
        ("100/2 hours", (100, 7200.0)),
        ("1000/day", (1000, 86400.0)),
        ("1000/days", (1000, 86400.0)),
    ],
)
def test_rates_take_the_long_units_users_write_elsewhere(
    text: str, parsed: tuple[int, float]
) -> None:
    assert rates.parse_rate(text) == parsed


def test_a_long_unit_works_in_the_queues_option_and_the_setting() -> None:
    assert parse_queue_spec("webhooks:3:10/minute") == ({"webhooks": 3}, {"webhooks": "10/minute"})
    from durable_jobs.conf import check

    with override_settings(DURABLE_JOBS={"QUEUES": {"default": {"rate": "100/hour"}}}):
        assert check() == []


@pytest.mark.parametrize(
    "text", ["", "30", "30/", "0/1m", "a/1m", "30/1y", "30/0s", "-1/1m", "10/fortnight"]
)
def test_bad_rates_name_the_format(text: str) -> None:
    with pytest.raises(rates.InvalidRate, match="30/1m"):
        rates.parse_rate(text)


def test_the_sliding_log_counts_only_the_window() -> None:
    log = [[100.0, 2], [101.0, 2], [103.5, 1]]
    assert rates.remaining(log, 104.0, 5, 2.0) == 4  # only 103.5 is within (102, 104]
    assert rates.remaining(log[:2], 101.5, 5, 2.0) == 1
    assert rates.next_slot(log[:2], 101.5, 5, 2.0) is None
    assert rates.next_slot([[100.0, 3], [101.0, 2]], 101.5, 5, 2.0) == 102.0
    assert rates.remaining("garbage", 1.0, 5, 2.0) == 5


def test_queue_spec_takes_a_rate_as_third_part() -> None:
    assert parse_queue_spec("default,webhooks:3:30/1m") == (
        {"default": 4, "webhooks": 3},
        {"webhooks": "30/1m"},
    )
    with pytest.raises(ImproperlyConfiguredQueue, match="30/1m"):
        parse_queue_spec("webhooks:3:fast")


# -- queue pause and global limits -----------------------------------------------------------


def test_a_paused_queue_starts_nothing_until_resumed() -> None:
    for i in range(3):
        jobs.add.delay(a=i)
    assert queues.pause("default") is True
    assert queues.pause("default") is False  # already paused
    assert claim_from("default") == []
    # Also through the locked path a worker takes for limited queues.
    assert claim(queue="default", limit=5, node_id=None, lease_seconds=30, limited=True) == []
    assert drain() == {}
    assert queues.resume("default") is True
    assert len(claim_from("default")) == 3


def test_pause_all_covers_every_known_queue_and_resume_all_undoes_it() -> None:
    jobs.add.using(queue="reports").delay(a=1)  # known only from a waiting job
    paused = queues.pause_all()
    assert {"default", "emails", "webhooks", "reports"} <= set(paused)
    assert claim_from("reports") == []
    assert set(queues.resume_all()) == set(paused)
    assert len(claim_from("reports")) == 1


def test_global_concurrency_caps_leased_jobs_across_claims() -> None:
    queues.set_limits("default", global_concurrency=2)
    for i in range(6):
        jobs.add.delay(a=i)
    first = claim_from("default", 10)
    assert len(first) == 2
    assert claim_from("default", 10) == []
    complete(first[0])
    assert len(claim_from("default", 10)) == 1


def test_a_rate_limit_counts_starts_in_the_sliding_window() -> None:
    queues.set_limits("default", rate="3/1m")
    for i in range(5):
        jobs.add.delay(a=i)
    assert len(claim_from("default", 2)) == 2
    assert len(claim_from("default", 10)) == 1
    assert claim_from("default", 10) == []
    control = Queue.objects.get(name="default")
    assert sum(n for _, n in control.rate_window) == 3
    later = timezone.now() + datetime.timedelta(seconds=61)
    with mock.patch("django.utils.timezone.now", return_value=later):
        assert len(claim_from("default", 10)) == 2


def test_the_unlimited_fast_path_claims_nothing_from_a_queue_that_became_limited() -> None:
    """A worker that has not yet heard of new limits must not bypass them."""
    jobs.add.delay(a=1)
    queues.set_limits("default", global_concurrency=1)
    assert claim(queue="default", limit=5, node_id=None, lease_seconds=30) == []
    assert len(claim(queue="default", limit=5, node_id=None, lease_seconds=30, limited=True)) == 1


def test_set_limits_validates_and_none_removes() -> None:
    with pytest.raises(rates.InvalidRate):
        queues.set_limits("default", rate="lots")
    with pytest.raises(ValueError, match="global_concurrency"):
        queues.set_limits("default", global_concurrency=0)
    row = queues.set_limits("default", rate="10/1s", global_concurrency=3)
    assert (row.rate, row.global_concurrency, row.is_limited) == ("10/1s", 3, True)
    row = queues.set_limits("default", rate=None)
    assert (row.rate, row.global_concurrency) == ("", 3)
    row = queues.set_limits("default", global_concurrency=None)
    assert row.is_limited is False


def test_a_worker_syncs_declared_limits_and_leaves_undeclared_ones(settings) -> None:
    settings.DURABLE_JOBS = {
        **settings.DURABLE_JOBS,
        "QUEUES": {"default": {"concurrency": 2, "rate": "30/1m"}, "emails": {}},
    }
    queues.set_limits("emails", global_concurrency=4)  # set by an operator
    worker = Worker({"default": 2, "emails": 1, "webhooks": 1}, rates={"webhooks": "5/2s"})
    queues.sync_for_worker(worker.queues, worker.rates)
    rows = {q.name: q for q in Queue.objects.all()}
    assert rows["default"].rate == "30/1m"
    assert rows["emails"].global_concurrency == 4  # settings do not mention it: kept
    assert rows["webhooks"].rate == "5/2s"
    worker.limited_queues = worker.heartbeat.limited_queues()  # as every heartbeat does
    assert worker.limited_queues == {"default", "emails", "webhooks"}


# -- concurrency keys --------------------------------------------------------------------------


def test_one_claim_leases_at_most_the_limit_per_key() -> None:
    for n in range(5):
        jobs.per_account.delay(account=1, n=n)
    for n in range(2):
        jobs.per_account.delay(account=2, n=n)
    plain = jobs.add.delay(a=1)
    leased = claim_from("default", 10)
    keys = sorted(j.concurrency_key or "" for j in leased)
    assert keys == ["", "account:1", "account:2"]
    assert plain.pk in {j.pk for j in leased}
    assert claim_from("default", 10) == []  # both keys are held
    holder = next(j for j in leased if j.concurrency_key == "account:1")
    complete(holder)
    again = claim_from("default", 10)
    assert [j.concurrency_key for j in again] == ["account:1"]
    assert Job.objects.filter(state=State.QUEUED, concurrency_key="account:1").count() == 3


def test_a_fixed_key_with_a_limit_of_two() -> None:
    for n in range(5):
        jobs.global_lock.delay(n=n)
    assert len(claim_from("default", 10)) == 2
    assert claim_from("default", 10) == []
    assert drain() == {}  # the two leased ones hold the key (drain did not lease them)


def test_keyed_jobs_drain_one_at_a_time_per_key() -> None:
    for n in range(4):
        jobs.per_account.delay(account=n % 2, n=n, seconds=0)
    assert drain() == {"completed": 4}


def test_a_bad_concurrency_key_is_refused_at_enqueue() -> None:
    @job(name="tests.bad_key", concurrency_key=lambda order_id: f"order:{order_id}")
    def bad_key(order_id: int, note: str = "") -> None:
        pass

    from durable_jobs.registry import _handlers

    try:
        with pytest.raises(EnqueueError, match=r"\*\*_"):
            bad_key.delay(order_id=1, note="x")
        assert not Job.objects.exists()
    finally:
        del _handlers["tests.bad_key"]

    @job(name="tests.default_key", concurrency_key=lambda region, **_: f"region:{region}")
    def default_key(order_id: int, region: str = "eu") -> None:
        pass

    try:
        assert default_key.delay(order_id=1).concurrency_key == "region:eu"
    finally:
        del _handlers["tests.default_key"]
    with pytest.raises(ValueError, match="concurrency_limit"):
        job(name="tests.bad_limit", concurrency_key="k", concurrency_limit=0)(lambda: None)


# -- unique jobs ---------------------------------------------------------------------------------


def test_unique_jobs_return_the_existing_job_until_it_finishes() -> None:
    first = jobs.unique_sync.delay(account_id=7, reason="a")
    again = jobs.unique_sync.delay(account_id=7, reason="b")  # reason is not a unique field
    assert again.pk == first.pk
    other = jobs.unique_sync.delay(account_id=8)
    assert other.pk != first.pk
    assert first.idempotency_key.startswith("unique:tests.unique_sync:")
    drain()
    first.refresh_from_db()
    assert first.state == State.COMPLETED
    assert first.idempotency_key is None
    assert jobs.unique_sync.delay(account_id=7).pk != first.pk


def test_unique_only_while_queued_frees_the_key_when_the_job_starts() -> None:
    first = jobs.unique_while_queued.delay(account_id=1)
    assert jobs.unique_while_queued.delay(account_id=1).pk == first.pk
    (leased,) = claim_from("default")
    assert leased.pk == first.pk
    assert leased.idempotency_key is None
    second = jobs.unique_while_queued.delay(account_id=1)
    assert second.pk != first.pk


def test_the_unique_period_bucket_changes_at_its_boundary() -> None:
    base = datetime.datetime(2026, 3, 1, 12, 0, 59, 900_000, tzinfo=datetime.UTC)
    with mock.patch("django.utils.timezone.now", return_value=base):
        a = jobs.unique_per_minute.delay(account_id=1)
        assert jobs.unique_per_minute.delay(account_id=1).pk == a.pk
    with mock.patch(
        "django.utils.timezone.now", return_value=base + datetime.timedelta(milliseconds=100)
    ):
        b = jobs.unique_per_minute.delay(account_id=1)
    assert b.pk != a.pk


def test_an_explicit_idempotency_key_wins_over_unique() -> None:
    a = jobs.unique_sync.using(idempotency_key="mine").delay(account_id=1)
    assert a.idempotency_key == "mine"
    assert a.unique_states == ""
    assert jobs.unique_sync.delay(account_id=1).pk != a.pk


def test_unique_options_are_checked_when_decorating() -> None:
    with pytest.raises(ValueError, match="'queued'"):
        Unique(states=["leased"])
    with pytest.raises(ValueError, match="not a parameter"):
        job(name="tests.bad_unique", unique=Unique(fields=["nope"]))(lambda account_id: None)
    with pytest.raises(ValueError, match="at least one second"):
        Unique(period=datetime.timedelta(0))


def test_unique_applies_defaults_so_equal_calls_match() -> None:
    a = jobs.unique_sync.delay(account_id=3)
    b = jobs.unique_sync.delay(account_id=3, reason="")
    assert a.pk == b.pk


# -- enqueue_many -------------------------------------------------------------------------------


def test_enqueue_many_inserts_in_order_in_few_statements() -> None:
    prepared = [jobs.add.prepare(a=i) for i in range(1200)]
    with CaptureQueriesContext(connection) as queries:
        rows = durable_jobs.enqueue_many(prepared)
    assert [r.payload["a"] for r in rows] == list(range(1200))
    assert len({r.pk for r in rows}) == 1200
    assert Job.objects.count() == 1200
    # On PostgreSQL many rows go in with COPY.
    inserts = [q for q in queries.captured_queries if q["sql"].startswith(("INSERT", "COPY"))]
    assert 1 <= len(inserts) <= 40
    assert drain() == {"completed": 1200}


def test_enqueue_many_honours_keys_and_uniqueness() -> None:
    existing = jobs.add.using(idempotency_key="k1").delay(a=0)
    rows = durable_jobs.enqueue_many(
        [
            jobs.add.using(idempotency_key="k1").prepare(a=1),  # taken before
            jobs.add.using(idempotency_key="k2").prepare(a=2),
            jobs.add.using(idempotency_key="k2").prepare(a=3),  # repeats within the list
            jobs.unique_sync.prepare(account_id=5),
            jobs.unique_sync.prepare(account_id=5, reason="again"),
            jobs.add.prepare(a=4),
        ]
    )
    assert rows[0].pk == existing.pk
    assert rows[1].pk == rows[2].pk
    assert rows[1].payload == {"a": 2}
    assert rows[3].pk == rows[4].pk
    assert Job.objects.count() == 4


def test_enqueue_many_is_all_or_nothing_with_the_callers_transaction() -> None:
    try:
        with transaction.atomic():
            durable_jobs.enqueue_many([jobs.add.prepare(a=i) for i in range(10)])
            assert Job.objects.count() == 10
            raise RuntimeError("rolled back")
    except RuntimeError:
        pass
    assert Job.objects.count() == 0


def test_enqueue_many_refuses_what_is_not_prepared() -> None:
    with pytest.raises(EnqueueError, match="prepare"):
        durable_jobs.enqueue_many([{"a": 1}])  # type: ignore[list-item]
    with pytest.raises(EnqueueError, match="positional"):
        jobs.add.prepare(1)


def test_enqueue_many_wakes_in_process_workers_once(django_capture_on_commit_callbacks) -> None:
    from durable_jobs import enqueueing

    with (
        mock.patch.object(enqueueing, "wake_local_workers") as wake,
        django_capture_on_commit_callbacks(execute=True) as callbacks,
    ):
        durable_jobs.enqueue_many([jobs.add.prepare(a=i) for i in range(50)])
    assert len(callbacks) == 1
    assert wake.call_count == 1


# -- batches -----------------------------------------------------------------------------------


def test_a_batch_runs_its_callback_once_with_counts() -> None:
    batch = Batch("import 42", on_complete=jobs.batch_done.prepare(label="import 42")).enqueue(
        [jobs.batch_item.prepare(n=i, fail=i % 4 == 0) for i in range(12)]
    )
    assert batch.total == 12
    assert Job.objects.filter(batch=batch).count() == 12
    drain()
    batch.refresh_from_db()
    assert batch.is_finished
    assert batch.counts == {"completed": 9, "dead": 3}
    callback = Job.objects.get(pk=batch.callback_job_id)
    assert callback.state == State.COMPLETED
    assert callback.result == {
        "label": "import 42",
        "id": batch.pk,
        "total": 12,
        "counts": {"completed": 9, "dead": 3},
    }
    assert finish_ready([batch.pk]) == []  # already finished: nothing more
    assert Job.objects.filter(name="tests.batch_done").count() == 1


def test_an_empty_batch_finishes_at_once(django_capture_on_commit_callbacks) -> None:
    with django_capture_on_commit_callbacks(execute=True):
        batch = Batch("empty", on_complete=jobs.batch_done.prepare(label="e")).enqueue([])
    batch.refresh_from_db()
    assert batch.is_finished
    assert batch.callback_job_id is not None


def test_an_operator_cancelling_the_last_job_finishes_the_batch() -> None:
    from durable_jobs.actions import cancel_jobs

    batch = Batch("b", on_complete=jobs.batch_done.prepare(label="b")).enqueue(
        [jobs.batch_item.prepare(n=1), jobs.batch_item.prepare(n=2)]
    )
    run_one()
    cancel_jobs(Job.objects.filter(batch=batch, state=State.QUEUED))
    batch.refresh_from_db()
    assert batch.counts == {"completed": 1, "cancelled": 1}
    assert batch.callback_job_id is not None


def test_the_sweep_finishes_a_batch_whose_check_was_missed() -> None:
    batch = Batch("b", on_complete=jobs.batch_done.prepare(label="b")).enqueue(
        [jobs.batch_item.prepare(n=1)]
    )
    with mock.patch("durable_jobs.lifecycle.recording.finish_batches"):
        run_one()
    batch.refresh_from_db()
    assert not batch.is_finished
    assert sweep() == [batch.pk]
    batch.refresh_from_db()
    assert batch.is_finished


def test_the_pruner_keeps_finished_jobs_of_an_open_batch() -> None:
    batch = Batch("b").enqueue([jobs.batch_item.prepare(n=1), jobs.batch_item.prepare(n=2)])
    run_one()
    Job.objects.filter(state=State.COMPLETED).update(
        finished_at=timezone.now() - datetime.timedelta(days=30)
    )
    assert prune(days=7) == 0
    drain()
    Job.objects.update(finished_at=timezone.now() - datetime.timedelta(days=30))
    batch.refresh_from_db()
    assert batch.is_finished
    assert batch.callback_job_id is None
    assert prune(days=7) == 2


def test_batch_options_are_checked() -> None:
    with pytest.raises(EnqueueError, match="prepare"):
        Batch("x", on_complete=jobs.batch_done)  # type: ignore[arg-type]
    with pytest.raises(EnqueueError, match="run_at"):
        Batch(
            "x", on_complete=jobs.batch_done.using(run_in=datetime.timedelta(1)).prepare(label="")
        ).enqueue([])
    assert BatchRow.objects.count() == 0


# -- progress -----------------------------------------------------------------------------------


def test_progress_in_a_tight_loop_writes_rarely() -> None:
    job_row = jobs.progress_loop.delay(steps=2000)
    with CaptureQueriesContext(connection) as queries:
        drain()
    updates = [
        q for q in queries.captured_queries if '"progress"' in q["sql"] and "UPDATE" in q["sql"]
    ]
    assert len(updates) <= 5
    job_row.refresh_from_db()
    assert job_row.progress == 100.0


# -- why isn't it running? -----------------------------------------------------------------------


def reason_codes(job_row: Job) -> list[str]:
    job_row.refresh_from_db()
    return [r.code for r in explain(job_row)]


def live_node(queues_served: dict[str, int]) -> Node:
    return Node.objects.create(name=f"n-{len(queues_served)}", pid=1, queues=queues_served)


def test_why_names_each_reason() -> None:
    live_node({"default": 2})
    later = jobs.add.using(run_in=datetime.timedelta(minutes=5)).delay(a=1)
    assert reason_codes(later) == ["not_yet_available"]
    assert "due at" in explain(later)[0].message

    ready = jobs.add.delay(a=2)
    assert reason_codes(ready) == ["waiting_in_line"]

    queues.pause("default")
    assert reason_codes(ready) == ["queue_paused"]
    assert "jobs resume default" in explain(ready)[0].message
    queues.resume("default")

    queues.set_limits("default", rate="1/1h")
    claim_from("default", 1)
    waiting = jobs.add.delay(a=3)
    assert reason_codes(waiting) == ["rate_limited"]
    assert "next start is allowed at" in explain(waiting)[0].message
    queues.set_limits("default", rate=None)

    holder = jobs.per_account.delay(account=9)
    (leased,) = [j for j in claim_from("default", 10) if j.pk == holder.pk]
    blocked = jobs.per_account.delay(account=9)
    assert reason_codes(blocked) == ["concurrency_key_held"]
    assert f"held by job {holder.pk}" in explain(blocked)[0].message

    orphan = jobs.add.using(queue="nobody-serves-this").delay(a=4)
    assert reason_codes(orphan) == ["no_live_node"]
    assert "runworker --queues nobody-serves-this" in explain(orphan)[0].message

    assert reason_codes(leased) == ["running"]
    complete(leased)
    assert reason_codes(leased) == ["finished"]


def test_why_reports_a_full_global_concurrency() -> None:
    live_node({"default": 2})
    queues.set_limits("default", global_concurrency=1)
    jobs.add.delay(a=1)
    claim_from("default")
    waiting = jobs.add.delay(a=2)
    assert reason_codes(waiting) == ["queue_concurrency_full"]
