"""PostgreSQL: SKIP LOCKED claims, prepared statements, and LISTEN/NOTIFY wake-ups."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError, connections, transaction

from durable_jobs.conf import get_settings
from durable_jobs.db import advisory, outcome_rows, percentiles
from durable_jobs.db.engine import ChooseKeyed, ClaimRequest, Engine, insert_fields
from durable_jobs.lifecycle import sql
from durable_jobs.models import Attempt, Job

if TYPE_CHECKING:
    from durable_jobs.lifecycle.outcomes import Settlement

logger = logging.getLogger("durable_jobs")

#: Aliases whose server refused a prepared statement (PgBouncer in transaction mode without
#: prepared statements): this process runs their statements unprepared.
_unprepared: set[str] = set()

#: What psycopg raises when a pooler in between loses track of prepared statements.
PREPARED_STATEMENT_ERRORS: tuple[type[Exception], ...] = ()
try:
    from psycopg import errors as _errors

    PREPARED_STATEMENT_ERRORS = (
        _errors.InvalidSqlStatementName,
        _errors.DuplicatePreparedStatement,
    )
except ImportError:  # psycopg is only needed on PostgreSQL
    pass

# The claim is one statement: the CTE picks and row-locks at most {limit} waiting jobs,
# skipping rows other workers hold, and the UPDATE leases exactly those. Not ``UPDATE ...
# WHERE id IN (SELECT ... LIMIT n)``: the planner may re-run that subquery as a join and
# lease more rows than the LIMIT; a CTE is evaluated once.
#
# Picked jobs with a concurrency key come back still queued (and row-locked); they are
# leased by LEASE_SQL once flow control has chosen those whose keys have room.
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


# A whole batch of outcomes in one statement; only the jobs the fenced UPDATE moved get
# their attempt row, whose ids come back.
#
# Under a prepared statement's generic plan the jobs must be found by primary key: hence
# the ids again as an array (the plan cannot see how few rows the JSON holds), and the
# fence's state taken from the rows (``o.source``) rather than as the literal 'leased',
# which would lead the planner to scan the partial index of leased jobs, dead entries
# and all.
SETTLE_SQL = """
WITH outcome AS (
    SELECT {fields} FROM jsonb_array_elements(%s::jsonb) AS r
),
settled AS (
    UPDATE {job_table} AS job
    SET {settle_set}
    FROM outcome AS o
    WHERE job.id = ANY(%s::bigint[])
      AND job.id = o.job_id AND job.state = o.source AND job.lease_token = o.lease_token
    RETURNING job.id
),
recorded AS (
    INSERT INTO {attempt_table} ({attempt_columns})
    SELECT {attempt_values} FROM outcome AS o JOIN settled ON settled.id = o.job_id
    RETURNING job_id, id
)
SELECT job_id, id FROM recorded
"""


class PostgreSQLEngine(Engine):
    vendor = "postgresql"
    percentiles_sql = staticmethod(percentiles.ordered_set)

    @contextlib.contextmanager
    def write_transaction(self, *, savepoint: bool = True) -> Iterator[None]:
        with transaction.atomic(using=self.alias, savepoint=savepoint):
            yield

    def keyed_transaction(self, key: str) -> contextlib.AbstractContextManager[None]:
        if self.connection.in_atomic_block:  # the caller's snapshot is taken: lock inside
            return super().keyed_transaction(key)
        return advisory.locked_transaction(self, key)

    # -- enqueue ----------------------------------------------------------------------------

    def rows_per_insert(self) -> int:
        return 5000

    def insert_job(self, job: Job, *, notify: bool) -> int | None:
        # The same statement as insert_rows, with one row (and the NOTIFY riding along):
        # one text for every enqueue, so that, prepared, PostgreSQL parses and plans it
        # once per connection rather than once per job.
        params: list[Any] = [self._json_rows([job])]
        if notify:
            params += [get_settings().notify_channel, job.queue]
        # Prepared only in autocommit, where a pooler that lost the statement costs a
        # retry (see execute_prepared); inside the project's transaction it would fail
        # the transaction.
        prepare = not self.connection.in_atomic_block
        statement = insert_json_sql(self.alias, notify=notify)
        _, rows = self.execute_prepared(statement, params, prepare=prepare)
        return int(rows[0][0]) if rows else None

    def insert_rows(self, jobs: Sequence[Job]) -> list[tuple[Any, ...]]:
        # The rows travel as one JSON document (``json.dumps`` is one C call) in one
        # parameter, rather than as 25 parameters per row that Django's cursor would quote
        # into the statement's text one by one. Not prepared: one statement per 5,000
        # jobs gains nothing from it, and enqueues run on the project's own connections,
        # where psycopg, once it has prepared anything, answers every rollback with
        # DEALLOCATE ALL.
        statement = insert_json_sql(self.alias, notify=False)
        _, returned = self.execute_prepared(statement, [self._json_rows(jobs)], prepare=False)
        return returned

    def _json_rows(self, jobs: Sequence[Job]) -> str:
        columns = _insert_columns(self.alias)
        return json.dumps(
            [[encode(getattr(job, name)) for name, _, encode in columns] for job in jobs]
        )

    def notify(self, queues: Sequence[str]) -> None:
        channel = get_settings().notify_channel
        with self.connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_notify(%s, q) FROM unnest(%s::text[]) AS q", [channel, list(queues)]
            )

    # -- claim ------------------------------------------------------------------------------

    def may_claim(self, queue: str) -> bool:
        return True  # the claim takes no lock that an enqueue waits for

    def claim(
        self, request: ClaimRequest, *, guarded: bool, choose_keyed: ChooseKeyed
    ) -> list[Job]:
        statement, params = self.claim_statement(request, guarded=guarded)
        picked = self.fetch_jobs(statement, params)
        jobs = [job for job in picked if job.state == sql.LEASED]
        keyed = [
            (job.pk, job.concurrency_key, job.concurrency_limit or 1)
            for job in sorted(picked, key=lambda j: (-j.priority, j.available_at, j.pk))
            if job.state != sql.LEASED and job.concurrency_key
        ]
        if keyed:
            ids = choose_keyed(keyed)
            if ids:
                table = self.connection.ops.quote_name(Job._meta.db_table)
                lease = LEASE_SQL.format(table=table, lease_set=sql.lease_set("job."))
                jobs += self.fetch_jobs(lease, {**params, "ids": ids})
        return jobs

    def claim_statement(
        self, request: ClaimRequest, *, guarded: bool
    ) -> tuple[str, dict[str, Any]]:
        """The claim's text and parameters (``benchmarks/scale.py`` EXPLAINs them too)."""
        parts = self.claim_parts(request, guarded=guarded)
        statement = CLAIM_SQL.format(**parts, lease_set=sql.lease_set("job."))
        return statement, self.claim_params(request)

    def lock_keys(self, keys: Sequence[str]) -> None:
        advisory.lock_for_transaction(self.connection, keys)

    # -- outcomes ---------------------------------------------------------------------------

    def settle(self, settlements: Sequence[Settlement]) -> list[bool]:
        rows = outcome_rows.encode(settlements, outcome_rows.iso_time, str)
        ids = [settlement.job_id for settlement in settlements]
        _, written = self.execute_prepared(settle_sql(), [rows, ids])
        return outcome_rows.mark_written(settlements, dict(written), self.alias)

    # -- wake-ups ---------------------------------------------------------------------------

    def listener(self, channel: str) -> PostgreSQLListener:
        # LISTEN needs a session of its own for as long as the worker runs: behind a pooler
        # in transaction mode, LISTEN_DATABASE names an alias that reaches the server
        # directly.
        return PostgreSQLListener(get_settings().listen_database or self.alias, channel)

    def change_counter(self) -> int | None:
        return None  # idle workers are woken by NOTIFY instead

    # -- statements -------------------------------------------------------------------------

    def execute_prepared(
        self, sql: str, params: Any, *, prepare: bool = True
    ) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
        """Run a statement the worker repeats as a prepared statement, parsed and planned
        once per connection (Django's cursors bind on the client and never prepare): for
        the claim, planning costs more than running. A process whose server refuses a
        prepared statement (PgBouncer in transaction mode before 1.21, or without
        ``max_prepared_statements``) stops preparing (``_unprepared``)."""
        prepare = prepare and get_settings().prepared_statements
        if prepare and self.alias in _unprepared:
            prepare = False
        import psycopg

        wrapper: Any = self.connection
        wrapper.close_if_health_check_failed()
        wrapper.ensure_connection()
        wrapper.validate_no_broken_transaction()
        raw = wrapper.connection
        if prepare and raw.prepare_threshold is None:
            # Django's default, which turns preparing off altogether. A threshold no query
            # reaches keeps psycopg from preparing anything on its own, and lets the
            # explicit prepare=True below work.
            raw.prepare_threshold = 2**31 - 1
        try:
            with wrapper.wrap_database_errors, psycopg.Cursor(raw) as cursor:
                self._match_time_zone(cursor)
                started = time.monotonic()
                cursor.execute(sql, params, prepare=prepare)
                columns = tuple(column.name for column in cursor.description or ())
                rows = cursor.fetchall()
                if wrapper.queries_logged:
                    # As Django's debug cursor does: DEBUG pages, assertNumQueries and
                    # CaptureQueriesContext see these statements too.
                    elapsed = time.monotonic() - started
                    wrapper.queries_log.append({"sql": sql, "time": f"{elapsed:.3f}"})
                return columns, rows
        except DatabaseError as exc:
            if isinstance(exc.__cause__, PREPARED_STATEMENT_ERRORS):
                _unprepared.add(self.alias)
                logger.warning(
                    "the database refused a prepared statement (%s); durable_jobs stops "
                    "preparing statements on %r. Behind PgBouncer in transaction mode, use "
                    "PgBouncer 1.21+ with max_prepared_statements, or set "
                    'DURABLE_JOBS["PREPARED_STATEMENTS"] = False.',
                    exc,
                    self.alias,
                )
                if prepare and not wrapper.in_atomic_block:
                    # In autocommit nothing was aborted: run it again, unprepared. (Inside
                    # a transaction the error has aborted it; the caller's atomic block
                    # fails this once.)
                    return self.execute_prepared(sql, params, prepare=False)
            raise

    def _match_time_zone(self, cursor: Any) -> None:
        # As Django's create_cursor(): a cursor-level loader only if the zones differ.
        from django.db.backends.postgresql.base import TIMESTAMPTZ_OID
        from django.db.backends.postgresql.psycopg_any import register_tzloader
        from psycopg.pq import Format

        wrapper: Any = self.connection
        loader = wrapper.connection.adapters.get_loader(TIMESTAMPTZ_OID, Format.TEXT)
        if wrapper.timezone != loader.timezone:
            register_tzloader(wrapper.timezone, cursor)


