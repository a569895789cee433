"""Each rule is written once and holds everywhere: settings, queue names, backoff bounds."""

from __future__ import annotations

import re
from io import StringIO
from pathlib import Path

import pytest
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command
from django.test import override_settings

import durable_jobs
from durable_jobs import EnqueueError, Scheduler, job
from durable_jobs.backoff import exponential
from durable_jobs.conf import DEFAULTS, Settings, get_settings
from durable_jobs.limits import MAX_SECONDS
from durable_jobs.models import Job
from durable_jobs.schedules.expressions import InvalidSchedule
from tests.testapp import jobs

pytestmark = pytest.mark.django_db

SETTINGS_DOCS = Path(__file__).resolve().parent.parent / "docs" / "reference" / "settings.rst"


def check_ids(value: dict) -> set[str]:
    with override_settings(DURABLE_JOBS=value):
        return {m.id for m in checks.run_checks() if m.id and m.id.startswith("durable_jobs.E")}


def test_every_setting_comes_from_the_one_table_and_is_documented_with_its_default() -> None:
    docs = SETTINGS_DOCS.read_text()
    keys = [setting.key for setting in Settings.table()]
    assert keys == list(DEFAULTS)
    for setting in Settings.table():
        section = docs.split(f".. _setting-{setting.key}:", 1)[1]
        documented = re.search(r"Default: ``(.*?)``", section, re.S)
        assert documented is not None, setting.key
        if not isinstance(setting.default, list | dict) or not setting.default:
            assert documented.group(1) == repr(setting.default).replace("'", '"'), setting.key


def test_a_bad_value_is_a_check_error_and_a_clear_error_where_it_is_read() -> None:
    assert check_ids({"LEASE_SECONDS": "fast"}) == {"durable_jobs.E004"}
    with override_settings(DURABLE_JOBS={"LEASE_SECONDS": "fast"}):
        assert get_settings().poll_interval == 1.0  # the others still read
        with pytest.raises(ImproperlyConfigured, match=r"LEASE_SECONDS must be a number > 0.*E004"):
            get_settings().lease_seconds  # noqa: B018


def test_both_boolean_settings_must_be_booleans() -> None:
    assert check_ids({"SQLITE_WAL": "yes"}) == {"durable_jobs.E018"}
    assert check_ids({"PREPARED_STATEMENTS": 1}) == {"durable_jobs.E018"}
    assert check_ids({"SQLITE_WAL": False, "PREPARED_STATEMENTS": False}) == set()


@pytest.mark.parametrize("name", ["a:b", "a,b", "", "x" * 101])
def test_a_queue_name_is_refused_the_same_way_everywhere(name: str) -> None:
    with pytest.raises(EnqueueError, match="queue must be 1-100 characters without ':' or ','"):
        job(queue=name)(lambda: None)
    with pytest.raises(EnqueueError, match="queue must be 1-100 characters"):
        jobs.add.using(queue=name).delay(a=1)
    with pytest.raises(InvalidSchedule, match="queue name must be 1-100 characters"):
        Scheduler().schedule("s", name="tests.add", interval="5m", queue=name, payload={"a": 1})
    assert check_ids({"QUEUES": {"default": {}, name: {}}}) == {"durable_jobs.E003"}
    with pytest.raises(CommandError, match="is not a queue name"):
        call_command("jobs", "pause", name, stdout=StringIO())
    assert not Job.objects.exists()


def test_a_queue_name_of_the_columns_length_is_accepted() -> None:
    longest = "q" * Job._meta.get_field("queue").max_length
    assert jobs.add.using(queue=longest).delay(a=1).queue == longest
    assert durable_jobs.enqueue("tests.add", {"a": 2}, queue=longest).queue == longest


def test_the_default_backoff_stays_finite_and_capped_however_many_attempts() -> None:
    cap = get_settings().backoff_max_seconds
    for attempt in (1, 1025, 10**6):
        assert 0 <= exponential(attempt) <= cap * 1.25 <= MAX_SECONDS
