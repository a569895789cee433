"""The PostgreSQL engine's statements, as text: the claim, the outcome batch, a loop pass
(both in one statement), and the insert of jobs from one JSON document.

Rendered once from :mod:`durable_jobs.lifecycle.sql` and the models, and run by
:class:`~durable_jobs.db.postgresql.PostgreSQLEngine` as prepared statements.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

from django.db import connections

from durable_jobs.db import outcome_rows
from durable_jobs.db.inserts import insert_fields
from durable_jobs.lifecycle import sql
from durable_jobs.models import Attempt, Job

# The claim: ``picked`` selects and row-locks at most {limit} waiting jobs, skipping rows
# other workers hold, and ``leased`` leases exactly those. Not ``UPDATE ... WHERE id IN
# (SELECT ... LIMIT n)``: the planner may re-run that subquery as a join and lease more
# rows than the LIMIT; a CTE is evaluated once. Picked jobs with a concurrency key are
# left to flow control, which chooses those whose keys have room.
CLAIM_CTES = """
picked AS (
    SELECT id, concurrency_key
    FROM {table} AS job
    WHERE queue = %(queue)s
      AND state IN ({sources})
      AND available_at <= %(now)s
      {guard}
      {key_filter}
    ORDER BY priority DESC, available_at, id
    LIMIT {limit}
    FOR UPDATE SKIP LOCKED
),
leased AS (
    UPDATE {table} AS job
    SET {lease_set}
    FROM picked
    WHERE job.id = picked.id AND picked.concurrency_key IS NULL
    RETURNING job.*
)
"""

# A whole batch of outcomes: only the jobs the fenced UPDATE moved get their attempt row,
# whose ids come back.
#
# Under a prepared statement's generic plan the jobs must be found by primary key: hence
# the ids again as an array (the plan cannot see how few rows the JSON holds), and the
# fence's state taken from the rows (``o.source``) rather than as the literal 'leased',
# which would lead the planner to scan the partial index of leased jobs, dead entries
# and all.
OUTCOME_CTES = """
outcome AS (
    SELECT {fields} FROM jsonb_array_elements(%(outcomes)s::jsonb) AS r
),
settled AS (
    UPDATE {table} AS job
    SET {settle_set}
    FROM outcome AS o
    WHERE job.id = ANY(%(settled)s::bigint[])
      AND job.id = o.job_id AND job.state = o.source AND job.lease_token = o.lease_token
    RETURNING job.id
),
recorded AS (
    INSERT INTO {attempt_table} ({attempt_columns})
    SELECT {attempt_values} FROM outcome AS o JOIN settled ON settled.id = o.job_id
    RETURNING job_id, id
)
"""

# The claim, in the caller's transaction: picked jobs with a concurrency key come back
# still queued (and row-locked); LEASE_SQL leases those flow control chose.
CLAIM_SQL = f"""
WITH {CLAIM_CTES}
SELECT * FROM leased
UNION ALL
SELECT job.* FROM {{table}} AS job JOIN picked ON job.id = picked.id
WHERE picked.concurrency_key IS NOT NULL
"""

LEASE_SQL = """
UPDATE {table} AS job
SET {lease_set}
WHERE job.id = ANY(%(ids)s)
RETURNING job.*
"""

SETTLE_SQL = f"""
WITH {OUTCOME_CTES}
SELECT job_id, id FROM recorded
"""

# One loop pass in one statement: the outcome batch and the claim of the slots it freed.
# Run in autocommit, a pass is one round trip and one commit. Data-modifying CTEs all run,
# once, on one snapshot: the settle moves leased jobs and the pick takes waiting ones, so
# the two never meet on a row (a snoozed job queued again here is claimed by a later
# pass).
#
# Picked jobs with a concurrency key are not leased here: without a transaction around
# it, their row locks end with the statement. Only their number comes back, and the
# caller claims them (through flow control) in a transaction of its own.
#
# Whatever was leased, one row at least comes back, carrying the attempts recorded (the
# ids of their jobs, and theirs) and the count of keyed picks; it has a NULL job id when
# nothing was leased.
PASS_SQL = f"""
WITH {OUTCOME_CTES},
{CLAIM_CTES}
SELECT leased.*, recorded.jobs AS recorded_jobs, recorded.attempts AS recorded_attempts,
    keyed.picks AS keyed_picks
