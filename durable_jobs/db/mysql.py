"""MySQL 8 and MariaDB 10.6+: SKIP LOCKED claims, JSON_TABLE batches, polled wake-ups.

Neither server has ``UPDATE ... RETURNING`` or partial indexes, and their ``INSERT``
has no ``ON CONFLICT``, so this engine differs from PostgreSQL's in three ways:

* A claim is three statements in one transaction: the ``SELECT ... FOR UPDATE SKIP
  LOCKED`` that picks (and row-locks) the jobs, the ``UPDATE`` that leases them, and
  the ``SELECT`` that reads them back. The pick walks an index over two generated
  columns that migration 0011 adds on these servers only (``claim_queue``: the queue
  while the job is claimable, else NULL; ``claim_order``: the negated priority), so
  it reads waiting jobs in claim order however many finished ones the table holds.
* An outcome batch locks the jobs still leased under each row's token (``FOR
  UPDATE``), then moves exactly those and inserts their attempts, each statement
  joining the batch as ``JSON_TABLE`` (one parameter whatever the batch size).
* A taken idempotency key is skipped with ``INSERT IGNORE``, which also downgrades
  other errors to warnings, so the values are checked first (:func:`check_lengths`)
  and keyless rows use a plain ``INSERT``.

There is no LISTEN/NOTIFY: idle workers poll the job table's highest id (see
:meth:`MySQLEngine.change_counter`), backing off while nothing changes.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import DataError, transaction

from durable_jobs.db import mysql_checks, named_locks, outcome_rows
from durable_jobs.db.contract import ChooseKeyed, ClaimRequest
from durable_jobs.db.engine import Engine
from durable_jobs.db.inserts import insert_fields
from durable_jobs.lifecycle import sql
from durable_jobs.models import Attempt, Job

if TYPE_CHECKING:
    from django.core.checks import CheckMessage

    from durable_jobs.lifecycle.outcomes import Settlement

# The index is named: on a small or freshly changed table the optimizer may prefer the
# (state, queue, available_at) index and sort what it finds, which locks every waiting
# job it reads rather than the first few in claim order.
PICK_SQL = """
SELECT id, concurrency_key, concurrency_limit FROM {table} AS job
FORCE INDEX (durable_job_claim_my)
WHERE claim_queue = %(queue)s
  AND state IN ({sources})
  AND available_at <= %(now)s
  {guard}
  {key_filter}
