"""Durable schedules: the API, the heartbeat, catch-up, failures and outcomes.

Time is injected (``Scheduler(clock=...)``, ``tick(now)``); nothing sleeps and hopes.
"""

from __future__ import annotations

import datetime
import threading

import pytest
from django.db import connections
from django.test import override_settings

from durable_jobs import Scheduler, UnknownJob
from durable_jobs.models import Job, Schedule
from durable_jobs.schedules.expressions import InvalidSchedule
from durable_jobs.schedules.scheduler import ScheduleNotFound
from durable_jobs.schedules.sync import sync_schedules
from durable_jobs.schedules.tick import tick
from durable_jobs.states import State
from durable_jobs.testing import drain
from durable_jobs.worker import Worker
from tests.conftest import wait_for
from tests.testapp import jobs

pytestmark = pytest.mark.django_db
UTC = datetime.UTC
T0 = datetime.datetime(2026, 3, 2, 9, 0, tzinfo=UTC)  # a Monday


class Clock:
    def __init__(self, now: datetime.datetime) -> None:
        self.now = now

    def __call__(self) -> datetime.datetime:
        return self.now

    def advance(self, **kwargs: float) -> datetime.datetime:
        self.now += datetime.timedelta(**kwargs)
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock(T0)


@pytest.fixture
def scheduler(clock: Clock) -> Scheduler:
    return Scheduler(clock=clock)


def report(scheduler: Scheduler, **options) -> Schedule:
    options.setdefault("expression", "*/10 * * * *")
    return scheduler.schedule(
        "report", name="tests.scheduled_report", payload={"countries": ["CA"]}, **options
    )


def test_schedule_get_list_and_update_keeps_created_at(scheduler, clock) -> None:
    first = report(scheduler)
    assert first.next_run_at == datetime.datetime(2026, 3, 2, 9, 10, tzinfo=UTC)
    assert scheduler.get("report").name == "tests.scheduled_report"
    assert [s.pk for s in scheduler.list()] == ["report"]
    clock.advance(hours=1)
    again = report(scheduler, expression="0 * * * *", timezone="Europe/Paris")
    assert again.created_at == first.created_at
    assert again.updated_at == clock.now
    assert again.next_run_at == datetime.datetime(2026, 3, 2, 11, 0, tzinfo=UTC)
    assert Schedule.objects.count() == 1


def test_get_of_an_unknown_id_is_none_and_the_operations_that_need_one_raise(
    scheduler,
) -> None:
    assert scheduler.get("nope") is None
    assert scheduler.get("nul\x00id") is None  # no query PostgreSQL would refuse
    for operation in (scheduler.pause, scheduler.resume, scheduler.run, scheduler.preview):
        with pytest.raises(ScheduleNotFound, match="No schedule with id 'nope'"):
            operation("nope")
    assert scheduler.remove("nope") is False


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"expression": "* * * *"}, InvalidSchedule, "4 fields"),
        ({"expression": "* * * * * * *"}, InvalidSchedule, "7 fields"),
        ({"expression": "99 * * * *"}, InvalidSchedule, "Invalid cron"),
        (
            {"expression": "0 * * * *", "timezone": "Europe/Atlantis"},
            InvalidSchedule,
            "Unknown timezone",
        ),
        ({"run_at": datetime.datetime(2026, 5, 1, 9)}, InvalidSchedule, "aware datetime"),
        ({"interval": "0s"}, InvalidSchedule, "longer than zero"),
        ({"interval": datetime.timedelta(minutes=-1)}, InvalidSchedule, "longer than zero"),
        ({"expression": "0 * * * *", "interval": "5m"}, InvalidSchedule, "exactly one of"),
        ({}, InvalidSchedule, "exactly one of"),
        ({"expression": "0 * * * *", "catch_up": "sometimes"}, InvalidSchedule, "catch_up"),
        (
            {"expression": "0 * * * *", "payload": {"countries": [], "nope": 1}},
            InvalidSchedule,
            "unexpected keyword",
        ),
        ({"expression": "0 * * * *", "name": "no.such.job"}, UnknownJob, "no.such.job"),
    ],
)
def test_bad_input_is_refused_and_changes_nothing(scheduler, options, error, message) -> None:
    options = {"name": "tests.scheduled_report", "payload": {"countries": ["CA"]}, **options}
    with pytest.raises(error, match=message):
        scheduler.schedule("bad", **options)
    assert not Schedule.objects.exists()


