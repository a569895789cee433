"""PostgreSQL: SKIP LOCKED claims, and LISTEN/NOTIFY wake-ups."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from durable_jobs.db.base import KEY_FILTER, LEASE_SET, Backend, Claim

if TYPE_CHECKING:
    from durable_jobs.models import Job

# The claim is one statement. The CTE picks and row-locks at most %(limit)s waiting
# jobs in claim order, skipping rows other workers have locked, and the UPDATE leases
# exactly those rows. Writing this as ``UPDATE ... WHERE id IN (SELECT ... LIMIT n)``
# is a known trap: the planner may turn the subquery into a join it re-evaluates,
# leasing more rows than the LIMIT. The CTE is materialised once (an optimisation
# fence), so it cannot.
#
# Picked jobs with a concurrency key are not leased here: they come back still
# queued (and still row-locked by this transaction), and are leased by LEASE_SQL once
# their keys are locked and counted (see Backend.choose_keyed).
CLAIM_SQL = """
WITH picked AS (
    SELECT id, concurrency_key
    FROM {table} AS job
    WHERE queue = %(queue)s
      AND state IN ({sources})
      AND available_at <= %(now)s
      {guard}
      {key_filter}
    ORDER BY priority DESC, available_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
),
leased AS (
    UPDATE {table} AS job
    SET {lease_set}
    FROM picked
    WHERE job.id = picked.id AND picked.concurrency_key IS NULL
    RETURNING job.*
)
SELECT * FROM leased
UNION ALL
SELECT job.* FROM {table} AS job JOIN picked ON job.id = picked.id
WHERE picked.concurrency_key IS NOT NULL
"""

LEASE_SQL = """
UPDATE {table} AS job
SET {lease_set}
WHERE job.id = ANY(%(ids)s)
RETURNING job.*
"""


class PostgreSQLBackend(Backend):
    vendor = "postgresql"

    def _insert_sql(self, columns: Sequence[str], *, notify: bool, rows: int = 1) -> str:
        insert = super()._insert_sql(columns, notify=notify, rows=rows)
        if not notify:
            return insert
        # NOTIFY inside the transaction is delivered only if it commits, so a rolled back
        # enqueue wakes nobody; one round trip does both.
        return f"WITH inserted AS ({insert}) SELECT id, pg_notify(%s, %s) FROM inserted"

    def max_params(self) -> int:
        return 65535

    def notify(self, queues: Sequence[str]) -> None:
        from durable_jobs.conf import get_settings

        channel = get_settings().notify_channel
        with self.connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_notify(%s, q) FROM unnest(%s::text[]) AS q", [channel, list(queues)]
            )

    def notify_params(self, queue: str) -> list[Any]:
        from durable_jobs.conf import get_settings

        return [get_settings().notify_channel, queue]

    def claim_rows(self, claim: Claim, *, guarded: bool) -> list[Job]:
        from durable_jobs.models import Job

        parts = self.claim_sql_parts(claim, guarded=guarded)
        lease_set = LEASE_SET.format(alias="job.", target_like=parts["target_like"])
        sql = CLAIM_SQL.format(**parts, lease_set=lease_set, key_filter=KEY_FILTER.format(**parts))
        params = self.claim_params(claim)
        rows = list(Job.objects.using(self.alias).raw(sql, params))
        jobs = [job for job in rows if job.state == claim.target]
        keyed = [
            (job.pk, job.concurrency_key, job.concurrency_limit or 1)
            for job in sorted(rows, key=lambda j: (-j.priority, j.available_at, j.pk))
            if job.state != claim.target and job.concurrency_key
        ]
        if keyed:
            ids = self.choose_keyed(keyed)
            if ids:
                lease = LEASE_SQL.format(table=parts["table"], lease_set=lease_set)
                jobs += Job.objects.using(self.alias).raw(lease, {**params, "ids": ids})
        return jobs

    def lock_keys(self, keys: Sequence[str]) -> None:
        # Transaction-scoped advisory locks, in sorted order so claimers never deadlock.
        # A hash collision only serialises two keys' claims; the count stays exact.
        with self.connection.cursor() as cursor:
            for key in keys:
                cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 7001))", [key])

    def listener(self, channel: str) -> PostgreSQLListener:
        return PostgreSQLListener(self.alias, channel)


class PostgreSQLListener:
    """A dedicated autocommit connection that LISTENs for enqueue notifications."""

    def __init__(self, alias: str, channel: str) -> None:
        self.alias = alias
        self.channel = channel
        self._conn: Any = None

    def connect(self) -> None:
        from django.db import connections
        from psycopg import sql as psycopg_sql

        wrapper = connections[self.alias]
        params = wrapper.get_connection_params()
        conn = wrapper.get_new_connection(params)
        conn.autocommit = True
        # Quoted as an identifier, not pasted between quotes: a '"' in NOTIFY_CHANNEL
        # would otherwise end the identifier and break (or inject into) the statement.
        conn.execute(psycopg_sql.SQL("LISTEN {}").format(psycopg_sql.Identifier(self.channel)))
        self._conn = conn

    def wait(self, timeout: float) -> list[str]:
        """Block up to ``timeout`` seconds; return the queues named by notifications."""
        if self._conn is None:
            self.connect()
        return [n.payload for n in self._conn.notifies(timeout=timeout, stop_after=1)]

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None
