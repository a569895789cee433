"""System checks report bad settings with stable IDs."""

from __future__ import annotations

import pytest
from django.core import checks
from django.test import override_settings

from durable_jobs.conf import get_settings


def ids(settings_value) -> list[str]:
    """The IDs reported for ``settings_value`` (W002, about the test handlers' queues, aside)."""
    with override_settings(DURABLE_JOBS=settings_value):
        return sorted(
            {
                m.id
                for m in checks.run_checks()
                if m.id.startswith("durable_jobs.") and m.id != "durable_jobs.W002"
            }
        )


def test_the_test_settings_pass() -> None:
    assert [m for m in checks.run_checks() if m.id.startswith("durable_jobs.")] == []


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ([], ["durable_jobs.E001"]),
        ({"QUEUE": {}}, ["durable_jobs.E002"]),
        ({"QUEUES": {}}, ["durable_jobs.E003"]),
        ({"QUEUES": {"default": {"concurrency": 0}}}, ["durable_jobs.E003"]),
        ({"QUEUES": {"default": {}, "a:b": {}}}, ["durable_jobs.E003"]),
        ({"QUEUES": {"default": {"rate": "lots"}}}, ["durable_jobs.E013"]),
        (
            {"QUEUES": {"default": {"rate": "30/1m", "global_concurrency": 0}}},
            ["durable_jobs.E012"],
        ),
        ({"QUEUES": {"default": {"concurency": 3}}}, ["durable_jobs.E012"]),
        ({"LEASE_SECONDS": 10, "HEARTBEAT_SECONDS": 8}, ["durable_jobs.E004"]),
        ({"POLL_INTERVAL": "fast"}, ["durable_jobs.E004"]),
        ({"PRUNE_AFTER_DAYS": 0}, ["durable_jobs.E004"]),
        ({"DEFAULT_MAX_RETRIES": -1}, ["durable_jobs.E004"]),
        ({"HTTP_MAX_BODY_BYTES": 0}, ["durable_jobs.E004"]),
        ({"HTTP_MAX_BODY_BYTES": "64k"}, ["durable_jobs.E004"]),
        ({"HTTP_MAX_BODY_BYTES": True}, ["durable_jobs.E004"]),
        ({"HTTP_MAX_BODY_BYTES": 1024}, []),
        ({"REDACT_KEYS": "password"}, ["durable_jobs.E005"]),
    ],
)
def test_bad_settings_fail_check(value, expected) -> None:
    assert ids(value) == expected


def test_use_tz_is_required() -> None:
    with override_settings(USE_TZ=False):
        assert "durable_jobs.E006" in {m.id for m in checks.run_checks()}


def test_sqlite_without_immediate_transactions_is_warned(settings) -> None:
    from django.db import connection

    if connection.vendor != "sqlite":
        pytest.skip("a SQLite-only warning")
    options = connection.settings_dict["OPTIONS"]
    saved = options.pop("transaction_mode")
    try:
        assert "durable_jobs.W001" in {m.id for m in checks.run_checks()}
    finally:
        options["transaction_mode"] = saved


def test_settings_cache_follows_override_settings() -> None:
    assert get_settings().lease_seconds == 30
    with override_settings(DURABLE_JOBS={"LEASE_SECONDS": 99}):
        assert get_settings().lease_seconds == 99
        assert get_settings().poll_interval == 1.0  # the documented default fills the gaps
    assert get_settings().lease_seconds == 30


def test_a_handler_on_an_unconfigured_queue_is_warned() -> None:
    from durable_jobs import job
    from durable_jobs.registry import _handlers

    @job(queue="nowhere", name="tests.nowhere")
    def nowhere() -> None:
        pass

    try:
        messages = [m for m in checks.run_checks() if m.id == "durable_jobs.W002"]
        assert len(messages) == 1
        assert "'tests.nowhere' uses queue 'nowhere'" in messages[0].msg
    finally:
        del _handlers["tests.nowhere"]


def test_queue_options_may_be_empty() -> None:
    assert ids({"QUEUES": {"default": None, "emails": {}}}) == []


def test_poll_interval_must_be_positive() -> None:
    assert ids({"POLL_INTERVAL": 0}) == ["durable_jobs.E004"]
    assert ids({"SHUTDOWN_GRACE_SECONDS": 0}) == []


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"LISTEN_DATABASE": "nowhere"}, ["durable_jobs.E017"]),
        ({"LISTEN_DATABASE": 1}, ["durable_jobs.E017"]),
        ({"PREPARED_STATEMENTS": "yes"}, ["durable_jobs.E018"]),
        ({"LISTEN_DATABASE": None, "PREPARED_STATEMENTS": False}, []),
        ({"SYNCHRONOUS_COMMIT": "off"}, ["durable_jobs.E018"]),
        ({"SYNCHRONOUS_COMMIT": False}, []),
    ],
)
def test_bad_listener_and_statement_settings_fail_check(value, expected) -> None:
    assert ids(value) == expected


def test_the_listen_database_must_be_postgresql(vendor) -> None:
    expected = [] if vendor == "postgresql" else ["durable_jobs.E017"]
    assert ids({"LISTEN_DATABASE": "default"}) == expected