def test_heartbeat_enqueues_due_occurrences_once_and_advances(scheduler, clock) -> None:
    report(scheduler)
    assert scheduler.tick().enqueued == 0  # not due yet
    clock.advance(minutes=10)
    result = scheduler.tick()
    assert (result.enqueued, result.failed) == (1, 0)
    job = Job.objects.get()
    assert job.idempotency_key == "schedule:report:2026-03-02T09:10:00+00:00"
    assert job.payload == {"countries": ["CA"]}
    schedule = scheduler.get("report")
    assert schedule.next_run_at == datetime.datetime(2026, 3, 2, 9, 20, tzinfo=UTC)
    assert (schedule.run_count, schedule.last_status) == (1, "enqueued")
    # A second heartbeat at the same moment (another node, a restart) adds nothing.
    Schedule.objects.filter(pk="report").update(
        next_run_at=datetime.datetime(2026, 3, 2, 9, 10, tzinfo=UTC)
    )
    again = scheduler.tick()
    assert (again.enqueued, again.duplicates) == (0, 1)
    assert Job.objects.count() == 1


def test_the_handler_receives_the_schedule_context(scheduler, clock) -> None:
    report(scheduler)
    clock.advance(minutes=10, seconds=3)
    scheduler.tick()
    assert drain() == {"completed": 1}
    assert Job.objects.get().result == {
        "schedule_id": "report",
        "scheduled_run_at": "2026-03-02T09:10:00+00:00",
        "run_timestamp": "2026-03-02T09:10:03+00:00",
        "idempotency_key": "schedule:report:2026-03-02T09:10:00+00:00",
        "countries": ["CA"],
        "window": "weekly",
    }


@pytest.mark.django_db(transaction=True)
def test_four_racing_heartbeats_create_one_job(clock) -> None:
    report(Scheduler(clock=clock))
    due_at = clock.advance(minutes=10)
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def beat() -> None:
        try:
            barrier.wait()
            tick(due_at)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=beat) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert Job.objects.count() == 1
    assert Schedule.objects.get().run_count == 1


