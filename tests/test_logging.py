"""Structured lifecycle logs and the JSON formatter."""

from __future__ import annotations

import json
import logging

import pytest

from durable_jobs.logging import JSONFormatter
from durable_jobs.models import Attempt
from durable_jobs.testing import drain
from tests.testapp import jobs

pytestmark = pytest.mark.django_db


def test_lifecycle_records_carry_the_job_fields(caplog) -> None:
    caplog.set_level(logging.INFO, logger="durable_jobs")
    job = jobs.always_fails.delay()
    drain()
    (record,) = [r for r in caplog.records if getattr(r, "event", None) == "retried"]
    assert record.job_id == job.pk
    assert record.queue == "default"
    assert record.job_name == "tests.always_fails"  # LogRecord.name is the logger's
    assert record.attempt == 1
    assert record.state == "retrying"
    assert record.node == "test-drain"
    assert record.duration_ms >= 0
    assert record.error.startswith("ValueError: cannot process")


def test_json_formatter_prints_one_parseable_object_per_line(json_lines) -> None:
    job = jobs.add.delay(a=1)
    drain()
    lines = json_lines()
    assert [line["event"] for line in lines] == ["enqueued", "completed"]
    for line in lines:
        assert line["job_id"] == job.pk
        assert line["name"] == "tests.add"
        assert line["queue"] == "default"
        assert {"attempt", "state", "node", "duration_ms", "error", "time", "level"} <= set(line)
    assert lines[-1]["state"] == "completed"
    assert lines[-1]["logger"] == "durable_jobs"


def test_context_logger_stamps_job_fields_and_keeps_lines_on_the_attempt(json_lines) -> None:
    job = jobs.logs.delay()
    drain()
    handler_lines = [line for line in json_lines() if line["logger"] == "durable_jobs.job"]
    assert [line["message"] for line in handler_lines] == ["hello from the handler", "careful"]
    assert all(line["job_id"] == job.pk and line["attempt"] == 1 for line in handler_lines)
    attempt = Attempt.objects.get(job=job)
    assert "INFO hello from the handler" in attempt.log
    assert "WARNING careful" in attempt.log
    job.refresh_from_db()
    assert job.progress == 100.0


def test_exceptions_are_formatted_into_the_json_line() -> None:
    record = logging.LogRecord("x", logging.ERROR, __file__, 1, "boom", None, None)
    try:
        raise RuntimeError("bad")
    except RuntimeError:
        import sys

        record.exc_info = sys.exc_info()
    data = json.loads(JSONFormatter().format(record))
    assert "RuntimeError: bad" in data["exc_info"]


def test_secret_looking_payload_keys_are_masked_in_logs(json_lines) -> None:
    jobs.add.delay(a={"user": "ann", "password": "hunter2", "nested": {"api_key": "k"}})
    (line,) = [line for line in json_lines() if line["event"] == "enqueued"]
    assert line["payload"] == {
        "a": {"user": "ann", "password": "********", "nested": {"api_key": "********"}}
    }
    assert "hunter2" not in json.dumps(json_lines())
