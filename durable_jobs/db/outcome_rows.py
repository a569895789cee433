"""A batch of lease outcomes as the engines send it: one JSON array of rows.

The statement's text and its one parameter do not depend on the batch size, and
encoding the batch is one C call (``json.dumps``). Each row holds a job's next state
and fields, then its attempt row; :data:`COLUMNS` gives their order and their
PostgreSQL types.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from durable_jobs.db.rows import mark_saved
from durable_jobs.lifecycle.sql import OUTCOME_SOURCE

if TYPE_CHECKING:
    from durable_jobs.lifecycle.outcomes import Settlement

#: The columns of an outcome row, with their PostgreSQL types.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("job_id", "bigint"),
    ("lease_token", "uuid"),
    ("source", "text"),
    ("target", "text"),
    ("updated_at", "timestamptz"),
    ("finished_at", "timestamptz"),
    ("available_at", "timestamptz"),
    ("gives_back", "int"),
    ("sets_result", "boolean"),
    ("result", "jsonb"),
    ("last_error", "text"),
    ("number", "int"),
    ("node", "text"),
    ("started_at", "timestamptz"),
    ("ended_at", "timestamptz"),
    ("duration_us", "bigint"),
    ("outcome", "text"),
    ("error_class", "text"),
    ("error_message", "text"),
    ("traceback", "text"),
    ("log", "text"),
    ("name", "text"),
)

#: The attempt columns an outcome inserts, and the row column each comes from.
ATTEMPT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("job_id", "job_id"),
    ("number", "number"),
    ("node", "node"),
    ("started_at", "started_at"),
    ("finished_at", "ended_at"),
    ("duration", "duration_us"),
    ("outcome", "outcome"),
    ("error_class", "error_class"),
    ("error_message", "error_message"),
    ("traceback", "traceback"),
    ("log", "log"),
    ("name", "name"),
)

#: Writes a timestamp as the database reads it from JSON text.
TimeFormat = Callable[[datetime | None], str | None]
#: Writes a lease token as the database stores it.
TokenFormat = Callable[[uuid.UUID], str]


def iso_time(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def encode(settlements: Sequence[Settlement], time: TimeFormat, token: TokenFormat) -> str:
    """The batch as a JSON array of rows in :data:`COLUMNS` order."""
    rows = []
    for s in settlements:
        attempt = s.attempt
        rows.append(
            (
                s.job_id,
                token(s.lease_token),
                OUTCOME_SOURCE,
                s.target.value,
                time(s.updated_at),
                time(s.finished_at),
                time(s.available_at),
                1 if s.gives_back else 0,
                s.sets_result,
                None if s.result is None else json.dumps(s.result),
                s.last_error,
                attempt.number,
                attempt.node,
                time(attempt.started_at),
                time(attempt.finished_at),
                attempt.duration // timedelta(microseconds=1),
                str(attempt.outcome),
                attempt.error_class,
                attempt.error_message,
                attempt.traceback,
                attempt.log,
                attempt.name,
            )
        )
    return json.dumps(rows)


def mark_written(
    settlements: Sequence[Settlement], attempt_ids: dict[int, int], alias: str
) -> list[bool]:
    """Which settlements were written (their job got an attempt id), in order; the
    written attempts get their primary key."""
    written = []
    for settlement in settlements:
        attempt_id = attempt_ids.get(settlement.job_id)
        if attempt_id is not None:
            mark_saved(settlement.attempt, attempt_id, alias)
        written.append(attempt_id is not None)
    return written