def _quote(name: str) -> str:
    return f'"{name}"'


@functools.cache
def settle_sql() -> str:
    def value(source: str) -> str:
        return (
            "o.duration_us * interval '1 microsecond'" if source == "duration_us" else f"o.{source}"
        )

    return SETTLE_SQL.format(
        fields=", ".join(
            f"(r->>{i})::{kind} AS {name}" for i, (name, kind) in enumerate(outcome_rows.COLUMNS)
        ),
        job_table=_quote(Job._meta.db_table),
        settle_set=sql.settle_set(),
        attempt_table=_quote(Attempt._meta.db_table),
        attempt_columns=", ".join(_quote(column) for column, _ in outcome_rows.ATTEMPT_COLUMNS),
        attempt_values=", ".join(value(source) for _, source in outcome_rows.ATTEMPT_COLUMNS),
    )


@functools.cache
def _insert_columns(alias: str) -> tuple[tuple[str, str, Callable[[Any], Any]], ...]:
    """Per inserted Job column: the attribute, its SQL type from JSON text, its encoder."""
    out = []
    for field in insert_fields():
        kind = field.get_internal_type()
        if kind == "JSONField":
            # Dumped to text first: JSON null would otherwise become a JSON null value,
            # where Django stores None as SQL NULL.
            out.append((field.attname, "jsonb", _json_text))
        elif kind == "DateTimeField":
            out.append((field.attname, "timestamptz", outcome_rows.iso_time))
        elif kind == "UUIDField":
            out.append((field.attname, "uuid", _text_or_none))
        elif kind in ("CharField", "TextField"):
            # text, not varchar(n): an explicit cast to varchar(n) would truncate silently,
            # where assigning text to the column refuses a value too long.
            out.append((field.attname, "text", _plain))
        else:
            out.append((field.attname, str(field.db_type(connections[alias])), _plain))
    return tuple(out)


