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
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.core.checks import CheckMessage, Error, Warning
from django.db import transaction
from django.utils import timezone

from durable_jobs.conf import get_settings
from durable_jobs.db import outcome_rows
from durable_jobs.db.contract import ChooseKeyed, ClaimRequest
from durable_jobs.db.engine import Engine
from durable_jobs.db.inserts import insert_fields
from durable_jobs.lifecycle import sql
from durable_jobs.lifecycle.states import CLAIMABLE
from durable_jobs.models import Attempt, Job

if TYPE_CHECKING:
    from durable_jobs.lifecycle.outcomes import Settlement

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

# A batch of outcomes arrives as one JSON array of rows (which also keeps clear of
# SQLite's limit on parameters). The UPDATE is fenced per job by state and lease token;
# the attempts of the jobs it moved are inserted next, in the same transaction.
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
#: The oldest SQLite with ``UPDATE ... RETURNING``.
MIN_VERSION = (3, 35)


class SQLiteEngine(Engine):
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

    # -- enqueue ----------------------------------------------------------------------------

    def insert_job(self, job: Job, *, notify: bool) -> int | None:
        with self.connection.cursor() as cursor:
            cursor.execute(self.insert_sql(), self.insert_values(job))
            row = cursor.fetchone()
        return None if row is None else int(row[0])

    def insert_rows(self, jobs: Sequence[Job]) -> list[tuple[Any, ...]]:
        params: list[Any] = []
        for job in jobs:
            params += self.insert_values(job)
        with self.connection.cursor() as cursor:
            cursor.execute(self.insert_sql(rows=len(jobs)), params)
            return cursor.fetchall()

    def rows_per_insert(self) -> int:
        max_params = self.connection.features.max_query_params or 999
        return max(1, min(500, max_params // len(insert_fields())))

    def notify(self, queues: Sequence[str]) -> None:
        pass  # workers in other processes read the change counter instead

    # -- claim ------------------------------------------------------------------------------

    def may_claim(self, queue: str) -> bool:
        if self.connection.in_atomic_block:
            return True  # the caller's transaction holds (or will take) the lock anyway
        # A plain read first: an idle poll must not take the single write lock, which
        # would block every enqueue in the meantime.
        return (
            Job.objects.using(self.alias)
            .filter(queue=queue, state__in=sorted(CLAIMABLE), available_at__lte=timezone.now())
            .exists()
        )

    def claim(
        self, request: ClaimRequest, *, guarded: bool, choose_keyed: ChooseKeyed
    ) -> list[Job]:
        parts = self.claim_parts(request, guarded=guarded)
        params = self.claim_params(request)
        with self.connection.cursor() as cursor:
            cursor.execute(PICK_SQL.format(**parts), params)
            picked = cursor.fetchall()
        ids = [pk for pk, key, _ in picked if not key]
        keyed = [(pk, key, limit or 1) for pk, key, limit in picked if key]
        if keyed:
            ids += choose_keyed(keyed)
        if not ids:
            return []
        id_params = {f"id{i}": pk for i, pk in enumerate(ids)}
        lease_sql = LEASE_SQL.format(
            table=parts["table"],
            lease_set=sql.lease_set(""),
            ids=", ".join(f"%({k})s" for k in id_params),
        )
        return self.fetch_jobs(lease_sql, {**params, **id_params})

    def lock_keys(self, keys: Sequence[str]) -> None:
        pass  # the claim's write transaction already excludes every other claimer

    # -- outcomes ---------------------------------------------------------------------------

    def settle(self, settlements: Sequence[Settlement]) -> list[bool]:
        rows = outcome_rows.encode(settlements, self._json_time(), _token_hex)
        settle, record = settle_sql()
        with self.write_transaction(savepoint=False), self.connection.cursor() as cursor:
            cursor.execute(settle, [rows])
            moved = {pk for (pk,) in cursor.fetchall()}
            attempt_ids: dict[int, int] = {}
            if moved:
                # The attempts of the jobs that moved, and only theirs.
                cursor.execute(record, [rows, json.dumps(sorted(moved))])
                attempt_ids = dict(cursor.fetchall())
        return outcome_rows.mark_written(settlements, attempt_ids, self.alias)

    def _json_time(self) -> Callable[[datetime | None], str | None]:
        # As Django stores it (DatabaseOperations.adapt_datetimefield_value): naive text in
        # the connection's time zone (UTC unless DATABASES sets TIME_ZONE).
        zone = self.connection.timezone

        def json_time(value: datetime | None) -> str | None:
            return None if value is None else str(value.astimezone(zone).replace(tzinfo=None))

        return json_time

    # -- wake-ups ---------------------------------------------------------------------------

    def listener(self, channel: str) -> None:
        return None  # no notifications: idle workers read the change counter

    def change_counter(self) -> int | None:
        # Changes when any other connection, in any process, commits to the file; reading
        # it costs no I/O (in WAL mode it is in the shared-memory index).
        with self.connection.cursor() as cursor:
            cursor.execute("PRAGMA data_version")
            return int(cursor.fetchone()[0])

    # -- checks -----------------------------------------------------------------------------

    def check(self, *, server: bool = False) -> list[CheckMessage]:
        messages: list[CheckMessage] = []
        if server:
            return messages  # the library's version is known without connecting
        if sqlite3.sqlite_version_info < MIN_VERSION:
            messages.append(
                Error(
                    f"SQLite {sqlite3.sqlite_version} is too old: durable_jobs needs 3.35 or "
                    "newer (UPDATE ... RETURNING).",
                    hint="Use a Python built against a newer SQLite, or PostgreSQL.",
                    id="durable_jobs.E008",
                )
            )
        mode = (self.connection.settings_dict.get("OPTIONS") or {}).get("transaction_mode")
        if (mode or "").upper() != "IMMEDIATE":
            messages.append(
                Warning(
                    f"SQLite database {self.alias!r} starts transactions in DEFERRED mode; an "
                    "enqueue inside transaction.atomic() may fail with 'database is locked' "
                    "while a worker writes.",
                    hint=f"Set DATABASES[{self.alias!r}]['OPTIONS']['transaction_mode'] = "
                    "'IMMEDIATE'.",
                    id="durable_jobs.W001",
                )
            )
        return messages


def _token_hex(value: Any) -> str:
    return str(value.hex)


@functools.cache
def settle_sql() -> tuple[str, str]:
    """The UPDATE of the jobs and the INSERT of their attempts."""
    fields = ", ".join(
        f"json_extract(value, '$[{i}]') AS {name}"
        for i, (name, _) in enumerate(outcome_rows.COLUMNS)
    )
    settle = SETTLE_SQL.format(
        job_table=f'"{Job._meta.db_table}"', settle_set=sql.settle_set(), fields=fields
    )
    record = RECORD_SQL.format(
        attempt_table=f'"{Attempt._meta.db_table}"',
        attempt_columns=", ".join(f'"{column}"' for column, _ in outcome_rows.ATTEMPT_COLUMNS),
        attempt_values=", ".join(f"o.{source}" for _, source in outcome_rows.ATTEMPT_COLUMNS),
        fields=fields,
    )
    return settle, record


def configure_connection(sender: Any, connection: Any, **kwargs: Any) -> None:
    """``connection_created`` hook: WAL mode and a generous busy timeout for SQLite."""
    if connection.vendor != "sqlite":
        return
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA busy_timeout")
        # Keep a longer timeout the project configured ("OPTIONS": {"timeout": ...}).
        if cursor.fetchone()[0] < BUSY_TIMEOUT_MS:
            cursor.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        if get_settings().sqlite_wal and not connection.is_in_memory_db():
            cursor.execute("PRAGMA journal_mode = WAL")