ORDER BY claim_order, available_at, id
LIMIT {limit}
FOR UPDATE SKIP LOCKED
"""

LEASE_SQL = "UPDATE {table} SET {lease_set} WHERE id IN ({ids})"
READ_SQL = "SELECT * FROM {table} WHERE id IN ({ids})"

# The fence, taken as row locks: the jobs of the batch still leased under its tokens.
# Locked in id order, so two writers of overlapping batches (a worker and the rescuer)
# wait for each other instead of deadlocking.
FENCE_SQL = """
SELECT job.id FROM {job_table} AS job
JOIN {outcomes} ON job.id = o.job_id
WHERE job.state = o.source AND job.lease_token = o.lease_token
ORDER BY job.id
FOR UPDATE
"""

SETTLE_SQL = """
UPDATE {job_table} AS job JOIN {outcomes} ON job.id = o.job_id
SET {settle_set}
WHERE job.id IN ({ids})
"""

RECORD_SQL = """
INSERT INTO {attempt_table} ({attempt_columns})
SELECT {attempt_values} FROM {outcomes}
WHERE o.job_id IN ({ids})
ORDER BY o.job_id
"""

#: JSON_TABLE column types of the outcome rows (see outcome_rows.COLUMNS).
OUTCOME_TYPES = {
    "bigint": "BIGINT",
    "int": "INT",
    "boolean": "BOOLEAN",
    "timestamptz": "DATETIME(6)",
    "uuid": "CHAR(32)",
    "text": "LONGTEXT",
    "jsonb": "LONGTEXT",
}
#: Text from JSON_TABLE compares byte for byte with the tables' columns (whatever their
#: collation): the fence compares tokens and state names.
TEXT = "CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"


class MySQLEngine(Engine):
    vendor = "mysql"

    @contextlib.contextmanager
    def write_transaction(self, *, savepoint: bool = True) -> Iterator[None]:
        connection = self.connection
        if connection.in_atomic_block:
            with transaction.atomic(using=self.alias, savepoint=savepoint):
                yield
            return
        connection.ensure_connection()
        with named_locks.released_after(connection), transaction.atomic(using=self.alias):
            yield

    def keyed_transaction(self, key: str) -> contextlib.AbstractContextManager[None]:
        # The lock before the transaction's first read: under REPEATABLE READ the first
        # statement takes the snapshot, which must include the previous holder's commit.
        return _locked_before(self, key)

    # -- enqueue ----------------------------------------------------------------------------

    def rows_per_insert(self) -> int:
        return 2000

    def insert_job(self, job: Job, *, notify: bool) -> int | None:
        values = self.insert_values(job)
        check_lengths([values])
        # One row: a VALUES list costs the server less than JSON_TABLE, which pays off
        # from a few rows on (see insert_rows).
        statement = row_insert_sql(self.alias, ignore=job.idempotency_key is not None)
        with self.connection.cursor() as cursor:
            cursor.execute(statement, values)
            if self.connection.features.can_return_columns_from_insert:  # MariaDB
                row = cursor.fetchone()
                return None if row is None else int(row[0])
            return int(cursor.lastrowid) if cursor.rowcount else None

    def insert_rows(self, jobs: Sequence[Job]) -> list[tuple[Any, ...]]:
        # Keyed rows first (insert_jobs orders them so): the result stays in jobs order.
        keyed = [job for job in jobs if job.idempotency_key is not None]
        keyless = [job for job in jobs if job.idempotency_key is None]
        returned: list[tuple[Any, ...]] = []
        for group, ignore in ((keyed, True), (keyless, False)):
            if not group:
                continue
            values = [self.insert_values(job) for job in group]
            check_lengths(values)
            if self.connection.features.can_return_columns_from_insert:  # MariaDB
                with self.connection.cursor() as cursor:
                    cursor.execute(insert_sql(self.alias, ignore=ignore), [json.dumps(values)])
                    returned += cursor.fetchall()
            else:
                # MySQL has no RETURNING: a row per statement, each with its own id.
                for job in group:
                    pk = self.insert_job(job, notify=False)
                    if pk is not None:
                        returned.append((pk, job.idempotency_key))
        return returned

    def notify(self, queues: Sequence[str]) -> None:
        pass  # workers in other processes poll change_counter instead

    # -- claim ------------------------------------------------------------------------------

    def may_claim(self, queue: str) -> bool:
        return True  # SKIP LOCKED: a claim does not hold up enqueues

    def claim(
        self, request: ClaimRequest, *, guarded: bool, choose_keyed: ChooseKeyed
    ) -> list[Job]:
        parts = self.claim_parts(request, guarded=guarded)
        params = self.claim_params(request)
        with self.connection.cursor() as cursor:
            cursor.execute(PICK_SQL.format(**parts), params)
            picked = cursor.fetchall()
            ids = [pk for pk, key, _ in picked if not key]
            keyed = [(pk, key, limit or 1) for pk, key, limit in picked if key]
            if keyed:
                ids += choose_keyed(keyed)
            if not ids:
                return []
            # The ids are integers from the pick, written into the text (named and
            # positional placeholders do not mix in one statement).
            listed = ", ".join(str(int(pk)) for pk in ids)
            lease_set = sql.lease_set("")
            cursor.execute(
                LEASE_SQL.format(table=parts["table"], lease_set=lease_set, ids=listed), params
            )
        return self.fetch_jobs(READ_SQL.format(table=parts["table"], ids=listed), None)

    def lock_keys(self, keys: Sequence[str]) -> None:
        named_locks.lock(self.connection, keys)

    # -- outcomes ---------------------------------------------------------------------------

    def settle(self, settlements: Sequence[Settlement]) -> list[bool]:
        rows = outcome_rows.encode(settlements, self._json_time(), _token_hex)
        statements = settle_sql(self.alias)
        attempt_ids: dict[int, int] = {}
        with self.write_transaction(savepoint=False), self.connection.cursor() as cursor:
            cursor.execute(statements["fence"], [rows])
            moved = [int(pk) for (pk,) in cursor.fetchall()]
            if moved:
                ids = ", ".join(str(pk) for pk in moved)
                cursor.execute(statements["settle"].replace("{ids}", ids), [rows])
                cursor.execute(statements["record"].replace("{ids}", ids), [rows])
                if "newest" in statements:
                    # The jobs are locked: their newest attempt is the one just inserted.
                    cursor.execute(statements["newest"].replace("{ids}", ids))
                attempt_ids = {int(job): int(pk) for job, pk in cursor.fetchall()}
        return outcome_rows.mark_written(settlements, attempt_ids, self.alias)

    def _json_time(self) -> Callable[[datetime | None], str | None]:
        # As Django stores it: naive text in the connection's time zone (UTC by default).
        zone = self.connection.timezone

        def json_time(value: datetime | None) -> str | None:
            return None if value is None else str(value.astimezone(zone).replace(tzinfo=None))

        return json_time

    # -- wake-ups ---------------------------------------------------------------------------

    def listener(self, channel: str) -> None:
        return None  # no notifications: idle workers poll change_counter

    def change_counter(self) -> int | None:
        # The newest job's id: one probe of the primary key's last entry. It changes when
        # any connection commits a new job; jobs that become due, or that an operator
        # retries, are found by the regular poll.
        with self.connection.cursor() as cursor:
            cursor.execute(f"SELECT MAX(id) FROM `{Job._meta.db_table}`")
            value = cursor.fetchone()[0]
        return int(value or 0)

    # -- checks -----------------------------------------------------------------------------

    def check(self, *, server: bool = False) -> list[CheckMessage]:
        if server:
            return mysql_checks.check_server(self.connection)
        return mysql_checks.check(self.connection)

    def is_transient(self, exc: BaseException) -> bool:
        return mysql_checks.is_transient(exc)


def _token_hex(value: Any) -> str:
    return str(value.hex)


@contextlib.contextmanager
def _locked_before(engine: MySQLEngine, key: str) -> Iterator[None]:
    if engine.connection.in_atomic_block:
        with engine.write_transaction():
            engine.lock_keys([key])
            yield
        return
    connection = engine.connection
    connection.ensure_connection()
    with named_locks.released_after(connection):
        named_locks.lock(connection, [key])
        with transaction.atomic(using=engine.alias):
            yield


def check_lengths(rows: Sequence[Sequence[Any]]) -> None:
    """Refuse a value longer than its column, as PostgreSQL does: MySQL in a non-strict
    ``sql_mode``, and ``INSERT IGNORE`` in any mode, would cut it short instead."""
    for row in rows:
        for position, limit, name in _LIMITED:
            value = row[position]
            if value is not None and len(value) > limit:
                raise DataError(
                    f"Job.{name} is {len(value)} characters long; its column holds at most "
                    f"{limit}. Use a shorter value."
                )


@functools.cache
def _limited_fields() -> tuple[tuple[int, int, str], ...]:
    return tuple(
        (position, field.max_length, field.name)
        for position, field in enumerate(insert_fields())
        if field.get_internal_type() == "CharField" and field.max_length
    )


_LIMITED = _limited_fields()


def _column_type(field: Any, connection: Any) -> str:
    kind = field.get_internal_type()
    if kind in ("CharField", "TextField", "JSONField", "UUIDField"):
        # LONGTEXT, then assigned to the column: a value too long is refused there, where
        # a VARCHAR(n) here would turn it into NULL.
        return f"LONGTEXT {TEXT}"
    return str(field.db_type(connection))


@functools.cache
def row_insert_sql(alias: str, *, ignore: bool) -> str:
    """INSERT of one Job row from :func:`insert_fields` values; on MariaDB it returns the
    row's id (no row when ``ignore`` skipped a taken key)."""
    from django.db import connections

    connection = connections[alias]
    qn = connection.ops.quote_name
    fields = insert_fields()
    returning = (
        f" RETURNING {qn('id')}" if connection.features.can_return_columns_from_insert else ""
    )
    return (
        f"INSERT {'IGNORE ' if ignore else ''}INTO {qn(Job._meta.db_table)} "
        f"({', '.join(qn(field.column) for field in fields)}) "
        f"VALUES ({', '.join(['%s'] * len(fields))}){returning}"
    )


