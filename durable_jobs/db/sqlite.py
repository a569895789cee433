"""SQLite: claims inside one ``BEGIN IMMEDIATE`` transaction, WAL, and a busy timeout.

SQLite has one writer at a time. Taking the write lock at ``BEGIN`` (IMMEDIATE)
rather than at the first write means a transaction that reads then writes can wait
for the lock (the busy timeout) instead of failing with "database is locked" when
another connection got there first.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.utils import timezone

from durable_jobs.db.base import KEY_FILTER, LEASE_SET, Backend, Claim

if TYPE_CHECKING:
    from durable_jobs.models import Job

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
LIMIT %(limit)s
"""

LEASE_SQL = """
UPDATE {table}
SET {lease_set}
WHERE id IN ({ids})
RETURNING *
"""

#: Milliseconds a connection waits for the write lock before "database is locked".
BUSY_TIMEOUT_MS = 20_000


class SQLiteBackend(Backend):
    vendor = "sqlite"

    @contextlib.contextmanager
    def write_transaction(self) -> Iterator[None]:
        connection: Any = self.connection
        if connection.in_atomic_block:
            # Already inside a transaction (a caller's, or a test's): nest as a savepoint.
            with transaction.atomic(using=self.alias):
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
        from durable_jobs.models import Job

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
        return list(Job.objects.using(self.alias).raw(lease_sql, {**params, **id_params}))


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
