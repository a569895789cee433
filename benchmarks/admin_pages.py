#!/usr/bin/env python
"""Response times of the admin dashboard over large job tables.

    python benchmarks/admin_pages.py [--database postgres|sqlite|both|mysql] [--jobs N]
                                     [--runs 20] [--explain] [--keep] [--reuse]
                                     [--write docs/benchmarks.md]

For each database (by default PostgreSQL with 1,000,000 jobs, then SQLite with 100,000;
``--database mysql``: MariaDB or MySQL 8 with 1,000,000):

1. migrate a dedicated database (PostgreSQL and MariaDB/MySQL: ``dj_admin_bench``,
   dropped and created again, utf8mb4 on MariaDB/MySQL; SQLite: a file in the temporary
   directory);
2. fill it with set-based SQL (one ``INSERT ... SELECT`` per table): finished jobs
   spread over the last 30 days, a few thousand of them in the last hour, dead jobs with
   1-3 failed attempts, cancelled jobs, 1.5 % waiting (queued or retrying), a few leased
   by live nodes, and an ``Attempt`` row for every attempt of a finished or retrying
   job; then ``VACUUM ANALYZE`` / ``ANALYZE``;
3. requests each admin page through Django's test ``Client`` as a superuser, once to
   warm up and then ``--runs`` times, recording the response time, the queries
   (``CaptureQueriesContext``) and each query's duration.

It prints a Markdown section (``--write FILE`` also puts it between the
``<!-- admin-pages:start -->`` and ``<!-- admin-pages:end -->`` markers of FILE) and,
with ``--explain``, every query of each page with its median duration, and the plan of
the slowest one and of any other over ``--explain-ms`` (PostgreSQL:
``EXPLAIN (ANALYZE, BUFFERS)``; SQLite: ``EXPLAIN QUERY PLAN``; MariaDB:
``ANALYZE FORMAT=JSON``; MySQL: ``EXPLAIN ANALYZE``). A MariaDB/MySQL run alone writes
between the ``admin-pages-mysql`` markers, so it never replaces the other databases'.

``--keep`` leaves the database in place; a later ``--reuse`` measures it again without
creating the data (migrations are applied first, so new indexes are built; the most
recent day of data is moved forward to the present, so "the last hour" still holds
the recent completions).

Each database is handled by a child process (``--phase``) with its own settings
(``benchmarks/admin_settings.py``); the parent bounds it with ``--timeout``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    # Run as a script: the repository's root must be importable for ``benchmarks.harness``.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import harness
from benchmarks.harness import log, percentile

SETTINGS_MODULE = "benchmarks.admin_settings"
MARKERS = harness.Markers("admin-pages")
#: Where a run of MariaDB/MySQL alone is written.
MYSQL_MARKERS = harness.Markers("admin-pages-mysql")
DEFAULT_JOBS = {"postgres": 1_000_000, "sqlite": 100_000, "mysql": 1_000_000}
LABELS = {"postgres": "PostgreSQL", "sqlite": "SQLite", "mysql": "MySQL"}
#: Bump when the generated data changes, so that ``--reuse`` does not measure old data.
DATA_VERSION = "2"
#: The table where the generator records what it made (outside Django's models).
META_TABLE = "admin_bench_meta"

SECOND = 1_000_000  # microseconds: generated times are integers until the last step
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE
DAY = 24 * HOUR

#: Handler name -> queue. Handlers run on one queue each; more of them on "default".
HANDLERS = [
    ("shop.send_receipt", "emails"),
    ("shop.send_shipping_notice", "emails"),
    ("accounts.send_password_reset", "emails"),
    ("marketing.send_newsletter", "emails"),
    ("shop.charge_order", "billing"),
    ("shop.refund_order", "billing"),
    ("shop.deliver_webhook", "webhooks"),
    ("integrations.sync_crm_contact", "webhooks"),
    ("integrations.push_slack_message", "webhooks"),
    ("reports.build_daily_sales", "reports"),
    ("reports.export_csv", "reports"),
    ("catalog.reindex_product", "default"),
    ("catalog.resize_images", "default"),
    ("catalog.import_feed_row", "default"),
    ("shop.reserve_stock", "default"),
    ("shop.release_stock", "default"),
    ("accounts.recompute_loyalty", "default"),
    ("search.update_document", "default"),
    ("analytics.track_event", "default"),
    ("core.cleanup_uploads", "default"),
]
QUEUES = sorted({queue for _, queue in HANDLERS})
#: The queue the "filtered by queue" page shows: neither the largest nor the smallest.
FILTER_QUEUE = "emails"
NODES = 4

#: Error class, message, outcome of the attempt. A job fails with one of these on every
#: attempt, so the error groups are a handful, as they are in practice.
ERRORS = [
    (
        "requests.exceptions.ConnectionError",
        "HTTPSConnectionPool(host='api.payments.example', port=443): Max retries exceeded "
        "with url: /v1/charges (Caused by NewConnectionError('Failed to establish a new "
        "connection: [Errno 111] Connection refused'))",
        "failed",
    ),
    (
        "durable_jobs.exceptions.JobTimeout",
        "the handler ran for longer than its timeout of 30 s",
        "timed_out",
    ),
    ("KeyError", "'shipping_address'", "failed"),
    (
        "django.db.utils.OperationalError",
        "could not serialize access due to concurrent update",
        "failed",
    ),
    ("shop.errors.PaymentDeclined", "card_declined: insufficient_funds", "discarded"),
    (
        "requests.exceptions.HTTPError",
        "502 Server Error: Bad Gateway for url: https://hooks.example.com/orders",
        "failed",
    ),
]


def traceback_for(error_class: str, message: str) -> str:
    """A traceback of a few hundred bytes, shaped like the ones the worker records."""
    short = error_class.rsplit(".", 1)[-1]
    return (
        "Traceback (most recent call last):\n"
        '  File "/srv/app/venv/lib/python3.12/site-packages/durable_jobs/worker/run.py", '
        "line 212, in run_handler\n"
        "    result = handler(**payload)\n"
        '  File "/srv/app/shop/jobs.py", line 88, in handle\n'
        "    response = client.post(endpoint, json=body, timeout=10)\n"
        '  File "/srv/app/shop/clients.py", line 41, in post\n'
        "    return self._send(method, url, **kwargs)\n"
        f"{short}: {message}\n"
    )


def sql_literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


# ================================================================================================
# The generated data
# ================================================================================================


@dataclass(frozen=True)
class Layout:
    """How the ids 1..jobs are laid out. Ids grow with ``created_at``, as they do when
    jobs are enqueued one after another: first the finished jobs of the last 30 days
    (the last ``recent`` of them in the last hour), then the leased jobs, then the
    waiting ones (both created in the last ten minutes)."""

    jobs: int
    leased: int
    waiting: int
    recent: int

    @classmethod
    def for_jobs(cls, jobs: int) -> Layout:
        leased = min(20, max(1, jobs // 1000))
        waiting = max(1, jobs * 15 // 1000)
        recent = min(max(3000, jobs // 200), (jobs - leased - waiting) // 2)
        return cls(jobs=jobs, leased=leased, waiting=waiting, recent=recent)

    @classmethod
    def history(cls, jobs: int) -> Layout:
        """Finished jobs only, none leased or waiting: the history under a live queue."""
        return cls(jobs=jobs, leased=0, waiting=0, recent=min(max(3000, jobs // 200), jobs // 2))

    @property
    def finished(self) -> int:
        return self.jobs - self.leased - self.waiting

    @property
    def older(self) -> int:
        return self.finished - self.recent


class Dialect:
    """The few expressions that differ between PostgreSQL, SQLite and MySQL/MariaDB. Times
    are computed as integer microseconds since the epoch and converted only when a row is
    written.

    On MySQL/MariaDB the statements run with ``PIPES_AS_CONCAT`` in the session's
    ``sql_mode`` (see :func:`insert_jobs_and_attempts`), so ``||`` joins text there too.
    """

    def __init__(self, vendor: str, *, mariadb: bool = False) -> None:
        self.pg = vendor == "postgresql"
        self.my = vendor == "mysql"
        self.mariadb = mariadb

    def series(self, count: int) -> str:
        if self.pg:
            # bigint: products of the id with microseconds overflow an integer.
            return f"s(i) AS (SELECT generate_series(1::bigint, {count}))"
        if self.mariadb:
            # MariaDB's SEQUENCE engine: a table of 1..count, no recursion. Signed, so
            # that differences of ids may be negative.
            return f"s(i) AS (SELECT CAST(seq AS SIGNED) FROM seq_1_to_{count})"
        return f"s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < {count})"

    def ts(self, micros: str) -> str:
        if self.pg:
            return f"(TIMESTAMPTZ 'epoch' + ({micros}) * INTERVAL '1 microsecond')"
        if self.my:
            # Django stores aware datetimes as naive UTC DATETIME(6) there.
            return f"TIMESTAMPADD(MICROSECOND, ({micros}), TIMESTAMP '1970-01-01 00:00:00')"
        # Django's own text form of an aware datetime on SQLite (UTC, microseconds).
        return (
            f"(strftime('%Y-%m-%d %H:%M:%S', ({micros}) / 1000000, 'unixepoch') "
            f"|| '.' || printf('%06d', ({micros}) % 1000000))"
        )

    def div(self, value: str, divisor: int) -> str:
        """Integer division (``/`` is exact division on MySQL/MariaDB)."""
        return f"({value} DIV {divisor})" if self.my else f"({value} / {divisor})"

    def rows(self, rows: list[str]) -> str:
        """The body of a CTE of literal rows, each ``"a, b, c"``."""
        if self.my:
            # MySQL 8 spells a VALUES row ROW(...), MariaDB does not: SELECTs suit both.
            return " UNION ALL ".join(f"SELECT {row}" for row in rows)
        return "VALUES " + ", ".join(f"({row})" for row in rows)

    def duration(self, micros: str) -> str:
        # DurationField: an interval on PostgreSQL, a bigint of microseconds elsewhere.
        return f"(({micros}) * INTERVAL '1 microsecond')" if self.pg else f"({micros})"

    def json_object(self, *pairs: str) -> str:
        return ("jsonb_build_object(" if self.pg else "json_object(") + ", ".join(pairs) + ")"

    def json_literal(self, text: str) -> str:
        return sql_literal(text) + ("::jsonb" if self.pg else "")

    def uuid(self) -> str:
        # UUIDField: uuid on PostgreSQL (and MariaDB 10.7+), 32 hex characters elsewhere
        # (which MariaDB's uuid type takes too).
        if self.pg:
            return "gen_random_uuid()"
        if self.my:
            return "REPLACE(UUID(), '-', '')"
        return "lower(hex(randomblob(16)))"


def base_ctes(layout: Layout, dialect: Dialect, ref: int) -> str:
    """CTEs shared by the two INSERTs: ``kind`` has one row per job with its state and
    its times in microseconds, derived from the id alone, so that the attempts can be
    generated from the same rows without reading the job table back."""
    handlers = dialect.rows(
        [
            f"{index}, {sql_literal(name)}, {sql_literal(queue)}"
            for index, (name, queue) in enumerate(HANDLERS)
        ]
    )
    errors = dialect.rows(
        [
            f"{index}, {sql_literal(cls)}, {sql_literal(message)}, {sql_literal(outcome)}, "
            f"{sql_literal(traceback_for(cls, message))}"
            for index, (cls, message, outcome) in enumerate(ERRORS)
        ]
    )
    nums = dialect.rows(["1", "2", "3"])
    div = dialect.div
    older, finished, leased = layout.older, layout.finished, layout.leased
    month = 30 * DAY
    # Spacing of the leased and waiting jobs' creation times (a layout may have none).
    leased_step = 9 * MINUTE // max(1, leased)
    waiting_step = 9 * MINUTE // max(1, layout.waiting)
    # Multiplicative hashes of the id stand in for random(): the same data on both
    # databases and on every run. (i * 2654435761) % 1000 is a permutation of each block
    # of 1000 ids, so the states are spread evenly.
    return f"""
