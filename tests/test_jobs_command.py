"""``manage.py jobs``: reads with --json, writes through the state machine, guarded bulk acts."""

from __future__ import annotations

import json

import pytest
from django.core.management import CommandError

from durable_jobs.models import Job
from durable_jobs.states import State
from durable_jobs.testing import drain
from tests.conftest import command_output
from tests.testapp import jobs

pytestmark = pytest.mark.django_db


def run(*args: str) -> str:
    return command_output("jobs", *args)


def test_stats_list_show_and_errors() -> None:
    jobs.add.delay(a=1)
    jobs.always_fails.delay()
    secret = jobs.sync_account.using(queue="emails").delay(account="acme", api_token="s3cr3t")
    drain()
    stats = json.loads(run("stats", "--json"))
    assert stats["queues"]["default"]["completed"] == 1
    assert stats["queues"]["default"]["retrying"] == 1
    assert stats["queues"]["emails"]["completed"] == 1
    assert set(stats["nodes"]) == {"live", "stale"}
    listing = json.loads(run("list", "--json", "--state", "retrying"))
    assert [j["name"] for j in listing] == ["tests.always_fails"]
    assert "tests.add" in run()  # list is the default, as an aligned table
    shown = json.loads(run("show", str(secret.pk), "--json"))
    assert shown["payload"] == {"account": "acme", "api_token": "********"}
    assert "s3cr3t" not in run("show", str(secret.pk))
    assert shown["attempts_detail"][0]["outcome"] == "completed"
    (group,) = json.loads(run("errors", "--json"))
    assert group["error_class"] == "builtins.ValueError"
    assert group["root_cause"] == "KeyError: 'missing'"
    assert group["count"] == 1


def test_retry_cancel_discard_delete_by_id() -> None:
    job = jobs.discarder.delay()
    drain()
    assert "retry: 1 changed." in run("retry", str(job.pk), "--yes")
    assert Job.objects.get(pk=job.pk).state == State.QUEUED
    assert "cancel: 1 changed." in run("cancel", str(job.pk), "--yes")
    assert "discard: 0 changed, 1 skipped" in run("discard", str(job.pk), "--yes")
    assert "delete: 1 changed." in run("delete", str(job.pk), "--yes")
    assert not Job.objects.exists()


def test_bulk_actions_need_a_filter_and_confirmation() -> None:
    for i in range(3):
        jobs.add.delay(a=i)
    with pytest.raises(CommandError, match="needs at least one filter"):
        run("cancel", "--all", "--yes")
    with pytest.raises(CommandError, match="without --yes"):
        run("cancel", "--all", "--state", "queued")  # no terminal to ask on
    assert "cancel: 3 changed." in run("cancel", "--all", "--state", "queued", "--yes")


def test_bad_input_is_a_clear_error() -> None:
    with pytest.raises(CommandError, match="No job with id 999"):
        run("show", "999")
    with pytest.raises(CommandError):
        run("list", "--state", "running")  # not a state
    with pytest.raises(CommandError, match="Give job ids, or --all"):
        run("retry", "--yes")


def test_prune() -> None:
    import datetime

    from django.utils import timezone

    job = jobs.add.delay(a=1)
    drain()
    Job.objects.filter(pk=job.pk).update(finished_at=timezone.now() - datetime.timedelta(days=30))
    assert "Pruned 1 finished jobs." in run("prune", "--days", "7")
