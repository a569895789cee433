"""What a MySQL or MariaDB database must be for durable_jobs, and which errors are worth a
retry (see ``docs/checks.rst`` and ``docs/howto/mysql.rst``)."""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error, Warning
from django.db import DatabaseError

from durable_jobs.models import Job

#: The oldest servers with ``SKIP LOCKED`` and ``JSON_TABLE``.
MIN_MARIADB = (10, 6)
MIN_MYSQL = (8, 0, 4)

#: Server error codes after which the same transaction, run again, can succeed: a
#: deadlock (its transaction was rolled back) and a lock wait timeout.
DEADLOCK = 1213
LOCK_WAIT_TIMEOUT = 1205
TRANSIENT = frozenset({DEADLOCK, LOCK_WAIT_TIMEOUT})


def server(connection: Any) -> tuple[str, tuple[int, ...]]:
    """``("MariaDB" or "MySQL", version)``."""
    name = "MariaDB" if connection.mysql_is_mariadb else "MySQL"
    return name, tuple(connection.mysql_version)


def check(connection: Any) -> list[CheckMessage]:
    """What the settings say: the connection's character set and isolation level."""
    alias = connection.alias
    messages: list[CheckMessage] = []
    options = connection.settings_dict.get("OPTIONS") or {}
    charset = str(options.get("charset", "utf8mb4")).lower()
    if charset != "utf8mb4":
        messages.append(_not_utf8mb4(alias, f"connects with charset {charset!r}"))
    isolation = str(options.get("isolation_level", "read committed")).lower()
    if isolation in ("repeatable read", "serializable"):
        messages.append(
            Warning(
                f"Database {alias!r} runs transactions at {isolation.upper()}: a worker's "
                "claim then keeps gap locks on the claim index until it commits, so "
                "enqueues into the same queue wait for it, and contention ends in "
                "more deadlocks (retried, but each costs a round).",
                hint=f"Set DATABASES[{alias!r}]['OPTIONS']['isolation_level'] = "
                "'read committed' (Django's default), at least for the workers' settings.",
                id="durable_jobs.W006",
            )
        )
    return messages


def check_server(connection: Any) -> list[CheckMessage]:
    """What the server says: its version, and the job table's character set."""
    alias = connection.alias
    try:
        name, version = server(connection)
    except DatabaseError:
        return []  # not reachable: Django's own database checks say so
    minimum = MIN_MARIADB if name == "MariaDB" else MIN_MYSQL
    if version < minimum:
        return [
            Error(
                f"Database {alias!r} is {name} {'.'.join(map(str, version))}; durable_jobs "
                f"needs {name} {'.'.join(map(str, minimum))} or newer (SELECT ... FOR UPDATE "
                "SKIP LOCKED and JSON_TABLE).",
                hint="Upgrade the server, or keep the jobs on PostgreSQL or SQLite.",
                id="durable_jobs.E007",
            )
        ]
    collation = _table_collation(connection)
    if collation is not None and not collation.startswith("utf8mb4"):
        return [_not_utf8mb4(alias, f"holds the job table in {collation!r}", table=True)]
    return []


def _not_utf8mb4(alias: str, what: str, *, table: bool = False) -> Error:
    fix = (
        f"ALTER TABLE {Job._meta.db_table} CONVERT TO CHARACTER SET utf8mb4 (and the other "
        "durable_jobs tables), and make utf8mb4 the database's default"
        if table
        else f"Set DATABASES[{alias!r}]['OPTIONS']['charset'] = 'utf8mb4' (Django's default)"
    )
    return Error(
        f"Database {alias!r} {what}: job payloads, results and error messages with "
        "characters outside the Basic Multilingual Plane (emoji, many CJK names) would be "
        "refused or mangled.",
        hint=f"{fix}.",
        id="durable_jobs.E022",
    )


def _table_collation(connection: Any) -> str | None:
    """The job table's collation, or the database's default before migrate ran."""
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT table_collation FROM information_schema.tables "
                "WHERE table_schema = DATABASE() AND table_name = %s",
                [Job._meta.db_table],
            )
            row = cursor.fetchone()
            if row is None:
                cursor.execute("SELECT @@collation_database")
                row = cursor.fetchone()
    except DatabaseError:
        return None  # the database is not reachable: the checks that need it say so
    return None if row is None or row[0] is None else str(row[0])


def is_transient(exc: BaseException) -> bool:
    """Whether ``exc`` is a deadlock or lock wait timeout the server reported."""
    cause = exc.__cause__ if exc.__cause__ is not None else exc
    args: tuple[Any, ...] = getattr(cause, "args", ())
    return bool(args) and args[0] in TRANSIENT