@pytest.mark.django_db(transaction=True)
def test_racing_enqueues_of_one_occurrence_hit_the_constraint_not_a_read(clock) -> None:
    """Without the heartbeat's row lock: only the unique key stands between them."""
    from durable_jobs.schedules.tick import enqueue_occurrence

    schedule = report(Scheduler(clock=clock))
    barrier = threading.Barrier(4)
    created: list[bool] = []

    def enqueue() -> None:
        try:
            barrier.wait()
            created.append(enqueue_occurrence(schedule, T0, T0)[1])
        finally:
            connections.close_all()

    threads = [threading.Thread(target=enqueue) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(created) == [False, False, False, True]
    assert Job.objects.count() == 1


@pytest.mark.parametrize(
    ("catch_up", "expected_keys"),
    [
        ("latest", ["09:30"]),
        ("all", ["09:20", "09:30"]),  # catch_up_limit=2 of the three missed
        ("skip", []),
    ],
)
def test_overdue_occurrences_follow_the_catch_up_policy(
    scheduler, clock, catch_up, expected_keys
) -> None:
    report(scheduler, catch_up=catch_up, catch_up_limit=2)
    # The scheduler was down for three intervals (09:10, 09:20, 09:30) and restarts at 09:35.
    clock.advance(minutes=35)
    scheduler.tick()
    keys = sorted(Job.objects.values_list("idempotency_key", flat=True))
    assert keys == [f"schedule:report:2026-03-02T{hhmm}:00+00:00" for hhmm in expected_keys]
    assert scheduler.get("report").next_run_at == datetime.datetime(2026, 3, 2, 9, 40, tzinfo=UTC)
    # Back to normal afterwards.
    clock.advance(minutes=5)
    assert scheduler.tick().enqueued == 1


def test_a_late_heartbeat_within_the_grace_is_not_a_miss(scheduler, clock) -> None:
    report(scheduler, catch_up="skip")
    clock.advance(minutes=10, seconds=20)  # 20 s late: still on time
    assert scheduler.tick().enqueued == 1


def test_enqueue_failures_back_off_disable_at_the_limit_and_a_success_resets(
    scheduler, clock
) -> None:
    report(scheduler, max_consecutive_fails=3)
    Schedule.objects.filter(pk="report").update(name="gone.handler")  # the code was removed
    clock.advance(minutes=10)
    for expected, backoff in ((1, 5), (2, 10)):
        assert scheduler.tick().failed == 1
        schedule = scheduler.get("report")
        assert (schedule.consecutive_fails, schedule.last_status, schedule.enabled) == (
            expected,
            "failed",
            True,
        )
        assert "No job handler is registered under the name 'gone.handler'" in schedule.last_error
        assert schedule.retry_at == clock.now + datetime.timedelta(seconds=backoff)
        assert scheduler.tick().failed == 0  # backing off: not retried at once
        clock.advance(seconds=backoff)
    # The occurrence was not lost meanwhile: it is retried, not skipped.
    assert schedule.next_run_at == datetime.datetime(2026, 3, 2, 9, 10, tzinfo=UTC)
    Schedule.objects.filter(pk="report").update(name="tests.scheduled_report")
    assert scheduler.tick().enqueued == 1
    schedule = scheduler.get("report")
    assert (schedule.consecutive_fails, schedule.fail_count, schedule.last_error) == (0, 2, "")
    assert Job.objects.get().idempotency_key == "schedule:report:2026-03-02T09:10:00+00:00"
    Schedule.objects.filter(pk="report").update(name="gone.handler")
    clock.advance(minutes=10)
    for _ in range(3):
        scheduler.tick()
        clock.advance(minutes=5)
    schedule = scheduler.get("report")
    assert (schedule.enabled, schedule.last_status, schedule.fail_count) == (False, "disabled", 5)
    clock.advance(hours=1)
    assert scheduler.tick().failed == 0  # disabled: no more attempts


def test_a_one_off_given_a_new_time_is_armed_again(scheduler, clock) -> None:
    scheduler.schedule_once(
        "launch", T0 + datetime.timedelta(minutes=5), name="tests.scheduled_report",
        payload={"countries": []},
    )  # fmt: skip
    clock.advance(minutes=6)
    scheduler.tick()
    assert not scheduler.get("launch").enabled
    again = scheduler.schedule_once(
        "launch", T0 + datetime.timedelta(hours=2), name="tests.scheduled_report",
        payload={"countries": []},
    )  # fmt: skip
    assert (again.enabled, again.next_run_at) == (True, T0 + datetime.timedelta(hours=2))
    clock.advance(hours=2)
    assert scheduler.tick().enqueued == 1
    assert Job.objects.count() == 2


def test_a_job_finishing_late_does_not_hide_a_pause(scheduler, clock) -> None:
    report(scheduler)
    clock.advance(minutes=10)
    scheduler.tick()
    scheduler.pause("report")
    drain()
    schedule = scheduler.get("report")
    assert schedule.last_status == "paused"
    assert schedule.last_duration_ms is not None


def test_after_a_very_long_outage_latest_is_still_the_latest(scheduler, clock, monkeypatch) -> None:
    from durable_jobs.schedules import tick as schedule_tick

    monkeypatch.setattr(schedule_tick, "MAX_MISSED", 50)
    scheduler.schedule(
        "minutely", name="tests.scheduled_report", expression="* * * * *",
        payload={"countries": []},
    )  # fmt: skip
    clock.advance(hours=5, seconds=30)  # ~300 missed minutes, more than MAX_MISSED
    scheduler.tick()
    # The latest missed minute, and the one that is on time (30 s ago, within the grace).
    assert sorted(Job.objects.values_list("idempotency_key", flat=True)) == [
        "schedule:minutely:2026-03-02T13:59:00+00:00",
        "schedule:minutely:2026-03-02T14:00:00+00:00",
    ]
    assert scheduler.get("minutely").next_run_at == datetime.datetime(2026, 3, 2, 14, 1, tzinfo=UTC)


def test_a_once_schedule_enqueues_once_then_is_disabled(scheduler, clock) -> None:
    scheduler.schedule_once(
        "launch",
        T0 + datetime.timedelta(minutes=5),
        name="tests.scheduled_report",
        payload={"countries": ["US"]},
    )
    clock.advance(minutes=6)
    assert scheduler.tick().enqueued == 1
    schedule = scheduler.get("launch")
    assert (schedule.enabled, schedule.next_run_at, schedule.run_count) == (False, None, 1)
    clock.advance(days=1)
    assert scheduler.tick().enqueued == 0
    assert Job.objects.count() == 1
    assert scheduler.get("launch").expression == "once:2026-03-02T09:05:00+00:00"


def test_interval_schedule(scheduler, clock) -> None:
    scheduler.schedule_interval(
        "tick", "90s", name="tests.scheduled_report", payload={"countries": []}
    )
    assert scheduler.get("tick").next_run_at == T0 + datetime.timedelta(seconds=90)
    clock.advance(seconds=90)
    scheduler.tick()
    assert scheduler.get("tick").next_run_at == T0 + datetime.timedelta(seconds=180)


def test_pause_keeps_enqueued_jobs_resume_recomputes_and_run_works_while_paused(
    scheduler, clock
) -> None:
    report(scheduler)
    clock.advance(minutes=10)
    scheduler.tick()
    job = Job.objects.get()
    scheduler.pause("report")
    assert Job.objects.get(pk=job.pk).state == State.QUEUED  # not cancelled
    clock.advance(hours=2)
    assert scheduler.tick().enqueued == 0
    manual = scheduler.run("report")  # a paused schedule still runs on demand: one job
    assert Job.objects.count() == 2
    assert manual.idempotency_key == "schedule:report:2026-03-02T11:10:00+00:00"
    resumed = scheduler.resume("report")
    assert resumed.enabled
    assert resumed.next_run_at == datetime.datetime(2026, 3, 2, 11, 20, tzinfo=UTC)
    assert scheduler.remove("report") is True
    assert scheduler.remove("report") is False
    assert Job.objects.count() == 2  # jobs outlive their schedule


def test_the_schedule_reflects_its_jobs_outcome(scheduler, clock) -> None:
    report(scheduler)
    clock.advance(minutes=10)
    scheduler.tick()
    drain()
    schedule = scheduler.get("report")
    assert schedule.last_status == "completed"
    assert schedule.last_duration_ms is not None
    assert schedule.last_duration_ms >= 0


def test_stats(scheduler, clock) -> None:
    report(scheduler)
    scheduler.schedule(
        "other", name="tests.scheduled_report", expression="0 0 * * *", payload={"countries": []}
    )
    scheduler.pause("other")
    clock.advance(minutes=10)
    stats = scheduler.stats()
    assert {k: stats[k] for k in ("total", "active", "paused", "due", "failing", "runs")} == {
        "total": 2,
        "active": 1,
        "paused": 1,
        "due": 1,
        "failing": 0,
        "runs": 0,
    }
    assert stats["enabled"] == 1
    assert stats["next_run"] == {"id": "report", "at": scheduler.get("report").next_run_at}
    scheduler.pause("report")
    assert scheduler.stats()["next_run"] is None


@pytest.mark.django_db(transaction=True)  # the heartbeat reads on its own connection
def test_is_started_says_whether_the_heartbeat_runs() -> None:
    scheduler = Scheduler()
    assert not scheduler.is_started()
    scheduler.start(interval=0.05)
    try:
        assert scheduler.is_started()
    finally:
        scheduler.stop()
    assert not scheduler.is_started()
    serving = threading.Thread(target=scheduler.serve, kwargs={"interval": 0.05}, daemon=True)
    serving.start()
    try:
        wait_for(scheduler.is_started, timeout=10)
    finally:
        scheduler.stop()
        serving.join(10)
    assert not serving.is_alive()
    assert not scheduler.is_started()


def test_preview_gives_the_next_runs(scheduler) -> None:
    scheduler.schedule(
        "weekly",
        name="tests.scheduled_report",
        expression="0 0 * * 0",
        timezone="America/Toronto",
        payload={"countries": []},
    )
    runs = scheduler.preview("weekly", 3)
    assert runs == [
        datetime.datetime(2026, 3, 8, 5, 0, tzinfo=UTC),  # EST
        datetime.datetime(2026, 3, 15, 4, 0, tzinfo=UTC),  # EDT from 2026-03-08
        datetime.datetime(2026, 3, 22, 4, 0, tzinfo=UTC),
    ]


DECLARED = {
    "ott-release-refresh": {
        "cron": "0 0 * * 0",
        "timezone": "America/Toronto",
        "job": "tests.scheduled_report",
        "queue": "emails",
        "payload": {"countries": ["CA", "US"]},
    }
}


def test_settings_schedules_sync_adds_updates_and_removes_only_declared_ones(scheduler) -> None:
    report(scheduler)  # created through the API: never touched by sync
    with override_settings(DURABLE_JOBS={"SCHEDULES": DECLARED}):
        result = sync_schedules()
        assert (result.created, result.updated, result.removed) == (["ott-release-refresh"], [], [])
        declared = Schedule.objects.get(pk="ott-release-refresh")
        assert (declared.queue, declared.declared_in_settings) == ("emails", True)
        scheduler.pause("ott-release-refresh")
        assert sync_schedules().updated == ["ott-release-refresh"]
        assert not Schedule.objects.get(pk="ott-release-refresh").enabled  # the pause is kept
    with override_settings(DURABLE_JOBS={"SCHEDULES": {}}):
        assert sync_schedules().removed == ["ott-release-refresh"]
    assert list(Schedule.objects.values_list("pk", flat=True)) == ["report"]


def test_bad_declared_schedules_fail_the_system_check() -> None:
    from django.core import checks

    bad = {
        "a": {"cron": "* * *", "job": "tests.scheduled_report", "payload": {"countries": []}},
        "b": {"cron": "0 * * * *", "timezone": "Nowhere/Land", "job": "tests.scheduled_report"},
        "c": {"cron": "0 * * * *", "job": "no.such.handler"},
        "d": {"cron": "0 * * * *"},
    }
    with override_settings(DURABLE_JOBS={"SCHEDULES": bad}):
        found = {m.obj: m.id for m in checks.run_checks() if m.id.startswith("durable_jobs.E01")}
    assert found == {
        "SCHEDULES['a']": "durable_jobs.E010",
        "SCHEDULES['b']": "durable_jobs.E010",
        "SCHEDULES['c']": "durable_jobs.E011",
        "SCHEDULES['d']": "durable_jobs.E010",
    }


@pytest.mark.django_db(transaction=True)
def test_a_burst_worker_runs_one_heartbeat_before_draining() -> None:
    from django.utils import timezone

    Scheduler().schedule(
        "now", name="tests.scheduled_report", expression="* * * * *", payload={"countries": []}
    )
    Schedule.objects.filter(pk="now").update(next_run_at=timezone.now())
    Worker("default:2", burst=True).run()
    job = Job.objects.get()
    assert job.state == State.COMPLETED
    assert job.result["schedule_id"] == "now"


def test_both_cron_and_expression_in_settings_is_refused() -> None:
    from durable_jobs.schedules.definitions import spec_from_settings

    with pytest.raises(InvalidSchedule, match="both 'cron' and 'expression'"):
        spec_from_settings(
            "x", {"cron": "0 * * * *", "expression": "@daily", "job": "tests.scheduled_report"}
        )


def test_a_declared_schedule_on_an_unserved_queue_is_warned() -> None:
    from django.core import checks

    declared = {"x": {**DECLARED["ott-release-refresh"], "queue": "imports"}}
    with override_settings(DURABLE_JOBS={"SCHEDULES": declared}):
        messages = [m for m in checks.run_checks() if m.id == "durable_jobs.W002"]
    about_schedules = [m.msg.split(",")[0] for m in messages if m.msg.startswith("Schedule")]
    assert about_schedules == ["Schedule 'x' uses queue 'imports'"]


def test_a_heartbeat_slower_than_the_misfire_grace_is_warned() -> None:
    from django.core import checks

    with override_settings(
        DURABLE_JOBS={"SCHEDULER_INTERVAL": 30, "SCHEDULE_MISFIRE_GRACE_SECONDS": 10}
    ):
        assert "durable_jobs.W003" in {m.id for m in checks.run_checks()}


@pytest.mark.django_db(transaction=True)
def test_a_failing_job_finished_receiver_neither_stops_the_worker_nor_hides_the_outcome() -> None:
    from durable_jobs.signals import job_finished

    def broken(**kwargs) -> None:
        raise RuntimeError("receiver bug")

    job_finished.connect(broken)
    try:
        first = jobs.add.delay(a=1)
        second = jobs.add.delay(a=2)
        Worker("default:1", burst=True, scheduler=False).run()
    finally:
        job_finished.disconnect(broken)
    assert {j.pk: j.state for j in Job.objects.all()} == {
        first.pk: State.COMPLETED,
        second.pk: State.COMPLETED,
    }


@pytest.mark.django_db(transaction=True)
def test_runworker_no_scheduler_leaves_due_schedules_alone() -> None:
    from django.core.management import call_command
    from django.utils import timezone

    Scheduler().schedule(
        "now", name="tests.scheduled_report", expression="* * * * *", payload={"countries": []}
    )
    Schedule.objects.filter(pk="now").update(next_run_at=timezone.now())
    call_command("runworker", "--burst", "--no-scheduler", "--queues", "default")
    assert not Job.objects.exists()
    call_command("runworker", "--burst", "--queues", "default")
    assert Job.objects.get().state == State.COMPLETED


def test_dead_jobs_count_as_failures_and_disable_the_schedule(scheduler, clock) -> None:
    scheduler.schedule(
        "flaky", name="tests.always_fails", expression="*/10 * * * *", max_consecutive_fails=2
    )
    for expected_fails, expected_enabled in ((1, True), (2, False)):
        clock.advance(minutes=10)
        assert scheduler.tick().enqueued == 1
        drain(with_scheduled=True)
        schedule = scheduler.get("flaky")
        assert (schedule.fail_count, schedule.consecutive_fails) == (expected_fails,) * 2
        assert schedule.enabled is expected_enabled
        assert "ValueError: cannot process" in schedule.last_error
    assert schedule.last_status == "disabled"
    clock.advance(minutes=10)
    assert scheduler.tick().enqueued == 0  # disabled: no more occurrences


def test_a_completed_job_resets_the_failures_and_a_cancelled_one_changes_nothing(
    scheduler, clock
) -> None:
    from durable_jobs.actions import cancel_jobs

    report(scheduler, max_consecutive_fails=5)
    Schedule.objects.filter(pk="report").update(consecutive_fails=3, fail_count=3)
    clock.advance(minutes=10)
    scheduler.tick()
    job = Job.objects.get()
    assert scheduler.get("report").consecutive_fails == 3  # enqueued: not yet a success
    cancel_jobs(Job.objects.filter(pk=job.pk))
    assert (scheduler.get("report").consecutive_fails, scheduler.get("report").fail_count) == (
        3,
        3,
    )
    clock.advance(minutes=10)
    scheduler.tick()
    drain()
    schedule = scheduler.get("report")
    assert (schedule.consecutive_fails, schedule.fail_count, schedule.last_status) == (
        0,
        3,
        "completed",
    )