FROM (SELECT array_agg(job_id) AS jobs, array_agg(id) AS attempts FROM recorded) AS recorded
CROSS JOIN (SELECT count(*) AS picks FROM picked WHERE concurrency_key IS NOT NULL) AS keyed
{{relax}}LEFT JOIN leased ON true
"""

# With DURABLE_JOBS["SYNCHRONOUS_COMMIT"] = False, a pass in autocommit relaxes its own
# commit: set_config(..., true) is SET LOCAL's function form, and a statement in
# autocommit is a transaction of its own, which commits after the statement has run. So
# the commit does not wait for the WAL flush, the setting ends with it (nothing leaks to
# the session, or through a pooler), and the pass stays one round trip: no BEGIN, SET
# LOCAL and COMMIT around it.
RELAX_JOIN = "CROSS JOIN (SELECT set_config('synchronous_commit', 'off', true)) AS relaxed\n"


def quote(name: str) -> str:
    """An identifier of ours (no quote inside), quoted."""
    return f'"{name}"'


@functools.cache
def settle_sql() -> str:
    return SETTLE_SQL.format(**_settle_parts(), table=quote(Job._meta.db_table))


@functools.cache
def _settle_parts() -> dict[str, str]:
    """The pieces of SETTLE_SQL and PASS_SQL that write the outcome batch."""

    def value(source: str) -> str:
        return (
            "o.duration_us * interval '1 microsecond'" if source == "duration_us" else f"o.{source}"
        )

    return {
        "fields": ", ".join(
            f"(r->>{i})::{kind} AS {name}" for i, (name, kind) in enumerate(outcome_rows.COLUMNS)
        ),
        "settle_set": sql.settle_set(),
        "attempt_table": quote(Attempt._meta.db_table),
        "attempt_columns": ", ".join(quote(column) for column, _ in outcome_rows.ATTEMPT_COLUMNS),
        "attempt_values": ", ".join(value(source) for _, source in outcome_rows.ATTEMPT_COLUMNS),
    }


@functools.cache
def pass_sql(claim_parts: tuple[tuple[str, str], ...], *, relaxed: bool = False) -> str:
    """PASS_SQL with a claim's pieces (:meth:`Engine.claim_parts`, as items); ``relaxed``:
    committing without waiting for the WAL flush (:data:`RELAX_JOIN`)."""
    return PASS_SQL.format(
        **_settle_parts(),
        **dict(claim_parts),
        lease_set=sql.lease_set("job."),
        relax=RELAX_JOIN if relaxed else "",
    )


@functools.cache
def insert_columns(alias: str) -> tuple[tuple[str, str, Callable[[Any], Any]], ...]:
    """Per inserted Job column: the attribute, its SQL type from JSON text, its encoder."""
    out = []
    for field in insert_fields():
        kind = field.get_internal_type()
        if kind == "JSONField":
            # Dumped to text first: JSON null would otherwise become a JSON null value,
            # where Django stores None as SQL NULL.
            out.append((field.attname, "jsonb", json_text))
        elif kind == "DateTimeField":
            out.append((field.attname, "timestamptz", outcome_rows.iso_time))
        elif kind == "UUIDField":
            out.append((field.attname, "uuid", _text_or_none))
        elif kind in ("CharField", "TextField"):
            # text, not varchar(n): an explicit cast to varchar(n) would truncate silently,
            # where assigning text to the column refuses a value too long.
            out.append((field.attname, "text", as_is))
        else:
            out.append((field.attname, str(field.db_type(connections[alias])), as_is))
    return tuple(out)


def as_is(value: Any) -> Any:
    return value


#: ``json.dumps`` with its default options, without its per-call checks of them.
_encode_json = json.JSONEncoder().encode


def json_text(value: Any) -> str | None:
    if value is None:
        return None
    if not value and type(value) is dict:  # the usual meta: skip the encoder's set-up
        return "{}"
    return _encode_json(value)


def _text_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def notifying(insert: str, notify: bool) -> str:
    """``insert`` (one returning the new rows' ids), with ``notify`` also sending
    ``pg_notify(%s, %s)`` if a row was inserted."""
    if not notify:
        return insert
    # NOTIFY inside the transaction is delivered only if it commits, so a rolled back
    # enqueue wakes nobody; one round trip does both.
    return f"WITH inserted AS ({insert}) SELECT id, pg_notify(%s, %s) FROM inserted"


@functools.cache
def insert_json_sql(alias: str, *, notify: bool) -> str:
    """INSERT of the Job rows in a JSON array (see ``insert_rows``), in array order; with
    ``notify``, also ``pg_notify(%s, %s)`` once if a row was inserted."""
    names = ", ".join(quote(field.column) for field in insert_fields())
    values = ", ".join(f"(r->>{i})::{kind}" for i, (_, kind, _) in enumerate(insert_columns(alias)))
    insert = (
        f"INSERT INTO {quote(Job._meta.db_table)} ({names}) "
        f"SELECT {values} FROM jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS e(r, n) "
        'ORDER BY n ON CONFLICT ("idempotency_key") DO NOTHING RETURNING "id", "idempotency_key"'
    )
    return notifying(insert, notify)