def _plain(value: Any) -> Any:
    return value


def _json_text(value: Any) -> str | None:
    return None if value is None else json.dumps(value)


def _text_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


@functools.cache
def insert_json_sql(alias: str, *, notify: bool) -> str:
    """INSERT of the Job rows in a JSON array (see ``insert_rows``), in array order; with
    ``notify``, also ``pg_notify(%s, %s)`` once if a row was inserted."""
    names = ", ".join(_quote(field.column) for field in insert_fields())
    values = ", ".join(
        f"(r->>{i})::{kind}" for i, (_, kind, _) in enumerate(_insert_columns(alias))
    )
    insert = (
        f"INSERT INTO {_quote(Job._meta.db_table)} ({names}) "
        f"SELECT {values} FROM jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS e(r, n) "
        'ORDER BY n ON CONFLICT ("idempotency_key") DO NOTHING RETURNING "id", "idempotency_key"'
    )
    if not notify:
        return insert
    # NOTIFY inside the transaction is delivered only if it commits, so a rolled back
    # enqueue wakes nobody; one round trip does both.
    return f"WITH inserted AS ({insert}) SELECT id, pg_notify(%s, %s) FROM inserted"


class PostgreSQLListener:
    """A dedicated autocommit connection that LISTENs for enqueue notifications."""

    def __init__(self, alias: str, channel: str) -> None:
        self.alias = alias
        self.channel = channel
        self._conn: Any = None

    def connect(self) -> None:
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
