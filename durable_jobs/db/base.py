"""What every database backend provides, and the parts that are plain SQL everywhere."""

from __future__ import annotations

import contextlib
import functools
import uuid
from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

if TYPE_CHECKING:
    from durable_jobs.models import Job


@functools.cache
def _insert_fields() -> tuple[Any, ...]:
    """The Job fields an INSERT writes (all but the primary key), in a fixed order."""
    from durable_jobs.models import Job

    return tuple(f for f in Job._meta.concrete_fields if not f.primary_key and f.column)


class Backend:
    vendor = ""

    def __init__(self, alias: str) -> None:
        self.alias = alias

    @property
    def connection(self) -> BaseDatabaseWrapper:
        return connections[self.alias]

    # -- transactions -------------------------------------------------------------------

    @contextlib.contextmanager
    def write_transaction(self) -> Iterator[None]:
        """A transaction for statements that write; on SQLite it takes the write lock first."""
        with transaction.atomic(using=self.alias):
            yield

    # -- enqueue --------------------------------------------------------------------------

    def insert_job(self, job: Job, *, notify: bool) -> int | None:
        """Insert ``job``; return its id, or None when its idempotency key already exists.

        ``ON CONFLICT DO NOTHING`` makes concurrent enqueues of one key race-free: the
        unique constraint decides, never a read-then-write.
        """
        columns, values = self._insert_values(job)
        sql = self._insert_sql(columns, notify=notify)
        params: list[Any] = list(values)
        if notify:
            params += self.notify_params(job.queue)
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            row = cursor.fetchone()
        return None if row is None else int(row[0])

    def _insert_sql(self, columns: Sequence[str], *, notify: bool) -> str:
        from durable_jobs.models import Job

        qn = self.connection.ops.quote_name
        placeholders = ", ".join(["%s"] * len(columns))
        return (
            f"INSERT INTO {qn(Job._meta.db_table)} ({', '.join(qn(c) for c in columns)}) "
            f"VALUES ({placeholders}) ON CONFLICT ({qn('idempotency_key')}) DO NOTHING "
            f"RETURNING {qn('id')}"
        )

    def _insert_values(self, job: Job) -> tuple[list[str], list[Any]]:
        connection = self.connection  # looked up once: it is a thread-local access
        fields = _insert_fields()
        columns = [field.column for field in fields]
        values = [
            field.get_db_prep_save(getattr(job, field.attname), connection) for field in fields
        ]
        return columns, values

    def notify_params(self, queue: str) -> list[Any]:
        return []

    # -- claim ------------------------------------------------------------------------------

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
        raise NotImplementedError

    @staticmethod
    def state_list(states: Sequence[str]) -> str:
        """States as SQL literals. They come from the state table, never from input; inlining
        them (rather than binding) lets the planner match the claim index's predicate."""
        from durable_jobs.states import State

        return ", ".join(f"'{State(s).value}'" for s in states)

    def claim_params(self, lease_seconds: float) -> dict[str, Any]:
        """Values the claim writes, adapted for this database (the application clock)."""
        from durable_jobs.models import Job

        now = timezone.now()
        meta = Job._meta
        prep = self.connection
        return {
            "now": meta.get_field("available_at").get_db_prep_value(now, prep),
            "lease_expires_at": meta.get_field("lease_expires_at").get_db_prep_value(
                now + timedelta(seconds=lease_seconds), prep
            ),
            "lease_token": meta.get_field("lease_token").get_db_prep_value(uuid.uuid4(), prep),
        }

    # -- wake-ups ---------------------------------------------------------------------------

    def listener(self, channel: str) -> Any:
        """A blocking source of wake-ups for idle workers, or None where only polling works."""
        return None
