"""The ``DURABLE_JOBS`` settings dict, merged over documented defaults.

Read settings through :func:`get_settings`; the merged result is cached and the
cache is cleared on Django's ``setting_changed`` signal, so ``override_settings``
works in tests. Nothing here ever writes to ``django.conf.settings``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

SETTINGS_NAME = "DURABLE_JOBS"

DEFAULTS: dict[str, Any] = {
    # Queue name -> options. Workers started without ``--queues`` serve all of them.
    # "concurrency" is per worker process; "global_concurrency" caps the queue's leased
    # jobs across every node; "rate" ("30/1m") caps its starts per sliding window.
    "QUEUES": {"default": {"concurrency": 10}},
    # How long a claimed job stays leased without a heartbeat before any node may rescue it.
    "LEASE_SECONDS": 60,
    # How often a worker records that it is alive and renews the leases of its running jobs.
    "HEARTBEAT_SECONDS": 10,
    # How long a stopping worker waits for running jobs before handing them back.
    "SHUTDOWN_GRACE_SECONDS": 30,
    # Seconds between polls for new jobs (PostgreSQL also wakes workers with NOTIFY).
    "POLL_INTERVAL": 1.0,
    # Finished jobs (completed, dead, cancelled) older than this are deleted; None keeps them.
    "PRUNE_AFTER_DAYS": 7,
    # Retries after the first attempt, unless ``@job(max_retries=...)`` says otherwise.
    "DEFAULT_MAX_RETRIES": 10,
    # Default backoff: BACKOFF_BASE_SECONDS * 2**(attempt-1), capped, plus 0-25 % jitter.
    "BACKOFF_BASE_SECONDS": 15,
    "BACKOFF_MAX_SECONDS": 3600,
    # Durable schedules declared in settings, synced to the Schedule table.
    "SCHEDULES": {},
    # Seconds between scheduler heartbeats (each one enqueues the schedules that are due).
    "SCHEDULER_INTERVAL": 1.0,
    # A due occurrence older than this counts as missed (see a schedule's catch_up policy).
    "SCHEDULE_MISFIRE_GRACE_SECONDS": 60,
    # Payload keys containing any of these (case-insensitive) are masked in the admin, CLI and logs.
    "REDACT_KEYS": [
        "password",
        "passwd",
        "secret",
        "token",
        "api_key",
        "apikey",
        "authorization",
        "credential",
        "private_key",
        "cookie",
        "session",
    ],
    # Put SQLite databases in WAL mode so readers never block the writer.
    "SQLITE_WAL": True,
    # Channel used for PostgreSQL LISTEN/NOTIFY wake-ups.
    "NOTIFY_CHANNEL": "durable_jobs",
    # The database alias whose settings the PostgreSQL listener connects with (None: the
    # jobs' own). LISTEN needs a session of its own: behind PgBouncer in transaction
    # mode, point this at an alias that reaches PostgreSQL directly (or a session pool).
    "LISTEN_DATABASE": None,
    # Run the worker's claim and acknowledgement as prepared statements on PostgreSQL.
    # Behind PgBouncer in transaction mode before 1.21 (or without
    # max_prepared_statements), set it to False.
    "PREPARED_STATEMENTS": True,
}


@dataclass(frozen=True)
class QueueOptions:
    name: str
    concurrency: int
    global_concurrency: int | None = None
    rate: str | None = None


@dataclass(frozen=True)
class Settings:
    queues: dict[str, QueueOptions]
    lease_seconds: float
    heartbeat_seconds: float
    shutdown_grace_seconds: float
    poll_interval: float
    prune_after_days: float | None
    default_max_retries: int
    backoff_base_seconds: float
    backoff_max_seconds: float
    schedules: Mapping[str, Any]
    scheduler_interval: float
    schedule_misfire_grace_seconds: float
    redact_keys: tuple[str, ...]
    sqlite_wal: bool
    notify_channel: str
    listen_database: str | None
    prepared_statements: bool
    raw: Mapping[str, Any] = field(repr=False, default_factory=dict)


def user_settings() -> dict[str, Any]:
    """The project's ``DURABLE_JOBS`` dict, unmerged (``{}`` when absent)."""
    value = getattr(settings, SETTINGS_NAME, {})
    return value if isinstance(value, dict) else {}


def merged_settings() -> dict[str, Any]:
    return {**DEFAULTS, **user_settings()}


@functools.cache
def get_settings() -> Settings:
    """The validated settings. ``manage.py check`` reports problems with IDs first."""
    raw = merged_settings()
    queues = {
        name: QueueOptions(
            name=name,
            concurrency=int((opts or {}).get("concurrency", 10)),
            global_concurrency=(opts or {}).get("global_concurrency"),
            rate=(opts or {}).get("rate"),
        )
        for name, opts in raw["QUEUES"].items()
    }
    prune = raw["PRUNE_AFTER_DAYS"]
    return Settings(
        queues=queues,
        lease_seconds=float(raw["LEASE_SECONDS"]),
        heartbeat_seconds=float(raw["HEARTBEAT_SECONDS"]),
        shutdown_grace_seconds=float(raw["SHUTDOWN_GRACE_SECONDS"]),
        poll_interval=float(raw["POLL_INTERVAL"]),
        prune_after_days=None if prune is None else float(prune),
        default_max_retries=int(raw["DEFAULT_MAX_RETRIES"]),
        backoff_base_seconds=float(raw["BACKOFF_BASE_SECONDS"]),
        backoff_max_seconds=float(raw["BACKOFF_MAX_SECONDS"]),
        schedules=raw["SCHEDULES"],
        scheduler_interval=float(raw["SCHEDULER_INTERVAL"]),
        schedule_misfire_grace_seconds=float(raw["SCHEDULE_MISFIRE_GRACE_SECONDS"]),
        redact_keys=tuple(k.lower() for k in raw["REDACT_KEYS"]),
        sqlite_wal=bool(raw["SQLITE_WAL"]),
        notify_channel=str(raw["NOTIFY_CHANNEL"]),
        listen_database=raw["LISTEN_DATABASE"],
        prepared_statements=bool(raw["PREPARED_STATEMENTS"]),
        raw=raw,
    )


@receiver(setting_changed)
def _clear_cache(*, setting: str, **kwargs: Any) -> None:
    if setting == SETTINGS_NAME:
        get_settings.cache_clear()
