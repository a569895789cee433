"""Bulk inserts on PostgreSQL through ``COPY``: rows stream to the server while the next
ones are encoded, and the server parses no SQL and no JSON document per row.

- Rows without an idempotency key go straight into the job table. ``COPY`` returns
  nothing, so their ids are taken from the table's sequence first, in one statement,
  and written with the rows.
- Rows with a key go into a temporary staging table, then into the job table with one
  ``INSERT ... SELECT ... ON CONFLICT DO NOTHING RETURNING``: the unique index decides
  between concurrent enqueues of a key, as for any insert.

Both return what :meth:`~durable_jobs.db.engine.Engine.insert_rows` returns: ``(id,
key)`` of the rows inserted, in the order given. Below :data:`COPY_FROM` rows one
``INSERT`` from a JSON document costs fewer round trips, and is used instead.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from durable_jobs.db.inserts import insert_fields
from durable_jobs.db.postgresql_sql import json_text, quote
from durable_jobs.models import Job

#: From this many rows on, an insert goes through COPY.
COPY_FROM = 50
#: The staging table of keyed rows: one per session, emptied at every commit.
STAGING = "durable_jobs_job_staging"

Cursor = Any  # a psycopg cursor


def copy_keyless(cursor: Cursor, jobs: Sequence[Job]) -> list[tuple[Any, ...]]:
    """Insert ``jobs`` (none with an idempotency key) with COPY; their ``(id, None)``."""
    table = quote(Job._meta.db_table)
    # The sequence looked up once (a subquery), not once per id: five times the ids/s.
    cursor.execute(
        "SELECT nextval((SELECT pg_get_serial_sequence(%s, 'id')::regclass)) "
        "FROM generate_series(1, %s)",
        [table, len(jobs)],
    )
    ids = [row[0] for row in cursor.fetchall()]
    _copy(cursor, table, zip(ids, jobs, strict=True))
    return [(pk, None) for pk in ids]


def insert_keyed(cursor: Cursor, jobs: Sequence[Job]) -> list[tuple[Any, ...]]:
    """Insert ``jobs`` (each with an idempotency key) through the staging table, skipping
    keys already taken; the ``(id, key)`` of those inserted, in ``jobs`` order."""
    cursor.execute(
        f"CREATE TEMPORARY TABLE IF NOT EXISTS {STAGING} "
        f"(LIKE {quote(Job._meta.db_table)} INCLUDING DEFAULTS) ON COMMIT DELETE ROWS"
    )
    # Rows an earlier call left in this transaction.
    cursor.execute(f"DELETE FROM {STAGING}")
    # The staged row's id is its position: the order the rows are inserted in.
    _copy(cursor, STAGING, enumerate(jobs))
    cursor.execute(_staged_insert_sql())
    return list(cursor.fetchall())


def described(insert: Callable[[Cursor, Sequence[Job]], list[tuple[Any, ...]]]) -> str:
    """How Django's query log shows ``insert`` (one entry for its statements): by the
    statement that writes the job table."""
    if insert is insert_keyed:
        return _staged_insert_sql()
    return _copy_sql(quote(Job._meta.db_table))


def _copy_sql(table: str) -> str:
    columns = ", ".join(quote(field.column) for field in insert_fields())
    return f"COPY {table} (id, {columns}) FROM STDIN"


def _copy(cursor: Cursor, table: str, rows: Iterator[tuple[int, Job]]) -> None:
    values_of, json_at = _row_reader()
    with cursor.copy(_copy_sql(table)) as copy:
        for pk, job in rows:
            row = [pk, *values_of(job)]
            for at in json_at:
                row[at] = json_text(row[at])
            copy.write_row(row)


@functools.cache
def _staged_insert_sql() -> str:
    columns = ", ".join(quote(field.column) for field in insert_fields())
    return (
        f"INSERT INTO {quote(Job._meta.db_table)} ({columns}) "
        f"SELECT {columns} FROM {STAGING} ORDER BY id "
        'ON CONFLICT ("idempotency_key") DO NOTHING RETURNING "id", "idempotency_key"'
    )


@functools.cache
def _row_reader() -> tuple[Callable[[Job], tuple[Any, ...]], tuple[int, ...]]:
    """What a COPY row is read with: the inserted columns' values of a job, in one call;
    and the row positions (after the id) of the JSON columns, written as their text
    (Django stores None as SQL NULL, not as JSON null). psycopg adapts the rest."""
    fields = insert_fields()
    json_at = tuple(
        1 + i for i, field in enumerate(fields) if field.get_internal_type() == "JSONField"
    )
    return operator.attrgetter(*(field.attname for field in fields)), json_at
