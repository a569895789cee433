"""The ``DURABLE_JOBS`` settings: one table, from which the defaults, the typed values and
their system checks all come.

Each key is declared once, as a :class:`Setting` of :class:`Settings`: its name, its
default, its kind (type, bounds and conversion, see :mod:`durable_jobs.conf.kinds`) and
the id of the check that reports a bad value. Read settings through
:func:`get_settings`; the result is cached and the cache is cleared on Django's
``setting_changed`` signal, so ``override_settings`` works in tests. Reading a value
that breaks its rule raises ``ImproperlyConfigured`` with the message ``manage.py
check`` gives for it. Nothing here writes to ``django.conf.settings``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from typing import Any, Generic, TypeVar, overload

from django.conf import settings as django_settings
from django.core.checks import CheckMessage, Error, Warning
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

from durable_jobs.conf.kinds import (
    Alias,
    Bytes,
    Channel,
    Days,
    Declarations,
    DottedPaths,
    ExtraFlag,
    Flag,
    Fragments,
    Kind,
    OptionalFlag,
    QueueOptions,
    Queues,
    Retries,
    Seconds,
)

__all__ = ["DEFAULTS", "QueueOptions", "Settings", "check", "get_settings"]

SETTINGS_NAME = "DURABLE_JOBS"
HINT_DOCS = "See the settings reference in the durable_jobs documentation."
T = TypeVar("T")


class Setting(Generic[T]):
    """One key of ``DURABLE_JOBS``; on a :class:`Settings`, its checked, typed value."""

    def __init__(
        self, key: str, default: Any, kind: Kind[T], check_id: str, hint: str = HINT_DOCS
    ) -> None:
        self.key = key
        self.default = default
        self.kind = kind
        self.check_id = f"durable_jobs.{check_id}"
        self.hint = hint

    def __set_name__(self, owner: type, name: str) -> None:
        self.attribute = name

    @overload
    def __get__(self, settings: None, owner: type) -> Setting[T]: ...

    @overload
    def __get__(self, settings: Settings, owner: type) -> T: ...

    def __get__(self, settings: Settings | None, owner: type) -> Setting[T] | T:
        if settings is None:
            return self
        value = settings.raw[self.key]
        problems = self.kind.problems(self.key, value)
        if problems:
            raise ImproperlyConfigured(
                f"{problems[0].message} ({problems[0].id or self.check_id}; "
                "`manage.py check` lists every problem)"
            )
        converted = self.kind.convert(value)
        settings.__dict__[self.attribute] = converted  # read once per Settings
        return converted

    def check(self, value: Any) -> list[CheckMessage]:
        return [
            Error(p.message, hint=p.hint or self.hint, id=p.id or self.check_id)
            for p in self.kind.problems(self.key, value)
        ]


class Settings:
    """The settings, merged over their defaults: one attribute per key."""

    # Queue name -> options. Workers started without ``--queues`` serve all of them.
    # "concurrency" is per worker process; "global_concurrency" caps the queue's leased
    # jobs across every node; "rate" ("30/1m") caps its starts per sliding window.
    queues = Setting("QUEUES", {"default": {"concurrency": 10}}, Queues(), "E003")
    # How long a claimed job stays leased without a heartbeat before any node may rescue it.
    lease_seconds = Setting("LEASE_SECONDS", 60, Seconds(), "E004")
    # How often a worker records that it is alive and renews the leases of its running jobs.
    heartbeat_seconds = Setting("HEARTBEAT_SECONDS", 10, Seconds(), "E004")
    # How long a stopping worker waits for running jobs before handing them back.
    shutdown_grace_seconds = Setting("SHUTDOWN_GRACE_SECONDS", 30, Seconds(zero=True), "E004")
    # Seconds between polls for new jobs (PostgreSQL also wakes workers with NOTIFY).
    poll_interval = Setting("POLL_INTERVAL", 1.0, Seconds(), "E004")
    # Finished jobs (completed, dead, cancelled) older than this are deleted; None keeps them.
    prune_after_days = Setting(
        "PRUNE_AFTER_DAYS", 7, Days(), "E004", hint="None keeps finished jobs forever."
    )
    # Retries after the first attempt, unless ``@job(max_retries=...)`` says otherwise.
    default_max_retries = Setting("DEFAULT_MAX_RETRIES", 10, Retries(), "E004")
    # Default backoff: BACKOFF_BASE_SECONDS * 2**(attempt-1), capped, plus 0-25 % jitter.
    backoff_base_seconds = Setting("BACKOFF_BASE_SECONDS", 15, Seconds(zero=True), "E004")
    backoff_max_seconds = Setting("BACKOFF_MAX_SECONDS", 3600, Seconds(zero=True), "E004")
    # The largest body the HTTP request endpoint reads (413 above it): a request is checked
    # before any write, but parsing a huge one would still cost every worker's time.
    http_max_body_bytes = Setting(
        "HTTP_MAX_BODY_BYTES", 65536, Bytes(limit=2**31 - 1), "E004", hint="For example 65536."
    )
    # Durable schedules declared in settings, synced to the Schedule table.
    schedules = Setting(
        "SCHEDULES",
        {},
        Declarations("schedule id -> definition"),
        "E010",
        hint='For example {"nightly": {"cron": "0 3 * * *", "job": "app.task"}}.',
    )
    # Seconds between schedule ticks (each one enqueues the schedules that are due).
    scheduler_interval = Setting("SCHEDULER_INTERVAL", 1.0, Seconds(), "E004")
    # A due occurrence older than this counts as missed (see a schedule's catch_up policy).
    schedule_misfire_grace_seconds = Setting(
        "SCHEDULE_MISFIRE_GRACE_SECONDS", 60, Seconds(zero=True), "E004"
    )
    # More words whose keys are masked in the admin, the CLI and the logs, beside the
    # built-in durable_jobs.redaction.SECRET_WORDS (matched ignoring case and separators).
    redact_keys = Setting(
        "REDACT_KEYS",
        [],
        Fragments(),
        "E005",
        hint='For example "REDACT_KEYS": ["iban", "ssn"].',
    )
    # Put SQLite databases in WAL mode so readers never block the writer.
    sqlite_wal = Setting(
        "SQLITE_WAL", True, Flag(), "E018", hint="False leaves SQLite's journal mode alone."
    )
    # Channel used for PostgreSQL LISTEN/NOTIFY wake-ups.
    notify_channel = Setting(
        "NOTIFY_CHANNEL",
        "durable_jobs",
        Channel(),
        "E009",
        hint='The PostgreSQL LISTEN/NOTIFY channel, for example "durable_jobs".',
    )
    # The database alias whose settings the PostgreSQL listener connects with (None: the
    # jobs' own). LISTEN needs a session of its own: behind PgBouncer in transaction
    # mode, point this at an alias that reaches PostgreSQL directly (or a session pool).
    listen_database = Setting(
        "LISTEN_DATABASE",
        None,
        Alias(),
        "E017",
        hint="The alias whose settings the workers' LISTEN connection uses, for example one "
        "that reaches PostgreSQL directly rather than through PgBouncer.",
    )
    # Run the worker's claim and outcome statements as prepared statements on PostgreSQL.
    # Behind PgBouncer in transaction mode before 1.21 (or without max_prepared_statements),
    # set it to False.
    prepared_statements = Setting(
        "PREPARED_STATEMENTS",
        True,
        Flag(),
        "E018",
        hint="False only behind a pooler that cannot keep prepared statements (PgBouncer in "
        "transaction mode before 1.21).",
    )
    # False: the worker's own transactions (each loop pass's outcome writes and claims, and
    # a claim in a transaction of its own) commit with PostgreSQL's synchronous_commit =
    # off, not waiting for the WAL flush. A database crash may then lose the last fraction
    # of a second of them: a claim lost runs its job again (still at least once), an
    # outcome lost leaves the job to rescue.
    # Enqueues are never affected: they commit in the project's own transactions.
    synchronous_commit = Setting(
        "SYNCHRONOUS_COMMIT",
        True,
        Flag(),
        "E018",
        hint="False trades durability of the workers' last claims and outcomes in a "
        "database crash for shorter passes; enqueues stay durable either way.",
    )

    # Execution middleware: dotted paths to factories ``factory(call_next)`` returning a
    # ``callable(context)``, wrapped around every attempt in this order (the first is
    # outermost), like Django's MIDDLEWARE.
    middleware = Setting(
        "MIDDLEWARE",
        [],
        DottedPaths(),
        "E020",
        hint='For example "MIDDLEWARE": ["myproject.jobs.sentry_scope"].',
    )
    # Trace enqueues and attempts with OpenTelemetry (needs the "opentelemetry" extra).
    opentelemetry = Setting(
        "OPENTELEMETRY",
        False,
        ExtraFlag("opentelemetry.trace", "opentelemetry-api"),
        "E021",
        hint='pip install "django-durable-jobs[opentelemetry]".',
    )
    # Serve the Prometheus metrics view to anyone, not only to staff users.
    metrics_public = Setting("METRICS_PUBLIC", False, Flag(), "E018")
    # Run a worker and the scheduler inside ``manage.py runserver`` (development only).
    # None follows settings.DEBUG.
    inline_worker = Setting(
        "INLINE_WORKER", None, OptionalFlag(), "E018", hint="True, False, or None (follow DEBUG)."
    )

    def __init__(self, raw: Mapping[str, Any]) -> None:
        #: The project's DURABLE_JOBS merged over the defaults, as given.
        self.raw = raw

    @classmethod
    def table(cls) -> Iterator[Setting[Any]]:
        """Every setting, in the order above."""
        for value in vars(cls).values():
            if isinstance(value, Setting):
                yield value


#: The default of every key of ``DURABLE_JOBS``.
DEFAULTS: dict[str, Any] = {setting.key: setting.default for setting in Settings.table()}


def user_settings() -> dict[str, Any]:
    """The project's ``DURABLE_JOBS`` dict, unmerged (``{}`` when absent or not a dict)."""
    value = getattr(django_settings, SETTINGS_NAME, {})
    return value if isinstance(value, dict) else {}


