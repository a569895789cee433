"""PostgreSQL: SKIP LOCKED claims, and LISTEN/NOTIFY wake-ups."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from durable_jobs.db.base import Backend

if TYPE_CHECKING:
    from durable_jobs.models import Job

# The claim is one statement. The CTE picks and row-locks at most %(limit)s waiting
# jobs in claim order, skipping rows other workers have locked, and the UPDATE leases
# exactly those rows. Writing this as ``UPDATE ... WHERE id IN (SELECT ... LIMIT n)``
# is a known trap: the planner may turn the subquery into a join it re-evaluates,
# leasing more rows than the LIMIT. The CTE is materialised once (an optimisation
# fence), so it cannot.
CLAIM_SQL = """
WITH picked AS (
    SELECT id
    FROM {table}
    WHERE queue = %(queue)s
      AND state IN ({sources})
      AND available_at <= %(now)s
    ORDER BY priority DESC, available_at, id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
UPDATE {table} AS job
SET state = %(target)s,
    attempts = job.attempts + 1,
    attempted_at = %(now)s,
    updated_at = %(now)s,
    lease_expires_at = %(lease_expires_at)s,
    lease_token = %(lease_token)s,
    leased_by_id = %(node_id)s
FROM picked
WHERE job.id = picked.id
RETURNING job.*
"""


class PostgreSQLBackend(Backend):
    vendor = "postgresql"

    def _insert_sql(self, columns: Sequence[str], *, notify: bool) -> str:
        insert = super()._insert_sql(columns, notify=notify)
        if not notify:
            return insert
        # NOTIFY inside the transaction is delivered only if it commits, so a rolled back
        # enqueue wakes nobody; one round trip does both.
        return f"WITH inserted AS ({insert}) SELECT id, pg_notify(%s, %s) FROM inserted"

    def notify_params(self, queue: str) -> list[Any]:
        from durable_jobs.conf import get_settings

        return [get_settings().notify_channel, queue]

    def claim(
        self,
        *,
        queue: str,
        limit: int,
        node_id: int | None,
        lease_seconds: float,
        sources: Sequence[str],
        target: str,
    ) -> list[Job]:
        from durable_jobs.models import Job

        sql = CLAIM_SQL.format(
            table=self.connection.ops.quote_name(Job._meta.db_table),
            sources=self.state_list(sources),
        )
        params = {
            "queue": queue,
            "limit": limit,
            "target": target,
            "node_id": node_id,
            **self.claim_params(lease_seconds),
        }
        with self.write_transaction():
            return list(Job.objects.using(self.alias).raw(sql, params))

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

        wrapper = connections[self.alias]
        params = wrapper.get_connection_params()
        conn = wrapper.get_new_connection(params)
        conn.autocommit = True
        conn.execute(f'LISTEN "{self.channel}"')
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