@functools.cache
def insert_sql(alias: str, *, ignore: bool) -> str:
    """INSERT of Job rows from a JSON array of :func:`insert_fields` values, in array
    order; on MariaDB it returns each inserted row's id and key."""
    from django.db import connections

    connection = connections[alias]
    qn = connection.ops.quote_name
    fields = insert_fields()
    columns = ", ".join(
        f"c{i} {_column_type(field, connection)} PATH '$[{i}]'" for i, field in enumerate(fields)
    )
    names = ", ".join(qn(field.column) for field in fields)
    values = ", ".join(f"r.c{i}" for i in range(len(fields)))
    returning = (
        f" RETURNING {qn('id')}, {qn('idempotency_key')}"
        if connection.features.can_return_columns_from_insert
        else ""
    )
    return (
        f"INSERT {'IGNORE ' if ignore else ''}INTO {qn(Job._meta.db_table)} ({names}) "
        f"SELECT {values} FROM JSON_TABLE(%s, '$[*]' COLUMNS (n FOR ORDINALITY, {columns})) "
        f"AS r ORDER BY r.n{returning}"
    )


def _outcome_type(kind: str) -> str:
    found = OUTCOME_TYPES[kind]
    return f"{found} {TEXT}" if found in ("LONGTEXT", "CHAR(32)") else found