WITH RECURSIVE
{dialect.series(layout.jobs)},
handlers(hidx, hname, hqueue) AS ({handlers}),
errors(eidx, eclass, emessage, eoutcome, etraceback) AS ({errors}),
nums(n) AS ({nums}),
hashed AS (
    SELECT i,
        (i * 2654435761) % 1000 AS h,
        (i * 2246822519) % 4294967291 AS h2,
        (i * 3266489917) % 4294967291 AS h3,
        CASE
            WHEN i <= {older} THEN {ref - month} + (i - 1) * {(month - HOUR) // older}
            WHEN i <= {finished}
                THEN {ref - HOUR} + (i - {older} - 1) * {(HOUR - MINUTE) // layout.recent}
            WHEN i <= {finished + leased}
                THEN {ref - 10 * MINUTE} + (i - {finished} - 1) * {leased_step}
            ELSE {ref - 10 * MINUTE}
                + (i - {finished + leased} - 1) * {waiting_step}
        END AS c
    FROM s
),
staged AS (
    SELECT i, h2, h3, c,
        h2 % {len(HANDLERS)} AS hn,
        {div("h2", 20)} % {len(ERRORS)} AS e,
        CASE
            WHEN i > {finished + leased} THEN
                CASE WHEN {div("h2", 720)} % 5 = 0 THEN 'retrying' ELSE 'queued' END
            WHEN i > {finished} THEN 'leased'
            WHEN h < 30 THEN 'dead'
            WHEN h < 50 THEN 'cancelled'
            ELSE 'completed'
        END AS state,
        (h3 % 2000) * 1000 AS wait,
        20000 + ({div("h3", 2000)} % 3000) * 1000 AS dur,
        {div("h2", 120)} % 6 AS dice
    FROM hashed
),
counted AS (
    SELECT staged.*,
        CASE state
            WHEN 'completed' THEN 1
            WHEN 'leased' THEN 1
            WHEN 'dead' THEN 1 + dice % 3
            WHEN 'retrying' THEN 1 + dice % 2
            ELSE 0
        END AS na
    FROM staged
),
kind AS (
    SELECT counted.*,
        CASE
            WHEN state = 'leased' THEN {ref} - (i - {finished}) * {SECOND}
            WHEN na > 0 THEN c + wait + (na - 1) * {10 * SECOND}
        END AS a
    FROM counted
)
"""


def job_columns(layout: Layout, dialect: Dialect, ref: int, node_ids: list[int]) -> dict[str, str]:
    """Column -> SQL expression over ``kind`` (k), ``handlers`` (hd) and ``errors`` (er)."""
    ts = dialect.ts
    node_case = " ".join(f"WHEN {index} THEN {node_id}" for index, node_id in enumerate(node_ids))
    # Without nodes there are no leased jobs either (a CASE needs at least one WHEN).
    leased_by = (
        f"CASE WHEN k.state = 'leased' THEN CASE k.i % {len(node_ids)} {node_case} END END"
        if node_ids
        else "NULL"
    )
    ok = dialect.json_literal('{"ok": true}')
    finished = "CASE WHEN k.state IN ('completed', 'dead') THEN k.a + k.dur "
    finished += "WHEN k.state = 'cancelled' THEN k.c + k.wait END"
    return {
        "id": "k.i",
        "queue": "hd.hqueue",
        "name": "hd.hname",
        "payload": dialect.json_object(
            "'order_id'", "k.i", "'customer'", "'cus_' || (k.i % 50000)", "'source'", "'web'"
        ),
        # A quarter of the jobs are enqueued with a key, like "shop.send_receipt:123".
        "idempotency_key": f"CASE WHEN {dialect.div('k.h2', 3600)} % 4 = 0 "
        "THEN hd.hname || ':' || k.i END",
        "unique_states": "''",
        "state": "k.state",
        "priority": f"CASE WHEN {dialect.div('k.h3', 6000000)} % 10 = 0 THEN 10 ELSE 0 END",
        "attempts": "k.na",
        # A dead job has used all of its retries.
        "max_retries": "CASE WHEN k.state = 'dead' THEN k.na - 1 ELSE 10 END",
        "available_at": ts(
            f"CASE WHEN k.state = 'retrying' THEN {ref} + (k.h3 % 600 + 1) * {SECOND} ELSE k.c END"
        ),
        "attempted_at": ts("k.a"),
        "lease_expires_at": ts(f"CASE WHEN k.state = 'leased' THEN {ref + 5 * MINUTE} END"),
        "leased_by_id": leased_by,
        "lease_token": f"CASE WHEN k.state = 'leased' THEN {dialect.uuid()} END",
        "created_at": ts("k.c"),
        "updated_at": ts(
            f"CASE WHEN k.state = 'retrying' THEN k.a + k.dur ELSE COALESCE({finished}, k.a, k.c) "
            "END"
        ),
        "finished_at": ts(finished),
        "result": f"CASE WHEN k.state = 'completed' THEN {ok} END",
        "last_error": "CASE WHEN k.state IN ('dead', 'retrying') "
        "THEN er.eclass || ': ' || er.emessage ELSE '' END",
        "meta": dialect.json_literal("{}"),
    }


def attempt_columns(dialect: Dialect) -> dict[str, str]:
    """Column -> SQL expression over ``kind`` (k), ``nums`` (nu), ``handlers`` (hd) and
    ``errors`` (er)."""
    started = f"k.c + k.wait + (nu.n - 1) * {10 * SECOND}"
    failed = "k.state <> 'completed'"
    return {
        "job_id": "k.i",
        "number": "nu.n",
        "name": "hd.hname",
        "node": f"'worker-' || (1 + k.i % {NODES})",
        "started_at": dialect.ts(started),
        "finished_at": dialect.ts(f"{started} + k.dur"),
        "duration": dialect.duration("k.dur"),
        "outcome": f"CASE WHEN {failed} THEN er.eoutcome ELSE 'completed' END",
        "error_class": f"CASE WHEN {failed} THEN er.eclass ELSE '' END",
        "error_message": f"CASE WHEN {failed} THEN er.emessage ELSE '' END",
        "traceback": f"CASE WHEN {failed} THEN er.etraceback ELSE '' END",
        "log": "''",
    }


def complete_columns(model: Any, columns: dict[str, str], ref: int, dialect: Dialect) -> None:
    """Fill in columns the generator does not know (added to the model since it was
    written) from their defaults, or stop with a clear message."""
    for field in model._meta.concrete_fields:
        if field.column in columns or field.null or field.primary_key:
            continue
        if not field.has_default():
            raise SystemExit(
                f"{model.__name__}.{field.name} is NOT NULL without a default: "
                "teach benchmarks/admin_pages.py how to fill it"
            )
        default = field.default
        if default in (dict, list):
            columns[field.column] = dialect.json_literal(json.dumps(default()))
        elif callable(default) and getattr(default, "__name__", "") == "now":
            columns[field.column] = dialect.ts(str(ref))
        elif isinstance(default, bool):
            columns[field.column] = "TRUE" if default else "FALSE"
        elif isinstance(default, int | float):
            columns[field.column] = repr(default)
        elif isinstance(default, str):
            columns[field.column] = sql_literal(default)
        else:
            raise SystemExit(f"{model.__name__}.{field.name}: default {default!r} not supported")


# ================================================================================================
# Phase: one database, inside a Django-configured child process
# ================================================================================================


@dataclass
class Page:
    label: str
    path: str | None  # None: the page does not exist (yet)
    # Text the page must contain (the link to the job a search should find): a search
    # that finds nothing would be measured as a fast page.
    expect: str | None = None


class Database:
    """The phase's database: statements outside the ORM, and what differs by vendor."""

    def __init__(self) -> None:
        from django.db import connection

        self.connection = connection
        self.vendor = connection.vendor  # "postgresql", "sqlite" or "mysql"
        self.mariadb = self.vendor == "mysql" and bool(connection.mysql_is_mariadb)

    def execute(self, sql: str, params: Any = None) -> Any:
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall() if cursor.description else None

    def analyze(self, *, vacuum: bool) -> None:
        started = time.perf_counter()
        if self.vendor == "postgresql":
            # VACUUM also sets the visibility map, without which no scan is index-only.
            self.execute("VACUUM ANALYZE" if vacuum else "ANALYZE")
        elif self.vendor == "mysql":
            # InnoDB's statistics of every table (there is no VACUUM to run).
            quote = self.connection.ops.quote_name
            tables = ", ".join(quote(t) for t in self.connection.introspection.table_names())
            self.execute(f"ANALYZE TABLE {tables}")
        else:
            self.execute("ANALYZE")
            self.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        what = "VACUUM ANALYZE" if vacuum and self.vendor == "postgresql" else "ANALYZE"
        log(f"  {what} in {time.perf_counter() - started:.1f} s")

    def facts(self) -> dict[str, str]:
        """Version, the settings that matter for these pages, and the database's size."""
        if self.vendor == "postgresql":
            (version,) = self.execute("SHOW server_version")[0]
            settings = []
            for name in ("shared_buffers", "work_mem", "effective_cache_size", "random_page_cost"):
                settings.append(f"{name}={self.execute(f'SHOW {name}')[0][0]}")
            (size,) = self.execute("SELECT pg_size_pretty(pg_database_size(current_database()))")[0]
            return {"version": version, "settings": ", ".join(settings), "size": size}
        if self.vendor == "mysql":
            names = ("innodb_buffer_pool_size", "innodb_flush_log_at_trx_commit")
            settings = []
            for name in names:
                value = self.execute("SHOW GLOBAL VARIABLES LIKE %s", [name])[0][1]
                if name == "innodb_buffer_pool_size":
                    value = f"{int(value) // 1024**2}MB"
                settings.append(f"{name}={value}")
            (version,) = self.execute("SELECT VERSION()")[0]
            (size,) = self.execute(
                "SELECT SUM(data_length + index_length) FROM information_schema.tables "
                "WHERE table_schema = DATABASE()"
            )[0]
            return {
                "version": version,
                "settings": ", ".join(settings),
                "size": f"{int(size) / 1024**2:,.0f} MB",
            }
        (version,) = self.execute("SELECT sqlite_version()")[0]
        (journal,) = self.execute("PRAGMA journal_mode")[0]
        (cache,) = self.execute("PRAGMA cache_size")[0]
        path = Path(self.connection.settings_dict["NAME"])
        size = path.stat().st_size / 1024**2
        return {
            "version": version,
            "settings": f"journal_mode={journal}, cache_size={cache}",
            "size": f"{size:,.0f} MB",
        }

    def explain(self, sql: str, params: Any) -> str:
        """The plan of a statement (PostgreSQL: as it ran, with buffers)."""
        if not sql.lstrip().upper().startswith("SELECT"):
            # EXPLAIN ANALYZE runs the statement: never a write.
            return "(not a SELECT: not explained)"
        prefix = {
            "postgresql": "EXPLAIN (ANALYZE, BUFFERS) ",
            "mysql": "ANALYZE FORMAT=JSON " if self.mariadb else "EXPLAIN ANALYZE ",
        }.get(self.vendor, "EXPLAIN QUERY PLAN ")
        try:
            rows = self.execute(prefix + sql, params)
        except Exception as exc:
            return f"(EXPLAIN failed: {exc})"
        if self.vendor in ("postgresql", "mysql"):
            return "\n".join(row[0] for row in rows)
        return "\n".join(f"{'  ' * int(row[1] > 0)}{row[-1]}" for row in rows)


def insert_jobs_and_attempts(
    database: Database, layout: Layout, ref: int, node_ids: list[int]
) -> None:
    """Write the jobs of ``layout`` and their attempts, one ``INSERT ... SELECT`` each, with
    ``ref`` (microseconds since the epoch) as the present and the leased jobs spread over
    ``node_ids``; then move the id sequences past the ids written."""
    from django.core.management.color import no_style

    from durable_jobs.models import Attempt, Job

    dialect = Dialect(database.vendor, mariadb=database.mariadb)
    ctes = base_ctes(layout, dialect, ref)
    quote = database.connection.ops.quote_name

    def insert(model: Any, columns: dict[str, str], rest: str) -> str:
        into = f"INSERT INTO {quote(model._meta.db_table)} ({', '.join(quote(c) for c in columns)})"
        select = f"SELECT {', '.join(columns.values())} {rest}"
        # MySQL/MariaDB put the CTEs after INSERT INTO, PostgreSQL and SQLite before it.
        return f"{into} {ctes} {select}" if dialect.my else f"{ctes} {into} {select}"

    if dialect.my:
        # ``||`` joins text, as elsewhere; and, for MySQL 8's recursive series, deep
        # enough recursion (MariaDB's series is a SEQUENCE table).
        database.execute("SET SESSION sql_mode = CONCAT(@@sql_mode, ',PIPES_AS_CONCAT')")
        if not dialect.mariadb:
            database.execute(f"SET SESSION cte_max_recursion_depth = {layout.jobs + 1}")
    try:
        columns = job_columns(layout, dialect, ref, node_ids)
        complete_columns(Job, columns, ref, dialect)
        insert_counted(
            database,
            Job,
            insert(
                Job,
                columns,
                "FROM kind k JOIN handlers hd ON hd.hidx = k.hn JOIN errors er ON er.eidx = k.e",
            ),
        )
        columns = attempt_columns(dialect)
        complete_columns(Attempt, columns, ref, dialect)
        # CROSS JOIN: SQLite keeps the written order (one job's attempts side by side).
        insert_counted(
            database,
            Attempt,
            insert(
                Attempt,
                columns,
                "FROM kind k CROSS JOIN nums nu "
                "JOIN handlers hd ON hd.hidx = k.hn JOIN errors er ON er.eidx = k.e "
                "WHERE nu.n <= k.na AND k.state IN ('completed', 'dead', 'retrying')",
            ),
        )
    finally:
        if dialect.my:
            database.execute("SET SESSION sql_mode = REPLACE(@@sql_mode, 'PIPES_AS_CONCAT', '')")
    # The ids were written explicitly: move the sequences past them (MySQL/MariaDB's
    # AUTO_INCREMENT moves by itself).
    for sql in database.connection.ops.sequence_reset_sql(no_style(), [Job, Attempt]):
        database.execute(sql)


def insert_counted(database: Database, model: Any, sql: str) -> None:
    """Run one INSERT and log how many rows it wrote, and how fast."""
    started = time.perf_counter()
    with database.connection.cursor() as cursor:
        cursor.execute(sql)
        count = cursor.rowcount
    if count < 0:
        # Python's sqlite3 reports no row count for a statement that starts with WITH.
        count = model.objects.count()
    seconds = time.perf_counter() - started
    log(f"  {count:,} {model._meta.verbose_name_plural} in {seconds:.1f} s")


class DataSet:
    """The jobs, attempts, nodes and queues the pages show: created with set-based SQL,
    or with ``--reuse`` taken over from a ``--keep`` run (moved forward to the present).
    What was made is recorded in ``META_TABLE``."""

    def __init__(self, database: Database, layout: Layout) -> None:
        self.database = database
        self.layout = layout

    def prepare(self, *, reuse: bool) -> dict[str, Any]:
        """Create the data, or with ``reuse`` use what a previous --keep run left."""
        meta = self.read_meta()
        wanted = {"version": DATA_VERSION, "jobs": str(self.layout.jobs)}
        if reuse and all(meta.get(k) == v for k, v in wanted.items()):
            log(f"reusing the data created on {meta.get('created')}")
            self.move_forward(int(meta["ref"]))
            return {
                "reused": True,
                "created": meta.get("created"),
                "seconds": float(meta["seconds"]),
            }
        if meta or self.has_jobs():
            # The parent gives us a fresh database unless --reuse: this is --reuse over
            # data of another size or version, which is replaced.
            from django.core.management import call_command

            log(f"the database holds other data ({meta or 'not generated here'}): replacing it")
            call_command("flush", verbosity=0, interactive=False)
            self.database.execute(f"DROP TABLE IF EXISTS {META_TABLE}")
            if self.database.vendor == "sqlite":
                self.database.execute("VACUUM")  # give the file back its size: it is reported
        seconds = self.create()
        self.write_meta(
            {
                **wanted,
                "ref": str(self.ref),
                "seconds": f"{seconds:.1f}",
                "created": harness.utc_now_text(),
            }
        )
        return {"reused": False, "seconds": seconds}

    def read_meta(self) -> dict[str, str]:
        tables = self.database.connection.introspection.table_names()
        if META_TABLE not in tables:
            return {}
        key, value = self.meta_columns()
        return dict(self.database.execute(f"SELECT {key}, {value} FROM {META_TABLE}"))

    def meta_columns(self) -> tuple[str, str]:
        # KEY is a reserved word on MySQL/MariaDB: quoted, as each database quotes names.
        quote = self.database.connection.ops.quote_name
        return quote("key"), quote("value")

    def write_meta(self, values: dict[str, str]) -> None:
        execute = self.database.execute
        k, v = self.meta_columns()
        execute(f"CREATE TABLE IF NOT EXISTS {META_TABLE} ({k} varchar(50) PRIMARY KEY, {v} text)")
        for key, value in values.items():
            execute(f"DELETE FROM {META_TABLE} WHERE {k} = %s", [key])
            execute(f"INSERT INTO {META_TABLE} ({k}, {v}) VALUES (%s, %s)", [key, value])

    def has_jobs(self) -> bool:
        from durable_jobs.models import Job

        return Job.objects.exists()

    def create(self) -> float:
        """Make the data (``self.ref`` is its present); return the seconds it took."""
        from django.contrib.auth import get_user_model
        from django.utils import timezone

        from durable_jobs.models import Node, Queue

        now = timezone.now().replace(microsecond=0)
        self.ref = int(now.timestamp()) * SECOND
        layout = self.layout
        log(
            f"creating {layout.jobs:,} jobs: {layout.older:,} finished over 30 days, "
            f"{layout.recent:,} in the last hour, {layout.leased} leased, "
            f"{layout.waiting:,} waiting"
        )
        started = time.perf_counter()
        get_user_model().objects.create_superuser("bench", "bench@example.com", None)
        nodes = [
            Node.objects.create(
                name=f"worker-{index + 1}",
                pid=1000 + index,
                queues={queue: 10 for queue in QUEUES},
                concurrency=10 * len(QUEUES),
                started_at=now - datetime.timedelta(days=2),
                last_heartbeat_at=now - datetime.timedelta(seconds=3),
            )
            for index in range(NODES)
        ]
        # A node that stopped without saying so: the node page shows stale ones too.
        Node.objects.create(
            name="worker-old",
            pid=999,
            queues={"default": 10},
            concurrency=10,
            started_at=now - datetime.timedelta(days=9),
            last_heartbeat_at=now - datetime.timedelta(days=3),
        )
        for queue in QUEUES:
            Queue.objects.create(name=queue, created_at=now - datetime.timedelta(days=40))

        insert_jobs_and_attempts(self.database, layout, self.ref, [node.pk for node in nodes])
        self.database.analyze(vacuum=True)
        return time.perf_counter() - started

    def move_forward(self, ref: int) -> None:
        """Shift the last day of jobs (and their attempts, and the nodes' heartbeats) by
        the time since the data was made, so that "the last hour" holds the recent
        completions and the nodes are live again. Older jobs keep their times: 30 days
        of history minus a few hours is the same history for these pages."""
        from django.db.models import F
        from django.utils import timezone

        from durable_jobs.models import Attempt, Job, Node

        now = timezone.now().replace(microsecond=0)
        shift = now - datetime.datetime.fromtimestamp(ref / SECOND, datetime.UTC)
        if shift < datetime.timedelta(minutes=1):
            return
        started = time.perf_counter()
        since = datetime.datetime.fromtimestamp(ref / SECOND, datetime.UTC) - datetime.timedelta(
            days=1
        )
        first = (
            Job.objects.filter(created_at__gte=since)
            .order_by("pk")
            .values_list("pk", flat=True)
            .first()
        )
        if first is not None:
            moved = Job.objects.filter(pk__gte=first).update(
                **{
                    name: F(name) + shift
                    for name in (
                        "created_at",
                        "updated_at",
                        "available_at",
                        "attempted_at",
                        "lease_expires_at",
                        "finished_at",
                    )
                }
            )
            Attempt.objects.filter(job_id__gte=first).update(
                started_at=F("started_at") + shift, finished_at=F("finished_at") + shift
            )
            seconds = time.perf_counter() - started
            log(f"moved {moved:,} recent jobs forward by {shift} ({seconds:.1f} s)")
        Node.objects.update(
            started_at=F("started_at") + shift, last_heartbeat_at=F("last_heartbeat_at") + shift
        )
        self.write_meta({"ref": str(int(now.timestamp()) * SECOND)})

    def row_counts(self) -> dict[str, Any]:
        from django.db.models import Count
        from django.utils import timezone

        from durable_jobs.models import Attempt, Job, Node

        states = {
            row["state"]: row["n"]
            for row in Job.objects.values("state").annotate(n=Count("pk")).order_by()
        }
        hour_ago = timezone.now() - datetime.timedelta(hours=1)
        return {
            "jobs": sum(states.values()),
            "states": states,
            "attempts": Attempt.objects.count(),
            "nodes": Node.objects.count(),
            "completed_last_hour": Job.objects.filter(
                state="completed", finished_at__gte=hour_ago
            ).count(),
        }


@dataclass
class Request:
    """One request of a page: its response, time, and the statements it ran."""

    response: Any
    ms: float
    query_count: int
    # {"sql", "params", "ms"} per statement, in the order they ran.
    timings: list[dict[str, Any]]


class PageTimer:
    """Requests the admin's pages as the benchmark's superuser and times them and their
    queries; with ``--explain``, also reports each page's queries and slow plans."""

    def __init__(self, options: argparse.Namespace, database: Database, layout: Layout) -> None:
        from django.contrib.auth import get_user_model
        from django.test import Client

        self.options = options
        self.database = database
        self.layout = layout
        self.client = Client()
        self.client.force_login(get_user_model().objects.get(username="bench"))

    def pages(self) -> list[Page]:
        from django.urls import NoReverseMatch, reverse

        from durable_jobs.models import Job

        changelist = reverse("admin:durable_jobs_job_changelist")
        # A job from the middle of the table, and one of its neighbours with a key.
        middle = self.layout.older // 2
        keyed_pk, keyed = (
            Job.objects.filter(pk__gte=middle, idempotency_key__isnull=False)
            .order_by("pk")
            .values_list("pk", "idempotency_key")[0]
        )
        dead = (
            Job.objects.filter(pk__gte=middle, state="dead", attempts=3)
            .order_by("pk")
            .values_list("pk", flat=True)
            .first()
        )
        state_param, queue_param = self.filter_params(changelist)
        pages = [
            Page("Job list", changelist),
            Page("Job list, state = dead", f"{changelist}?{state_param}=dead"),
            Page(f"Job list, queue = {FILTER_QUEUE}", f"{changelist}?{queue_param}={FILTER_QUEUE}"),
            Page("Job list, page 100", f"{changelist}?p=100"),
            Page(
                "Job list, search by id",
                f"{changelist}?q={middle}",
                reverse("admin:durable_jobs_job_change", args=[middle]),
            ),
            Page(
                "Job list, search by idempotency key",
                f"{changelist}?q={keyed}",
                reverse("admin:durable_jobs_job_change", args=[keyed_pk]),
            ),
            Page(
                "Dead job (3 attempts), change page",
                reverse("admin:durable_jobs_job_change", args=[dead]),
            ),
        ]
        try:
            overview = reverse("admin:durable_jobs_overview_changelist")
        except NoReverseMatch:
            overview = None
        pages.append(Page("Overview", overview))
        pages.append(Page("Node list", reverse("admin:durable_jobs_node_changelist")))
        return pages

    def filter_params(self, changelist: str) -> tuple[str, str]:
        """The query parameters of the state and queue filters, read from the filter links
        of the job list itself (they change with the kind of filter: ``queue__exact`` for
        a plain field, something else for a custom one)."""
        import html
        import re
        from urllib.parse import parse_qsl

        if self.options.queue_param:
            return self.options.state_param, self.options.queue_param
        body = self.client.get(changelist).content.decode()
        state_param = queue_param = None
        for href in re.findall(r'href="\?([^"]*)"', body):
            for key, value in parse_qsl(html.unescape(href)):
                if value == "dead" and "state" in key and state_param is None:
                    state_param = key
                if value == FILTER_QUEUE and "queue" in key and queue_param is None:
                    queue_param = key
        log(f"filter parameters found in the job list: {state_param}, {queue_param}")
        return state_param or self.options.state_param, queue_param or "queue__exact"

    def request(self, path: str) -> Request:
        from django.test.utils import CaptureQueriesContext

        connection = self.database.connection
        timings: list[dict[str, Any]] = []

        def timer(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
            start = time.perf_counter()
            try:
                return execute(sql, params, many, context)
            finally:
                timings.append(
                    {"sql": sql, "params": params, "ms": (time.perf_counter() - start) * 1e3}
                )

        with CaptureQueriesContext(connection) as captured, connection.execute_wrapper(timer):
            start = time.perf_counter()
            response = self.client.get(path)
            elapsed = (time.perf_counter() - start) * 1e3
        return Request(response, elapsed, len(captured.captured_queries), timings)

    def measure(self, page: Page) -> dict[str, Any]:
        result: dict[str, Any] = {"label": page.label, "path": page.path}
        if page.path is None:
            result["error"] = "not available"
            return result
        try:
            response = self.request(page.path).response  # warm-up: templates, caches, pages
            status = response.status_code
        except Exception as exc:  # a page under construction must not end the benchmark
            result["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            log(f"{page.label}: {result['error']}")
            return result
        if status != 200:
            result["error"] = "not available" if status == 404 else f"HTTP {status}"
            log(f"{page.label}: {result['error']}")
            return result
        if page.expect and page.expect not in response.content.decode():
            result["warning"] = "the job searched for is not in the results"
            log(f"{page.label}: {result['warning']}")
        times: list[float] = []
        counts: list[int] = []
        # A statement's durations over the runs, and its last run (for EXPLAIN), by key.
        by_query: dict[tuple[str, int], list[float]] = {}
        examples: dict[tuple[str, int], dict[str, Any]] = {}
        deadline = time.monotonic() + self.options.budget
        for run in range(self.options.runs):
            request = self.request(page.path)
            times.append(request.ms)
            counts.append(request.query_count)
            seen: dict[str, int] = {}
            for timing in request.timings:
                # The same statement may run several times in one request: key each run
                # of it by its position among the statements with the same text.
                seen[timing["sql"]] = seen.get(timing["sql"], 0) + 1
                key = (timing["sql"], seen[timing["sql"]])
                by_query.setdefault(key, []).append(timing["ms"])
                examples[key] = timing
            if time.monotonic() > deadline and run >= 2:
                log(f"{page.label}: stopped after {run + 1} runs (--budget)")
                break
        slowest = max(by_query, key=lambda key: statistics.median(by_query[key]))
        result.update(
            runs=len(times),
            median_ms=statistics.median(times),
            p95_ms=percentile(times, 95),
            queries=statistics.median(counts),
            queries_varied=min(counts) != max(counts),
            sql_ms=sum(statistics.median(v) for v in by_query.values()),
            slowest_ms=statistics.median(by_query[slowest]),
            slowest_sql=slowest[0],
        )
        if self.options.explain:
            result.update(self.explain_queries(by_query, examples, slowest))
        log(
            f"{page.label}: median {result['median_ms']:.1f} ms, p95 {result['p95_ms']:.1f} ms, "
            f"{result['queries']:g} queries, slowest {result['slowest_ms']:.1f} ms: "
            f"{slowest[0][:160]}"
        )
        return result

    def explain_queries(
        self,
        by_query: dict[tuple[str, int], list[float]],
        examples: dict[tuple[str, int], dict[str, Any]],
        slowest: tuple[str, int],
    ) -> dict[str, Any]:
        """Every query of a page with its median duration, and the plans of the slowest
        and of any other over ``--explain-ms`` (for :func:`render_explains`)."""
        all_queries = [
            {"sql": sql, "ms": statistics.median(durations)}
            for (sql, _), durations in by_query.items()
        ]
        # The slowest, and any other statement slow enough to be worth a look (once per
        # text: a statement run twice in a request has the same plan).
        chosen = [slowest]
        for key, durations in by_query.items():
            if key[0] not in {c[0] for c in chosen} and (
                statistics.median(durations) >= self.options.explain_ms
            ):
                chosen.append(key)
        explains = [
            {
                "sql": key[0],
                "ms": statistics.median(by_query[key]),
                "plan": self.database.explain(examples[key]["sql"], examples[key]["params"]),
            }
            for key in chosen
        ]
        return {"all_queries": all_queries, "explains": explains}


def run_phase(options: argparse.Namespace) -> int:
    signal.signal(signal.SIGTERM, harness.raise_system_exit)
    # Always: a --reuse run must build the indexes of migrations added since.
    log(f"migrate: {harness.setup_django():.1f} s")
    database = Database()
    layout = Layout.for_jobs(options.jobs)
    data_set = DataSet(database, layout)
    data = data_set.prepare(reuse=options.reuse)
    if data["reused"]:
        database.analyze(vacuum=True)
    result: dict[str, Any] = {
        "vendor": options.phase,
        "data": data,
        "layout": asdict(layout),
        "rows": data_set.row_counts(),
        "database": database.facts(),
    }
    timer = PageTimer(options, database, layout)
    result["pages"] = [timer.measure(page) for page in timer.pages()]
    harness.print_phase_result(result)
    return 0


# ================================================================================================
# Parent: databases, phases, the report
# ================================================================================================


def sqlite_files(path: Path) -> Iterator[Path]:
    yield path
    yield path.with_name(path.name + "-wal")
    yield path.with_name(path.name + "-shm")


def create_database(vendor: str, options: argparse.Namespace) -> None:
    """A fresh database, unless --reuse (then the phase checks what it finds)."""
    if vendor == "sqlite":
        path = Path(options.sqlite_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        if not options.reuse:
            for file in sqlite_files(path):
                file.unlink(missing_ok=True)
        return
    if vendor == "mysql":
        if not (options.reuse and harness.mysql_database_exists(options)):
            harness.create_mysql_database(options, replace=True)
        return
    if options.reuse and harness.postgres_database_exists(options):
        return
    # The database is this benchmark's own: an old one is from an interrupted or --keep run.
    harness.create_postgres_database(options, replace=True)


def drop_database(vendor: str, options: argparse.Namespace) -> None:
    if vendor == "sqlite":
        for file in sqlite_files(Path(options.sqlite_path)):
            file.unlink(missing_ok=True)
        return
    if vendor == "mysql":
        harness.drop_mysql_database(options)
        return
    harness.drop_postgres_database(options)


def run_database(vendor: str, options: argparse.Namespace) -> dict[str, Any]:
    jobs = options.jobs or DEFAULT_JOBS[vendor]
    command = [sys.executable, str(Path(__file__).resolve()), "--phase", vendor]
    command += ["--jobs", str(jobs), "--runs", str(options.runs), "--budget", str(options.budget)]
    command += ["--state-param", options.state_param]
    if options.queue_param:
        command += ["--queue-param", options.queue_param]
    command += ["--explain-ms", str(options.explain_ms)]
    if vendor == "mysql":
        command += harness.mysql_argv(options)
    for flag in ("explain", "reuse"):
        if getattr(options, flag):
            command.append(f"--{flag}")
    create_database(vendor, options)
    try:
        log(f"[{vendor}] {jobs:,} jobs")
        env = harness.child_env(SETTINGS_MODULE, vendor, options)
        return harness.run_phase_process(command, vendor=vendor, env=env, timeout=options.timeout)
    finally:
        if not options.keep:
            drop_database(vendor, options)


def machine_facts(*, mysql: bool = False) -> list[tuple[str, str]]:
    return [
        harness.cpu_fact(),
        harness.memory_fact(),
        ("Load average (1, 5, 15 min) at the end", harness.load_average()),
        *harness.software_facts(mysql=mysql),
    ]


def label_of(vendor: str, result: dict[str, Any]) -> str:
    """The database's name in the report (MariaDB or MySQL, from the server's version)."""
    if vendor == "mysql":
        return harness.mysql_server_label(result["database"]["version"])
    return LABELS[vendor]


def render(results: dict[str, dict[str, Any]], options: argparse.Namespace, argv: list[str]) -> str:
    facts = machine_facts(mysql="mysql" in results)
    for vendor, result in results.items():
        database = result["database"]
        facts.append(
            (
                label_of(vendor, result),
                f"{database['version']} ({database['settings']}); database size {database['size']}",
            )
        )
    lines = harness.report_heading("admin_pages.py", argv, facts)
    for vendor, result in results.items():
        rows, data = result["rows"], result["data"]
        states = ", ".join(f"{state} {count:,}" for state, count in sorted(rows["states"].items()))
        if data["reused"]:
            made = f"created on {data['created']} in {data['seconds']:.0f} s (reused)"
        else:
            made = f"created in {data['seconds']:.0f} s"
        lines += ["", f"**{label_of(vendor, result)}**: {rows['jobs']:,} jobs ({states}), "]
        lines[-1] += (
            f"{rows['attempts']:,} attempts, {rows['nodes']} nodes; "
            f"{rows['completed_last_hour']:,} jobs completed in the last hour; {made}."
        )
        lines += [
            "",
            "| Page | Median ms | p95 ms | Queries | Slowest query ms | All queries ms |",
            "| --- | ---: | ---: | ---: | ---: | ---: |",
        ]
        for page in result["pages"]:
            label = page["label"]
            query = (page["path"] or "").partition("?")[2]
            if query:
                label += f" (`?{query}`)"
            if "error" in page:
                lines.append(f"| {label} | {page['error']} | | | | |")
                continue
            if page["runs"] < options.runs:
                label += f" ({page['runs']} runs)"
            if "warning" in page:
                label += f" ({page['warning']})"
            queries = f"{page['queries']:g}" + ("*" if page["queries_varied"] else "")
            lines.append(
                f"| {label} | {page['median_ms']:,.0f} | {page['p95_ms']:,.0f} | {queries} "
                f"| {page['slowest_ms']:,.1f} | {page['sql_ms']:,.1f} |"
            )
    lines += [
        "",
        f"Each page is requested through Django's test `Client` (no HTTP server, the "
        f"session of a superuser), once to warm up, then {options.runs} times; the response "
        "time includes the view, the queries and the template rendering, with `DEBUG` off "
        "and one database connection kept across requests. Queries: per request (* when it "
        "varied between requests). Slowest query: the median duration of the request's "
        "slowest statement; all queries: the sum of the statements' medians.",
    ]
    return "\n".join(lines) + "\n"


def render_explains(results: dict[str, dict[str, Any]]) -> str:
    lines = []
    for vendor, result in results.items():
        for page in result["pages"]:
            if "explains" not in page:
                continue
            title = f"{label_of(vendor, result)}: {page['label']} ({page['median_ms']:.0f} ms)"
            lines += ["", f"### {title}"]
            lines += ["", "Every query of the page (median ms, the start of its SQL):", ""]
            lines += [f"    {q['ms']:8.2f}  {q['sql'][:150]}" for q in page["all_queries"]]
            for index, explained in enumerate(page["explains"]):
                title = "The slowest" if index == 0 else "Also slow"
                lines += ["", f"{title} ({explained['ms']:.1f} ms):", "", "```sql"]
                lines += [explained["sql"], "```", "", "```text", explained["plan"], "```"]
    return "\n".join(lines) + "\n"


def write_section(path: Path, block: str, *, mysql: bool = False) -> None:
    """Replace the block between the markers of ``path`` (a MariaDB/MySQL run alone: the
    ``admin-pages-mysql`` ones), or append it under a heading."""
    markers, heading = (
        (MYSQL_MARKERS, "## Admin pages on MariaDB") if mysql else (MARKERS, "## Admin pages")
    )
    text = path.read_text() if path.exists() else ""
    replaced = markers.replace_in(text, block)
    if replaced is None:
        replaced = text.rstrip("\n") + f"\n\n{heading}\n\n" + markers.wrap(block) + "\n"
    path.write_text(replaced)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--database",
        "--db",
        choices=["postgres", "sqlite", "both", "mysql"],
        default="both",
        help="Databases to measure (default both: PostgreSQL and SQLite; mysql: the "
        "--mysql-* server, MariaDB or MySQL 8).",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="Job rows to create (default 1,000,000 on PostgreSQL and MariaDB/MySQL, "
        "100,000 on SQLite).",
    )
    parser.add_argument(
        "--runs", type=int, default=20, help="Timed requests per page (default 20)."
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=120,
        help="Seconds per page after which fewer runs are made (at least 3; default 120).",
    )
    parser.add_argument(
        "--explain",
        action="store_true",
        help="Print the plan of each page's slowest query (and of any other over --explain-ms).",
    )
    parser.add_argument(
        "--explain-ms",
        type=float,
        default=10,
        help="With --explain, also explain every query slower than this (default 10 ms).",
    )
    parser.add_argument(
        "--keep", action="store_true", help="Leave the database (and its data) in place."
    )
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="Measure the data a --keep run left, if it is of the same size (migrates first).",
    )
    parser.add_argument("--write", type=Path, default=None, help="Also write the section here.")
    parser.add_argument(
        "--state-param", default="state__exact", help="Query parameter of the state filter."
    )
    parser.add_argument(
        "--queue-param",
        default=None,
        help="Query parameter of the queue filter (default: read from the job list's links).",
    )
    harness.add_postgres_arguments(
        parser,
        dbname="dj_admin_bench",
        dbname_help="The benchmark's own database, dropped and created again "
        "(default dj_admin_bench).",
    )
    harness.add_mysql_arguments(
        parser,
        dbname="dj_admin_bench",
        dbname_help="The benchmark's own MariaDB/MySQL database, dropped and created again "
        "(default dj_admin_bench).",
    )
    parser.add_argument(
        "--sqlite-path",
        type=Path,
        default=Path(tempfile.gettempdir()) / "dj_admin_bench" / "admin_bench.sqlite3",
        help="The SQLite file (default: dj_admin_bench/admin_bench.sqlite3 in the temp directory).",
    )
    parser.add_argument(
        "--timeout", type=float, default=1800, help="Seconds allowed per database (default 1800)."
    )
    parser.add_argument("--phase", choices=["postgres", "sqlite", "mysql"], help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.jobs is not None and options.jobs < 10_000:
        parser.error("--jobs must be at least 10000")
    if options.runs < 1:
        parser.error("--runs must be at least 1")
    return options


def main(argv: list[str]) -> int:
    options = parse_args(argv)
    if options.phase:
        return run_phase(options)
    signal.signal(signal.SIGTERM, harness.raise_system_exit)
    vendors = ["postgres", "sqlite"] if options.database == "both" else [options.database]
    results = {vendor: run_database(vendor, options) for vendor in vendors}
    block = render(results, options, argv)
    print(block)
    if options.explain:
        print(render_explains(results))
    if options.write is not None:
        write_section(options.write, block, mysql=vendors == ["mysql"])
        log(f"wrote {options.write}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