def merged_settings() -> dict[str, Any]:
    return {**DEFAULTS, **user_settings()}


@functools.cache
def get_settings() -> Settings:
    """The settings, each checked when first read. ``manage.py check`` reports every
    problem at once, with its ID."""
    return Settings(merged_settings())


@receiver(setting_changed)
def _clear_cache(*, setting: str, **kwargs: Any) -> None:
    if setting == SETTINGS_NAME:
        get_settings.cache_clear()


def check() -> list[CheckMessage]:
    """The settings' checks: the dict itself, each key, and the keys that depend on each
    other. Never raises, whatever the settings hold."""
    raw = getattr(django_settings, SETTINGS_NAME, {})
    if not isinstance(raw, dict):
        return [
            Error(
                f"{SETTINGS_NAME} must be a dict, not {type(raw).__name__}.",
                hint=HINT_DOCS,
                id="durable_jobs.E001",
            )
        ]
    messages: list[CheckMessage] = []
    unknown = sorted(set(raw) - set(DEFAULTS))
    if unknown:
        messages.append(
            Error(
                f"{SETTINGS_NAME} has unknown keys: {', '.join(unknown)}.",
                hint=f"Valid keys: {', '.join(sorted(DEFAULTS))}.",
                id="durable_jobs.E002",
            )
        )
    merged = merged_settings()
    refused = set()
    for setting in Settings.table():
        found = setting.check(merged[setting.key])
        if found:
            refused.add(setting.key)
        messages += found
    if not refused & set(_TOGETHER):
        messages += _check_together(merged)
    if not django_settings.USE_TZ:
        messages.append(
            Error(
                "durable_jobs needs USE_TZ = True: job times are aware datetimes in UTC.",
                hint="Set USE_TZ = True in your settings.",
                id="durable_jobs.E006",
            )
        )
    return messages


