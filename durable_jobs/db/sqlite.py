"""SQLite: claims inside one ``BEGIN IMMEDIATE`` transaction, WAL, and a busy timeout.

SQLite has one writer at a time. Taking the write lock at ``BEGIN`` (IMMEDIATE)
rather than at the first write means a transaction that reads then writes can wait
for the lock (the busy timeout) instead of failing with "database is locked" when
another connection got there first.
"""

from __future__ import annotations

import contextlib
import functools
import json
import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.utils import timezone

from durable_jobs.db.base import (
    ATTEMPT_COLUMNS,
    KEY_FILTER,
    LEASE_SET,
    SETTLE_COLUMNS,
    SETTLE_SET,
    Backend,
    Claim,
)

if TYPE_CHECKING:
    from durable_jobs.models import Job
    from durable_jobs.states import Settlement

# Inside the IMMEDIATE transaction no other connection can write, so selecting the
# ids and then leasing them cannot race.
PICK_SQL = """
SELECT id, concurrency_key, concurrency_limit FROM {table} AS job
WHERE queue = %(queue)s
  AND state IN ({sources})
  AND available_at <= %(now)s
  {guard}
  {key_filter}
ORDER BY priority DESC, available_at, id
LIMIT {limit}
"""

LEASE_SQL = """
UPDATE {table}
SET {lease_set}
WHERE id IN ({ids})
RETURNING *
"""

# An acknowledgement batch arrives as one JSON array of rows (SETTLE_COLUMNS), which
# also keeps clear of SQLite's limit on parameters. The UPDATE is fenced per job by state and lease
# token; the attempts of the jobs it moved are inserted next, in the same transaction.
SETTLE_SQL = """
UPDATE {job_table} AS job
SET {settle_set}
FROM (SELECT {fields} FROM json_each(%s)) AS o
WHERE job.id = o.job_id AND job.state = o.source AND job.lease_token = o.lease_token
RETURNING id
"""

RECORD_SQL = """
INSERT INTO {attempt_table} ({attempt_columns})
SELECT {attempt_values} FROM (SELECT {fields} FROM json_each(%s)) AS o
WHERE o.job_id IN (SELECT value FROM json_each(%s))
RETURNING job_id, id
"""

#: Milliseconds a connection waits for the write lock before "database is locked".
BUSY_TIMEOUT_MS = 20_000


class SQLiteBackend(Backend):
    vendor = "sqlite"

    @contextlib.contextmanager
    def write_transaction(self, *, savepoint: bool = True) -> Iterator[None]:
        connection: Any = self.connection
        if connection.in_atomic_block:
            # Already inside a transaction (a caller's, or a test's): nest as a savepoint.
            with transaction.atomic(using=self.alias, savepoint=savepoint):
                yield
            return
        # Connect first: connecting resets transaction_mode from the settings.
        connection.ensure_connection()
        previous = connection.transaction_mode
        connection.transaction_mode = "IMMEDIATE"
        try:
            with transaction.atomic(using=self.alias):
                connection.transaction_mode = previous
                yield
        finally:
            connection.transaction_mode = previous

    def claim(self, **kwargs: Any) -> list[Job]:
        if not self.connection.in_atomic_block:
            # A plain read first: an idle poll must not take the single write lock,
            # which would block every enqueue in the meantime.
            from durable_jobs.models import Job

            exists = (
                Job.objects.using(self.alias)
                .filter(
                    queue=kwargs["queue"],
                    state__in=kwargs["sources"],
                    available_at__lte=timezone.now(),
                )
                .exists()
            )
            if not exists:
                return []
        return super().claim(**kwargs)

    def claim_rows(self, claim: Claim, *, guarded: bool) -> list[Job]:

        parts = self.claim_sql_parts(claim, guarded=guarded)
        params = self.claim_params(claim)
        pick = PICK_SQL.format(**parts, key_filter=KEY_FILTER.format(**parts))
        with self.connection.cursor() as cursor:
            cursor.execute(pick, params)
            rows = cursor.fetchall()
        ids = [pk for pk, key, _ in rows if not key]
        keyed = [(pk, key, limit or 1) for pk, key, limit in rows if key]
        if keyed:
            ids += self.choose_keyed(keyed)
        if not ids:
            return []
        id_params = {f"id{i}": pk for i, pk in enumerate(ids)}
        lease_sql = LEASE_SQL.format(
            table=parts["table"],
            lease_set=LEASE_SET.format(alias="", target_like=parts["target_like"]),
            ids=", ".join(f"%({k})s" for k in id_params),
        )
        return self.fetch_jobs(lease_sql, {**params, **id_params})

    def settle(self, settlements: Sequence[Settlement]) -> list[bool]:
        rows = self.settlement_rows(settlements)
        settle, record = settle_sql()
        with self.write_transaction(savepoint=False), self.connection.cursor() as cursor:
            cursor.execute(settle, [rows])
            moved = {pk for (pk,) in cursor.fetchall()}
            attempt_ids: dict[int, int] = {}
            if moved:
                # The attempts of the jobs that moved, and only theirs.
                cursor.execute(record, [rows, json.dumps(sorted(moved))])
                attempt_ids = dict(cursor.fetchall())
        return self.mark_settled(settlements, attempt_ids)

    def change_counter(self) -> int | None:
        # Changes when any other connection, in any process, commits to the file; reading
        # it costs no I/O (in WAL mode it is in the shared-memory index).
        with self.connection.cursor() as cursor:
            cursor.execute("PRAGMA data_version")
            return int(cursor.fetchone()[0])

    def json_time_function(self) -> Callable[[datetime | None], str | None]:
        # As Django stores it (DatabaseOperations.adapt_datetimefield_value): naive text in
        # the connection's time zone (UTC unless DATABASES sets TIME_ZONE).
        zone = self.connection.timezone

        def json_time(value: datetime | None) -> str | None:
            return None if value is None else str(value.astimezone(zone).replace(tzinfo=None))

        return json_time

    def json_token(self, value: uuid.UUID) -> str:
        return value.hex


@functools.cache
def settle_sql() -> tuple[str, str]:
    """The UPDATE of the jobs and the INSERT of their attempts."""
    from durable_jobs.models import Attempt, Job

    fields = ", ".join(
        f"json_extract(value, '$[{i}]') AS {name}" for i, (name, _) in enumerate(SETTLE_COLUMNS)
    )
    settle = SETTLE_SQL.format(
        job_table=f'"{Job._meta.db_table}"',
        settle_set=SETTLE_SET.format(result="o.result"),
        fields=fields,
    )
    record = RECORD_SQL.format(
        attempt_table=f'"{Attempt._meta.db_table}"',
        attempt_columns=", ".join(f'"{column}"' for column, _ in ATTEMPT_COLUMNS),
        attempt_values=", ".join(f"o.{source}" for _, source in ATTEMPT_COLUMNS),
        fields=fields,
    )
    return settle, record


def configure_connection(sender: Any, connection: Any, **kwargs: Any) -> None:
    """``connection_created`` hook: WAL mode and a generous busy timeout for SQLite."""
    if connection.vendor != "sqlite":
        return
    from durable_jobs.conf import get_settings

    with connection.cursor() as cursor:
        cursor.execute("PRAGMA busy_timeout")
        # Keep a longer timeout the project configured ("OPTIONS": {"timeout": ...}).
        if cursor.fetchone()[0] < BUSY_TIMEOUT_MS:
            cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if get_settings().sqlite_wal and not connection.is_in_memory_db():
            cursor.execute("PRAGMA journal_mode = WAL")