@functools.cache
def settle_sql(alias: str) -> dict[str, str]:
    """The fence, the job UPDATE, the attempts' INSERT (on MariaDB returning their ids)
    and, on MySQL, the SELECT of the attempts' ids. ``{ids}``: the fenced job ids."""
    from django.db import connections

    returning = connections[alias].features.can_return_columns_from_insert
    columns = ", ".join(
        f"{name} {_outcome_type(kind)} PATH '$[{i}]'"
        for i, (name, kind) in enumerate(outcome_rows.COLUMNS)
    )
    outcomes = f"JSON_TABLE(%s, '$[*]' COLUMNS ({columns})) AS o"
    job_table = f"`{Job._meta.db_table}`"
    attempt_table = f"`{Attempt._meta.db_table}`"
    statements = {
        "fence": FENCE_SQL.format(job_table=job_table, outcomes=outcomes),
        "settle": SETTLE_SQL.format(
            job_table=job_table,
            outcomes=outcomes,
            settle_set=sql.settle_set(assigned="job.", concat="CONCAT"),
            ids="{ids}",
        ),
        "record": RECORD_SQL.format(
            attempt_table=attempt_table,
            attempt_columns=", ".join(f"`{c}`" for c, _ in outcome_rows.ATTEMPT_COLUMNS),
            attempt_values=", ".join(f"o.{s}" for _, s in outcome_rows.ATTEMPT_COLUMNS),
            outcomes=outcomes,
            ids="{ids}",
        )
        + (" RETURNING job_id, id" if returning else ""),
    }
    if not returning:
        statements["newest"] = (
            f"SELECT job_id, MAX(id) FROM {attempt_table} WHERE job_id IN ({{ids}}) GROUP BY job_id"
        )
    return statements