#: The settings :func:`_check_together` compares.
_TOGETHER = (
    "SCHEDULER_INTERVAL",
    "SCHEDULE_MISFIRE_GRACE_SECONDS",
    "LEASE_SECONDS",
    "HEARTBEAT_SECONDS",
)


def _check_together(merged: dict[str, Any]) -> list[CheckMessage]:
    """Settings valid one by one, but not together."""
    messages: list[CheckMessage] = []
    tick, grace = merged["SCHEDULER_INTERVAL"], merged["SCHEDULE_MISFIRE_GRACE_SECONDS"]
    if tick >= grace > 0:
        messages.append(
            Warning(
                f"SCHEDULER_INTERVAL ({tick}) is not shorter than SCHEDULE_MISFIRE_GRACE_SECONDS "
                f"({grace}): occurrences may count as missed, and catch_up='skip' schedules "
                "drop them.",
                hint="Keep the grace several heartbeats long (defaults: 1 s and 60 s).",
                id="durable_jobs.W003",
            )
        )
    lease, beat = merged["LEASE_SECONDS"], merged["HEARTBEAT_SECONDS"]
    if beat * 2 > lease:
        messages.append(
            Error(
                f"HEARTBEAT_SECONDS ({beat}) must be positive and at most half of "
                f"LEASE_SECONDS ({lease}), or running jobs lose their leases between heartbeats.",
                hint="For example LEASE_SECONDS 60 with HEARTBEAT_SECONDS 10.",
                id="durable_jobs.E004",
            )
        )
    return messages
