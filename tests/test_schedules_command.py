"""``manage.py schedules``: every read has --json; writes validate their input."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest
from django.core.management import CommandError

from durable_jobs import Scheduler
from durable_jobs.models import Job, Schedule
from tests.conftest import ROOT, command_output, wait_for

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    return command_output("schedules", *args)


def add_weekly() -> None:
    run(
        "add", "weekly", "--cron", "0 0 * * 0", "--timezone", "America/Toronto",
        "--job", "tests.scheduled_report", "--payload", '{"countries": ["CA", "US"]}',
    )  # fmt: skip


def test_add_list_show_and_stats() -> None:
    add_weekly()
    listing = json.loads(run("list", "--json"))
    assert [s["id"] for s in listing] == ["weekly"]
    assert listing[0]["payload"] == {"countries": ["CA", "US"]}
    assert set(listing[0]) >= {"expression", "timezone", "job", "next_run_at", "last_status"}
    shown = json.loads(run("show", "weekly", "--json"))
    assert len(shown["upcoming"]) == 5
    assert shown["upcoming"][0]["local"].endswith(("-05:00", "-04:00"))
    text = run("show", "weekly")
    assert "Next 5 runs:" in text
    assert "America/Toronto" in text
    assert "weekly" in run()  # list is the default action
    stats = json.loads(run("stats", "--json"))
    assert (stats["total"], stats["active"]) == (1, 1)


def test_secret_looking_payload_values_are_masked() -> None:
    run(
        "add", "sync", "--every", "1h", "--job", "tests.sync_account",
        "--payload", '{"account": "acme", "api_token": "s3cr3t"}',
    )  # fmt: skip
    for output in (run("list", "--json"), run("show", "sync"), run("show", "sync", "--json")):
        assert "s3cr3t" not in output
    assert json.loads(run("list", "--json"))[0]["payload"] == {
        "account": "acme",
        "api_token": "********",
    }


def test_pause_resume_run_remove() -> None:
    add_weekly()
    assert "Paused weekly" in run("pause", "weekly")
    assert not Schedule.objects.get().enabled
    assert "Resumed weekly" in run("resume", "weekly")
    assert "Enqueued job" in run("run", "weekly")
    assert Job.objects.get().meta["schedule"]["id"] == "weekly"
    assert "Removed weekly" in run("remove", "weekly")
    with pytest.raises(CommandError, match="No schedule with id 'weekly'"):
        run("remove", "weekly")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cron", "0 0 * *", "--job", "tests.scheduled_report"], "has 4 fields"),
        (["--every", "0m", "--job", "tests.scheduled_report"], "longer than zero"),
        (["--cron", "0 0 * * *", "--job", "nope.nope"], "No job handler is registered"),
        (["--cron", "0 0 * * *", "--job", "tests.scheduled_report", "--payload", "{oops"],
         "not valid JSON"),
        (["--cron", "0 0 * * *", "--job", "tests.scheduled_report", "--timezone", "X/Y",
          "--payload", '{"countries": []}'], "Unknown timezone"),
        (["--once", "2026-01-01 10:00", "--job", "tests.scheduled_report",
          "--payload", '{"countries": []}'], "aware datetime"),
    ],
)  # fmt: skip
def test_add_refuses_bad_input_with_a_clear_error(args, message) -> None:
    with pytest.raises(CommandError, match=message):
        run("add", "bad", *args)
    assert not Schedule.objects.exists()


def test_show_unknown_id() -> None:
    with pytest.raises(CommandError, match="No schedule with id 'ghost'"):
        run("show", "ghost")


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)
def test_serve_runs_the_heartbeat_and_stops_on_sigterm(worker_processes) -> None:
    from django.utils import timezone

    Scheduler().schedule(
        "every-second", name="tests.scheduled_report", expression="* * * * * *",
        payload={"countries": []},
    )  # fmt: skip
    Schedule.objects.update(next_run_at=timezone.now())
    proc = subprocess.Popen(
        [sys.executable, "-m", "django", "schedules", "serve", "--interval", "0.2"],
        cwd=ROOT,
        env=worker_processes.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    worker_processes.procs.append(proc)
    wait_for(lambda: Job.objects.count() >= 2, timeout=30)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0
    count = Job.objects.count()
    time.sleep(1.5)
    assert Job.objects.count() == count  # stopped
    assert len(set(Job.objects.values_list("idempotency_key", flat=True))) == count
