"""The columns a new job's row is written with, and the standard ``INSERT`` of them."""

from __future__ import annotations

import functools
from typing import Any

from durable_jobs.models import Job


@functools.cache
def insert_fields() -> tuple[Any, ...]:
    """The Job fields an INSERT writes (all but the primary key), in a fixed order."""
    return tuple(f for f in Job._meta.concrete_fields if not f.primary_key and f.column)


@functools.lru_cache(maxsize=64)
def insert_sql(rows: int) -> str:
    """A multi-row ``INSERT ... ON CONFLICT DO NOTHING`` of :func:`insert_fields`."""
    # Standard SQL and quoting: the engines that use it (PostgreSQL, SQLite) share both.
    columns = ", ".join(f'"{field.column}"' for field in insert_fields())
    row = f"({', '.join(['%s'] * len(insert_fields()))})"
    return (
        f'INSERT INTO "{Job._meta.db_table}" ({columns}) VALUES {", ".join([row] * rows)} '
        'ON CONFLICT ("idempotency_key") DO NOTHING RETURNING "id", "idempotency_key"'
    )
