"""PostgreSQL: SKIP LOCKED claims, prepared statements, and LISTEN/NOTIFY wake-ups."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError, connections, transaction

from durable_jobs.conf import get_settings
from durable_jobs.db import advisory, outcome_rows, percentiles, postgresql_copy, rows
from durable_jobs.db.commit_mode import relax_commit
from durable_jobs.db.contract import ChooseKeyed, ClaimRequest, PassWrites
from durable_jobs.db.engine import Engine
from durable_jobs.db.postgresql_sql import (
    CLAIM_SQL,
    LEASE_SQL,
    insert_columns,
    insert_json_sql,
    notifying,
    pass_sql,
    settle_sql,
)
from durable_jobs.lifecycle import sql
from durable_jobs.models import Job

if TYPE_CHECKING:
    from durable_jobs.lifecycle.outcomes import Settlement

logger = logging.getLogger("durable_jobs")

#: Aliases whose server refused a prepared statement (PgBouncer in transaction mode without
#: prepared statements): this process runs their statements unprepared.
_unprepared: set[str] = set()

#: The result columns of each statement run through ``execute_prepared``.
_layouts: dict[str, tuple[str, ...]] = {}


@functools.cache
def prepared_statement_errors() -> tuple[type[Exception], ...]:
    """What psycopg raises when a pooler in between loses track of prepared statements.

    Imported when first needed (after a statement has run through psycopg): a project
    whose jobs live in SQLite or MySQL never loads psycopg for them, which costs a process
    about 70 ms at start-up.
    """
    from psycopg import errors

    return (errors.InvalidSqlStatementName, errors.DuplicatePreparedStatement)


class PostgreSQLEngine(Engine):
    vendor = "postgresql"
    percentiles_sql = staticmethod(percentiles.ordered_set)

    def __init__(self, alias: str) -> None:
        super().__init__(alias)
        #: PASS_SQL per claim limit and commit mode (relaxed or not), for the loop's passes.
        self._pass_statements: dict[tuple[int, bool], str] = {}

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
        wake = [get_settings().notify_channel, job.queue] if notify else []
        if self.connection.in_atomic_block:
            # Not prepared inside the project's transaction: a pooler that lost the
            # statement would fail the transaction (in autocommit it costs a retry, see
            # execute_prepared). Planned at every call then, a VALUES list costs the
            # server a fraction of what the JSON document's casts do.
            with self.connection.cursor() as cursor:
                statement = notifying(self.insert_sql(), notify)
                cursor.execute(statement, [*self.insert_values(job), *wake])
                row = cursor.fetchone()
            return None if row is None else int(row[0])
        # The same statement as insert_rows, with one row (and the NOTIFY riding along):
        # one text for every enqueue, so that, prepared, PostgreSQL parses and plans it
        # once per connection rather than once per job.
        statement = insert_json_sql(self.alias, notify=notify)
        _, rows = self.execute_prepared(statement, [self._json_rows([job]), *wake])
        return int(rows[0][0]) if rows else None

    def insert_rows(self, jobs: Sequence[Job]) -> list[tuple[Any, ...]]:
        # Keyed rows first (insert_jobs orders them so): the result stays in jobs order.
        keyed = [job for job in jobs if job.idempotency_key is not None]
        keyless = jobs[len(keyed) :]
        returned: list[tuple[Any, ...]] = []
        for group, through_copy in (
            (keyed, postgresql_copy.insert_keyed),
            (keyless, postgresql_copy.copy_keyless),
        ):
            if len(group) >= postgresql_copy.COPY_FROM:
                with self._raw_cursor(postgresql_copy.described(through_copy)) as cursor:
                    returned += through_copy(cursor, group)
            elif group:
                returned += self._insert_json(group)
        return returned

    def _insert_json(self, jobs: Sequence[Job]) -> list[tuple[Any, ...]]:
        # The rows travel as one JSON document (``json.dumps`` is one C call) in one
        # parameter, rather than as 25 parameters per row that Django's cursor would quote
        # into the statement's text one by one. Not prepared: enqueues run on the
        # project's own connections, where psycopg, once it has prepared anything,
        # answers every rollback with DEALLOCATE ALL.
        statement = insert_json_sql(self.alias, notify=False)
        _, returned = self.execute_prepared(statement, [self._json_rows(jobs)], prepare=False)
        return returned

    def _json_rows(self, jobs: Sequence[Job]) -> str:
        columns = insert_columns(self.alias)
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

    def pass_statement(
        self, settlements: Sequence[Settlement], request: ClaimRequest
    ) -> tuple[str, dict[str, Any]]:
        """A pass's text and parameters (``benchmarks/scale.py`` EXPLAINs them too)."""
        # Relaxed in the statement only where it commits on its own: in a transaction,
        # pass_transaction() has relaxed the commit already (or the caller's transaction
        # is not the pass's to relax).
        relaxed = not get_settings().synchronous_commit and not self.connection.in_atomic_block
        key = (request.limit, relaxed)
        statement = self._pass_statements.get(key)
        if statement is None:
            parts = tuple(self.claim_parts(request, guarded=True).items())
            statement = self._pass_statements[key] = pass_sql(parts, relaxed=relaxed)
        params = self.claim_params(request)
        params["outcomes"] = outcome_rows.encode(settlements, outcome_rows.iso_time, str)
        params["settled"] = [settlement.job_id for settlement in settlements]
        return statement, params

    def lock_keys(self, keys: Sequence[str]) -> None:
        advisory.lock_for_transaction(self.connection, keys)

    # -- a loop pass ------------------------------------------------------------------------

    def pass_transaction(self, *, one_claim: bool) -> contextlib.AbstractContextManager[None]:
        # A pass of one claim is one statement (PASS_SQL), which commits on its own,
        # without BEGIN and COMMIT round trips, relaxed or not (see RELAX_JOIN); other
        # passes are transactions, whose relaxed commits need SET LOCAL.
        if one_claim:
            return contextlib.nullcontext()
        if not get_settings().synchronous_commit:
            return self._relaxed_transaction()
        return self.write_transaction(savepoint=False)

    @contextlib.contextmanager
    def _relaxed_transaction(self) -> Iterator[None]:
        with self.write_transaction(savepoint=False):
            relax_commit(self)
            yield

    def settle_and_claim(
        self,
        settlements: Sequence[Settlement],
        request: ClaimRequest,
        *,
        choose_keyed: ChooseKeyed,
    ) -> PassWrites:
        layout, found = self.execute_prepared(*self.pass_statement(settlements, request))
        first = dict(zip(layout, found[0], strict=True))
        recorded = zip(first["recorded_jobs"] or (), first["recorded_attempts"] or (), strict=True)
        written = outcome_rows.mark_written(settlements, dict(recorded), self.alias)
        id_at = layout.index("id")
        jobs = rows.instances(Job, self.alias, layout, [r for r in found if r[id_at] is not None])
        keyed_waiting = bool(first["keyed_picks"]) and len(jobs) < request.limit
        if keyed_waiting and self.connection.in_atomic_block:
            # Inside the pass's transaction: flow control chooses among the keyed jobs
            # under their keys' locks, now.
            rest = dataclasses.replace(request, limit=request.limit - len(jobs))
            jobs += self.claim(rest, guarded=True, choose_keyed=choose_keyed)
            keyed_waiting = False
        return PassWrites(written, jobs, keyed_waiting)

    # -- outcomes ---------------------------------------------------------------------------

    def settle(self, settlements: Sequence[Settlement]) -> list[bool]:
        rows = outcome_rows.encode(settlements, outcome_rows.iso_time, str)
        ids = [settlement.job_id for settlement in settlements]
        _, written = self.execute_prepared(settle_sql(), {"outcomes": rows, "settled": ids})
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
        try:
            with self._raw_cursor(sql) as cursor:
                raw = cursor.connection
                if prepare and raw.prepare_threshold is None:
                    # Django's default, which turns preparing off altogether. A threshold
                    # no query reaches keeps psycopg from preparing anything on its own,
                    # and lets the explicit prepare=True below work.
                    raw.prepare_threshold = 2**31 - 1
                cursor.execute(sql, params, prepare=prepare)
                columns = _layouts.get(sql)
                if columns is None:
                    # A statement's columns never change: described once (psycopg builds
                    # an object per column at every look).
                    columns = _layouts[sql] = tuple(c.name for c in cursor.description or ())
                return columns, cursor.fetchall()
        except DatabaseError as exc:
            if isinstance(exc.__cause__, prepared_statement_errors()):
                _unprepared.add(self.alias)
                logger.warning(
                    "the database refused a prepared statement (%s); durable_jobs stops "
                    "preparing statements on %r. Behind PgBouncer in transaction mode, use "
                    "PgBouncer 1.21+ with max_prepared_statements, or set "
                    'DURABLE_JOBS["PREPARED_STATEMENTS"] = False.',
                    exc,
                    self.alias,
                )
                if prepare and not self.connection.in_atomic_block:
                    # In autocommit nothing was aborted: run it again, unprepared. (Inside
                    # a transaction the error has aborted it; the caller's atomic block
                    # fails this once.)
                    return self.execute_prepared(sql, params, prepare=False)
            raise

    @contextlib.contextmanager
    def _raw_cursor(self, logged_as: str) -> Iterator[Any]:
        """A psycopg cursor on this thread's connection, under Django's error wrapping and
        query log (DEBUG pages, assertNumQueries and CaptureQueriesContext see what runs
        on it, as ``logged_as``)."""
        wrapper: Any = self.connection
        wrapper.close_if_health_check_failed()
        wrapper.ensure_connection()
        wrapper.validate_no_broken_transaction()
        started = time.monotonic()
        with wrapper.wrap_database_errors:
            yield self._cursor_of(wrapper)
        if wrapper.queries_logged:
            elapsed = time.monotonic() - started
            wrapper.queries_log.append({"sql": logged_as, "time": f"{elapsed:.3f}"})

    def _cursor_of(self, wrapper: Any) -> Any:
        """This connection's psycopg cursor for our statements, kept with it: a cursor
        made per statement, with its own copy of the loaders, cost more than some of the
        statements it ran."""
        import psycopg

        kept = getattr(wrapper, "_durable_jobs_cursor", None)
        zone = wrapper.timezone_name
        if kept is not None and kept[0] is wrapper.connection and kept[1] == zone:
            return kept[2]
        cursor = psycopg.Cursor(wrapper.connection)
        self._match_time_zone(cursor)
        wrapper._durable_jobs_cursor = (wrapper.connection, zone, cursor)
        return cursor

    def _match_time_zone(self, cursor: Any) -> None:
        # Timestamps in the time zone Django expects. Django's own loader (registered on
        # the connection) wraps psycopg's in Python; where the session's zone is Django's
        # (as Django sets it on connecting), psycopg's C loader gives the same instants in
        # the same zone, in a fraction of the time: a claim reads six per job.
        from django.db.backends.postgresql.base import TIMESTAMPTZ_OID
        from django.db.backends.postgresql.psycopg_any import register_tzloader
        from psycopg import adapters
        from psycopg.pq import Format

        wrapper: Any = self.connection
        session_zone = wrapper.connection.pgconn.parameter_status(b"TimeZone")
        if session_zone == wrapper.timezone_name.encode():
            cursor.adapters.register_loader(
                TIMESTAMPTZ_OID, adapters.get_loader(TIMESTAMPTZ_OID, Format.TEXT)
            )
            return
        # As Django's create_cursor(): a cursor-level loader only if the zones differ.
        loader = wrapper.connection.adapters.get_loader(TIMESTAMPTZ_OID, Format.TEXT)
        if wrapper.timezone != loader.timezone:
            register_tzloader(wrapper.timezone, cursor)


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
