#!/usr/bin/env python
"""Flat cost as the job table grows, and a worker's memory over many jobs (PostgreSQL);
the claim's plan over a large table (MariaDB/MySQL).

    python benchmarks/scale.py [--json] [--quick] [--only flat|memory]
                               [--write docs/benchmarks.md]
    python benchmarks/scale.py --db mysql [--quick] [--write docs/benchmarks.md]

**Flat cost.** Drain throughput must not depend on how much history the job table holds.

1. Empty table: queue Q no-op jobs (``enqueue_many``), ``VACUUM ANALYZE``, and drain
   them with 2 ``manage.py runworker --burst`` processes (run.py's drain: the rate is
   Q / (last ``finished_at`` - process start)).
2. Full table: empty the tables, write F finished jobs (completed, dead and cancelled,
   their attempts, ``finished_at`` spread over 30 days: admin_pages.py's set-based
   generator), queue the same Q jobs the same way, ``VACUUM ANALYZE`` (what autovacuum
   does to a production table), and drain them the same way.
3. Before each drain, ``EXPLAIN (ANALYZE, BUFFERS)`` the claim statement a worker sends
   (limit 10, built by durable_jobs' PostgreSQL backend), prepared and executed as a
   worker's connection executes it, in a transaction that is rolled back; and check
   that it reads the job table through an index only.

Q is 100,000 and F 1,000,000 (with ``--quick``: 10,000 and 100,000). The target:
full-table rate / empty-table rate >= 0.80.

**Memory.** One ``runworker --queues default:10`` process runs N no-op jobs (100,000;
10,000 with ``--quick``), all queued before it starts. Its RSS (``VmRSS`` of
``/proc/<pid>/status``) is sampled when 1,000 jobs have finished (counted in the
database), at every tenth of N, and when all N have finished, before it is stopped
with SIGTERM. The target: RSS after N / RSS after the first 1,000 <= 1.10.

**The claim on MariaDB/MySQL** (``--db mysql``, the ``--mysql-*`` server; its only part,
``claim``). F finished jobs as above (admin_pages.py's generator, MariaDB's SEQUENCE
engine as the series of ids), then Q waiting jobs queued with ``enqueue_many``,
``ANALYZE TABLE``; then the statement that picks a claim's jobs (``PICK_SQL`` of
``durable_jobs/db/mysql.py``, formatted with ``engine.claim_parts()`` and bound to
``engine.claim_params()``, exactly as ``MySQLEngine.claim`` sends it, limit 10,
guarded) is shown with ``EXPLAIN``, ``EXPLAIN FORMAT=JSON`` and, run in a transaction
rolled back afterwards, ``ANALYZE FORMAT=JSON`` (MariaDB) or ``EXPLAIN ANALYZE``
(MySQL); the session's ``Handler_read_*`` and ``Sort_*`` counters of one such run say
how many index entries it read and whether it sorted. The check: it reads the claim
index ``durable_job_claim_my``, with no filesort, and about LIMIT rows.

Each part runs in a child process (``--phase``) against a database of its own
(``scale_bench`` by default), created for it and dropped afterwards; the script refuses
to start if that database exists. Every process it starts is ended on the way out.

``--json`` prints one JSON object on standard output::

    {"flat_cost": {"empty_rate", "full_rate", "ratio", "finished", "queued", "explain",
                   "claim_uses_index"},
     "memory": {"rss_after_first_kb", "rss_after_all_kb", "first", "all", "ratio",
                "samples": [[jobs_done, rss_kb], ...]}}

(``--only`` leaves out the other key); otherwise the results are printed as Markdown.
Progress goes to standard error.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    # Run as a script: the repository's root must be importable for ``benchmarks.harness``.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import admin_pages, harness, run
from benchmarks.harness import log

MARKERS = harness.Markers("scale-results")
SECTION_TITLE = "Flat cost as the table grows, and worker memory"
PARTS = ("flat", "memory")
#: The part run on MariaDB/MySQL (``--db mysql``), and where ``--write`` puts it.
MYSQL_PARTS = ("claim",)
MYSQL_MARKERS = harness.Markers("scale-claim-mysql")
MYSQL_SECTION_TITLE = "The claim on MariaDB"
#: The index the MariaDB/MySQL claim is meant to read (migration 0011).
MYSQL_CLAIM_INDEX = "durable_job_claim_my"
#: Timed runs of the pick, each in a transaction rolled back.
MYSQL_PICK_RUNS = 20

#: The targets: full-table drain rate / empty-table rate, and RSS after all / after the first.
FLAT_TARGET = 0.80
MEMORY_TARGET = 1.10

#: Worker processes of each flat-cost drain, and threads per worker (the default queue's).
DRAIN_WORKERS = 2
CONCURRENCY = 10
#: The claim's LIMIT in the explained statement: one worker's concurrency.
CLAIM_LIMIT = 10
#: Jobs per ``enqueue_many()`` call: bounds the memory of the prepared jobs.
ENQUEUE_CHUNK = 10_000
#: The memory worker's first sample is taken after this many jobs: imports, connections
#: and caches are warm by then, so growth after it is what a long-running worker keeps.
MEMORY_FIRST = 1_000
#: Seconds between the memory phase's counts of finished jobs.
MEMORY_POLL = 0.1
#: Executions of the prepared claim explained: PostgreSQL plans a prepared statement for
#: its values five times, then may switch to a generic plan; the last one is what a
#: worker's connection runs from then on.
PLAN_CACHE_RUNS = 6
PREPARED_NAME = "scale_claim"

#: Slowest rates (jobs/s) a phase may run at before its timeout stops it: well below what
#: this benchmark measures on 2 cores, so that a busy machine still finishes.
MIN_DRAIN_RATE = 350  # 2 worker processes
MIN_WORKER_RATE = 250  # 1 worker process
MIN_FILL_RATE = 10_000  # finished jobs written, attempts and VACUUM included


@dataclass(frozen=True)
class Sizes:
    queued: int  # jobs drained in each flat-cost drain
    finished: int  # finished jobs under the second drain
    memory: int  # jobs the memory worker runs


FULL = Sizes(queued=100_000, finished=1_000_000, memory=100_000)
QUICK = Sizes(queued=10_000, finished=100_000, memory=10_000)


# ================================================================================================
# Inside a phase: Django is configured for the phase's database
# ================================================================================================


def worker_phase(options: argparse.Namespace) -> run.Phase:
    """run.py's phase object, which starts ``runworker`` processes and measures drains."""
    settings = argparse.Namespace(**vars(options))
    settings.phase = "postgres"
    settings.concurrency = CONCURRENCY
    return run.Phase(settings)


def enqueue(count: int) -> None:
    """Queue ``count`` no-op jobs the way an application does in bulk."""
    import durable_jobs
    from benchmarks.benchapp.jobs import noop

    started = time.perf_counter()
    for first in range(0, count, ENQUEUE_CHUNK):
        last = min(count, first + ENQUEUE_CHUNK)
        durable_jobs.enqueue_many([noop.prepare(n=i) for i in range(first, last)])
    log(f"  queued {count:,} jobs in {time.perf_counter() - started:.1f} s")


def sql_rows(sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    """Run one statement; its rows, if it returns any."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


def last_job_id() -> int:
    from django.db.models import Max

    from durable_jobs.models import Job

    return Job.objects.aggregate(last=Max("pk"))["last"] or 0


def checkpoint() -> None:
    """Write dirty buffers out before a drain, so that neither drain pays for the other's
    writes (or for the bulk load before it) in a checkpoint that falls inside it."""
    from django.db import DatabaseError

    try:
        sql_rows("CHECKPOINT")
    except DatabaseError as exc:  # not a superuser: the drains are still comparable
        log(f"  CHECKPOINT refused ({exc}); going on without it")


def server_facts() -> dict[str, str]:
    """The server's version and the settings that bear on a growing table."""
    names = ("shared_buffers", "work_mem", "random_page_cost", "synchronous_commit", "autovacuum")
    settings = [f"{name}={sql_rows(f'SHOW {name}')[0][0]}" for name in names]
    return {"version": sql_rows("SHOW server_version")[0][0], "settings": ", ".join(settings)}


def table_facts() -> dict[str, Any]:
    """Rows per state, attempts, and the sizes of the job table, its claim index and the
    attempt table."""
    from django.db import connection
    from django.db.models import Count

    from durable_jobs.models import Attempt, Job

    states = dict(Job.objects.values_list("state").annotate(n=Count("pk")).order_by())
    sizes = {}
    for label, relation in (
        ("jobs", Job._meta.db_table),
        ("attempts", Attempt._meta.db_table),
        ("claim_index", claim_index_name()),
    ):
        (size,) = sql_rows(
            "SELECT pg_size_pretty(pg_total_relation_size(%s::regclass))",
            [connection.ops.quote_name(relation)],
        )[0]
        sizes[label] = size
    return {"states": states, "attempts": Attempt.objects.count(), "sizes": sizes}


def table_indexes(table: str) -> list[str]:
    return [
        name
        for (name,) in sql_rows("SELECT indexname FROM pg_indexes WHERE tablename = %s", [table])
    ]


def claim_index_name() -> str:
    """The index the claim is meant to read: the one over claimable jobs by queue."""
    from durable_jobs.models import Job

    for index in Job._meta.indexes:
        # PartialIndex keeps its condition apart (see durable_jobs.indexes).
        condition = getattr(index, "partial_condition", index.condition)
        if index.fields and index.fields[0] == "queue" and condition is not None:
            return str(index.name)
    raise SystemExit("the job model has no partial index starting with the queue")


def fill_history(finished: int) -> float:
    """Write ``finished`` finished jobs and their attempts with set-based SQL (admin_pages.py's
    generator, with nothing leased or waiting); return the seconds it took."""
    from django.utils import timezone

    database = admin_pages.Database()
    layout = admin_pages.Layout.history(finished)
    now = timezone.now().replace(microsecond=0)
    ref = int(now.timestamp()) * admin_pages.SECOND
    log(
        f"writing {finished:,} finished jobs: {layout.older:,} over 30 days, "
        f"{layout.recent:,} in the last hour"
    )
    started = time.perf_counter()
    admin_pages.insert_jobs_and_attempts(database, layout, ref, node_ids=[])
    return time.perf_counter() - started


# -- the claim statement ----------------------------------------------------------------------


def claim_statement() -> tuple[str, dict[str, Any]]:
    """The claim a worker's loop pass sends for its queue, and its parameters, as
    durable_jobs' own PostgreSQL engine builds them: the pass statement with no outcome
    to write (an unlimited queue's claim is guarded: it leases nothing if the queue is
    paused or limited)."""
    from django.db import connection

    from durable_jobs.conf import get_settings
    from durable_jobs.db import engine_for
    from durable_jobs.db.engine import ClaimRequest

    engine: Any = engine_for(connection.alias)
    request = ClaimRequest(
        queue="default",
        limit=CLAIM_LIMIT,
        node_id=None,
        lease_seconds=get_settings().lease_seconds,
    )
    return engine.pass_statement([], request)


def numbered(sql: str, params: dict[str, Any]) -> tuple[str, list[Any]]:
    """``%(name)s`` placeholders as ``$1, $2, ...`` (the form PREPARE takes), and the values
    in that order."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    text = re.sub(r"%\((\w+)\)s", number, sql).replace("%%", "%")
    return text, [params[name] for name in names]


def explain_prepared(sql: str, values: list[Any], runs: int) -> list[dict[str, Any]]:
    """``EXPLAIN (ANALYZE, BUFFERS)`` of each of ``runs`` executions of ``sql`` prepared once,
    as a worker's connection runs its claim, and whether each used a generic plan.

    PostgreSQL plans the first five executions of a prepared statement for their values,
    then may switch to a generic plan (one for any values). Each execution is rolled
    back, so that each finds the same queue, and nothing stays leased.
    """
    from django.db import connection, transaction

    arguments = ", ".join(["%s"] * len(values))
    explained: list[dict[str, Any]] = []
    with connection.cursor() as cursor:
        cursor.execute(f"PREPARE {PREPARED_NAME} AS {sql}")
        try:
            for _ in range(runs):
                with transaction.atomic():
                    cursor.execute(
                        f"EXPLAIN (ANALYZE, BUFFERS) EXECUTE {PREPARED_NAME}({arguments})", values
                    )
                    plan = "\n".join(row[0] for row in cursor.fetchall())
                    transaction.set_rollback(True)
                cursor.execute(
                    "SELECT generic_plans FROM pg_prepared_statements WHERE name = %s",
                    [PREPARED_NAME],
                )
                generic = cursor.fetchone()[0] > sum(entry["generic"] for entry in explained)
                explained.append({"plan": plan, "generic": generic})
        finally:
            cursor.execute(f"DEALLOCATE {PREPARED_NAME}")
    return explained


def read_plan(plan: str, *, generic: bool) -> dict[str, Any]:
    """What a plan says about the job table (the indexes read, whether any scan of it is
    sequential), its execution time and the buffers it touched."""
    from durable_jobs.models import Job

    table = Job._meta.db_table
    sequential = re.search(rf"Seq Scan on {re.escape(table)}\b", plan) is not None
    # Index scans name their index, bitmap index scans only the index: keep the job
    # table's own (the guard's subquery reads another table).
    read = re.findall(r"Scan (?:Backward )?using (\S+) on|Bitmap Index Scan on (\S+)", plan)
    names = {name for pair in read for name in pair if name}
    indexes = sorted(names & set(table_indexes(table)))
    executed = re.search(r"Execution Time: ([\d.]+) ms", plan)
    # A custom plan is made at every execution, prepared or not; a generic one is reused.
    planned = re.search(r"Planning Time: ([\d.]+) ms", plan)
    # The first Buffers line is the top node's: everything the statement touched.
    buffers = re.search(r"Buffers: (.*)", plan)
    return {
        "plan": plan,
        "uses_index": bool(indexes) and not sequential,
        "indexes": indexes,
        "execution_ms": float(executed.group(1)) if executed else None,
        "planning_ms": float(planned.group(1)) if planned else None,
        "buffers": buffers.group(1).strip() if buffers else "",
        "generic": generic,
    }


def explain_claim() -> dict[str, Any]:
    """The claim's plans: as first planned (for its values), and as a worker's connection
    runs it once the statement has been executed a few times (durable_jobs prepares it
    unless ``DURABLE_JOBS["PREPARED_STATEMENTS"]`` is off)."""
    from durable_jobs.conf import get_settings

    sql, params = claim_statement()
    text, values = numbered(sql, params)
    plans = [read_plan(**entry) for entry in explain_prepared(text, values, PLAN_CACHE_RUNS)]
    first, steady = plans[0], plans[-1]
    prepares = bool(getattr(get_settings(), "prepared_statements", False))
    ran = steady if prepares else first
    return {
        **ran,
        "sql": "\n".join(line.rstrip() for line in text.strip().splitlines() if line.strip()),
        "values": [str(value) for value in values],
        "prepared": prepares,
        "first": first,
        "claim_index": claim_index_name(),
    }


# -- flat cost ----------------------------------------------------------------------------------


def database_counters() -> dict[str, float]:
    """This database's counters so far: block reads (buffer hits, and reads from outside
    the buffer cache) and the milliseconds its connections spent running statements.

    Unlike a rate, blocks per job do not depend on what else the machine runs: they show
    whether a job costs the database more over a bigger table. Statement time per job
    does depend on it, but says how much of a job's time the database takes.
    """
    sql_rows("SELECT pg_stat_clear_snapshot()")  # the current counters, not a cached copy
    hit, read, active = sql_rows(
        "SELECT blks_hit, blks_read, active_time FROM pg_stat_database "
        "WHERE datname = current_database()"
    )[0]
    return {"hit": int(hit), "read": int(read), "active_ms": float(active)}


def heap_pages(after_id: int) -> int:
    """The table pages that hold the current versions of the jobs above ``after_id``. An
    UPDATE writes the new version into the same page if it has room, else into any page
    the free space map offers: over a big table, anywhere in it."""
    from django.db import connection

    from durable_jobs.models import Job

    table = connection.ops.quote_name(Job._meta.db_table)
    (pages,) = sql_rows(
        f"SELECT count(DISTINCT (ctid::text::point)[0]) FROM {table} WHERE id > %s", [after_id]
    )[0]
    return int(pages)


def drain_tenths(after_id: int) -> list[float]:
    """Jobs per second within each tenth of a drain (in finishing order): whether the drain
    slows down as it goes, leaving dead row versions behind in the table and its indexes."""
    from durable_jobs.models import Job

    drained = Job.objects.filter(pk__gt=after_id).values_list("finished_at", flat=True)
    finished = sorted(moment.timestamp() for moment in drained if moment is not None)
    tenth = len(finished) // 10
    rates = []
    for index in range(10):
        first, last = finished[index * tenth], finished[(index + 1) * tenth - 1]
        rates.append((tenth - 1) / max(last - first, 1e-6))
    return rates


def measure_drain(phase: run.Phase, queued: int, label: str) -> dict[str, Any]:
    """Queue ``queued`` jobs over whatever the table holds, and drain them: the claim's plan
    (taken first, with the queue full), the table, and the drain's figures."""
    after_id = last_job_id()
    log(f"[{label}] queueing {queued:,} jobs")
    enqueue(queued)
    admin_pages.Database().analyze(vacuum=True)
    checkpoint()
    table = table_facts()
    claim = explain_claim()
    log(
        f"[{label}] claim: {claim['execution_ms']} ms, indexes {claim['indexes']}, "
        f"index only: {claim['uses_index']}"
    )
    log(f"[{label}] draining {queued:,} jobs with {DRAIN_WORKERS} runworker --burst")
    pages_before = heap_pages(after_id)
    load_before = harness.load_average()
    counters_before = database_counters()
    timeout = 60 + queued / MIN_DRAIN_RATE
    drain = phase.drain(queued, DRAIN_WORKERS, after_id=after_id, timeout=timeout)
    if "error" in drain:
        raise SystemExit(f"the {label}-table drain failed: {drain['error']}")
    # run.py's drain waited for the exited workers' statistics to reach the server.
    counters_after = database_counters()
    drain["per_job"] = {
        name: (counters_after[name] - counters_before[name]) / queued for name in counters_after
    }
    drain["load_before"], drain["load_after"] = load_before, harness.load_average()
    drain["tenths"] = drain_tenths(after_id)
    drain["pages"] = [pages_before, heap_pages(after_id)]
    log(f"[{label}]   {drain['rate']:,.0f} jobs/s")
    return {"drain": drain, "claim": claim, "table": table}


def run_flat(options: argparse.Namespace) -> dict[str, Any]:
    phase = worker_phase(options)
    try:
        phase.setup()
        result: dict[str, Any] = {"database": server_facts()}
        result["empty"] = measure_drain(phase, options.queued, "empty")
        phase.reset()
        result["fill_s"] = fill_history(options.finished)
        result["full"] = measure_drain(phase, options.queued, "full")
        return result
    finally:
        phase.stop_workers()
        shutil.rmtree(phase.logdir, ignore_errors=True)


# -- memory -------------------------------------------------------------------------------------


def process_status(pid: int, field: str) -> int:
    """A ``kB`` field of ``/proc/<pid>/status`` (``VmRSS``: resident memory now)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/{pid}/status")


def finished_jobs() -> int:
    from durable_jobs.models import Job

    return Job.objects.filter(finished_at__isnull=False).count()


def sample_marks(total: int) -> list[int]:
    """Jobs done at which RSS is sampled: the first MEMORY_FIRST, then every tenth."""
    tenths = (total * k // 10 for k in range(1, 11))
    return sorted({MEMORY_FIRST, *(mark for mark in tenths if mark > MEMORY_FIRST)})


def sample_rss(phase: run.Phase, worker: Any, total: int, timeout: float) -> list[list[int]]:
    """``[jobs_done, rss_kb]`` at each mark of :func:`sample_marks`, while the worker runs.

    The count is polled, so a sample is taken a few jobs past its mark; the count
    recorded with it is the one read just before RSS was.
    """
    marks = sample_marks(total)
    samples: list[list[int]] = []
    deadline = time.monotonic() + timeout
    while marks:
        if worker.poll() is not None:
            raise SystemExit(f"runworker exited early: {phase.worker_log(worker)}")
        if time.monotonic() > deadline:
            raise SystemExit(f"{total:,} jobs were not done after {timeout:g} s")
        done = finished_jobs()
        if done >= marks[0]:
            rss = process_status(worker.pid, "VmRSS")
            samples.append([done, rss])
            log(f"  {done:,} jobs done: RSS {rss / 1024:.1f} MB")
            marks = [mark for mark in marks if mark > done]
        else:
            time.sleep(MEMORY_POLL)
    return samples


def run_memory(options: argparse.Namespace) -> dict[str, Any]:
    phase = worker_phase(options)
    try:
        phase.setup()
        total = options.memory_jobs
        log(f"[memory] queueing {total:,} jobs")
        enqueue(total)
        admin_pages.Database().analyze(vacuum=False)
        worker = phase.start_worker()  # no --burst: it must still be there to be measured
        log(f"[memory] runworker pid {worker.pid} running {total:,} jobs")
        samples = sample_rss(phase, worker, total, timeout=60 + total / MIN_WORKER_RATE)
        peak = process_status(worker.pid, "VmHWM")
        return {"database": server_facts(), "samples": samples, "total": total, "peak_kb": peak}
    finally:
        phase.stop_workers()
        shutil.rmtree(phase.logdir, ignore_errors=True)


# -- the claim on MariaDB/MySQL -------------------------------------------------------------


def mysql_pick() -> tuple[str, dict[str, Any]]:
    """The pick of a claim, as ``MySQLEngine.claim`` builds and binds it: ``PICK_SQL``
    formatted with the engine's ``claim_parts`` (guarded, as a worker's claim of an
    unlimited queue is), and its ``claim_params``."""
    from django.db import connection

    from durable_jobs.conf import get_settings
    from durable_jobs.db import engine_for, mysql
    from durable_jobs.db.engine import ClaimRequest

    engine: Any = engine_for(connection.alias)
    request = ClaimRequest(
        queue="default",
        limit=CLAIM_LIMIT,
        node_id=None,
        lease_seconds=get_settings().lease_seconds,
    )
    sql = mysql.PICK_SQL.format(**engine.claim_parts(request, guarded=True))
    return sql, engine.claim_params(request)


def in_rolled_back_transaction(sql: str, params: Any) -> list[tuple[Any, ...]]:
    """Run one statement in a transaction that is rolled back (the pick takes row locks)."""
    from django.db import transaction

    with transaction.atomic():
        rows = sql_rows(sql, params)
        transaction.set_rollback(True)
    return rows


def session_counters(sql: str, params: Any) -> dict[str, int]:
    """The session's ``Handler_read_*`` and ``Sort_*`` counters for one run of ``sql``
    (rolled back): index entries read in order (``Handler_read_next``), row lookups,
    and sorts. A nested subquery counts its reads too."""
    from django.db import transaction

    with transaction.atomic():
        sql_rows("FLUSH STATUS")
        sql_rows(sql, params)
        rows = sql_rows(
            "SHOW SESSION STATUS WHERE Variable_name LIKE 'Handler_read%%' "
            "OR Variable_name LIKE 'Sort%%'"
        )
        transaction.set_rollback(True)
    return {name: int(value) for name, value in rows}


def tabular(rows: list[tuple[Any, ...]], names: list[str]) -> str:
    """Rows as the mysql client prints them (``|``-separated, padded)."""
    cells = [names] + [["NULL" if v is None else str(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(names))]
    line = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    out = [line]
    for index, row in enumerate(cells):
        out.append("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |")
        if index == 0:
            out.append(line)
    return "\n".join([*out, line])


def json_accesses(plan: Any) -> list[dict[str, Any]]:
    """Every ``table`` access of a MariaDB/MySQL JSON plan, wherever it is nested."""
    found: list[dict[str, Any]] = []
    if isinstance(plan, dict):
        for key, value in plan.items():
            if key == "table" and isinstance(value, dict) and "table_name" in value:
                found.append(value)
            found += json_accesses(value)
    elif isinstance(plan, list):
        for item in plan:
            found += json_accesses(item)
    return found


def mysql_index_size(table: str, index: str) -> str:
    """An InnoDB index's size, from its persistent statistics (pages of 16 kB)."""
    rows = sql_rows(
        "SELECT stat_value * @@innodb_page_size FROM mysql.innodb_index_stats "
        "WHERE database_name = DATABASE() AND table_name = %s AND index_name = %s "
        "AND stat_name = 'size'",
        [table, index],
    )
    return f"{int(rows[0][0]) / 1024**2:.1f} MB" if rows else "?"


def run_claim(options: argparse.Namespace) -> dict[str, Any]:
    """The claim part on MariaDB/MySQL: the table, then the pick explained and counted."""
    import statistics

    log(f"migrate: {harness.setup_django():.1f} s")
    from django.db import connection

    from durable_jobs.models import Attempt, Job

    result: dict[str, Any] = {"database": mysql_server_facts()}
    result["fill_s"] = fill_history(options.finished)
    log(f"  written in {result['fill_s']:.1f} s")
    log(f"[claim] queueing {options.queued:,} jobs")
    started = time.perf_counter()
    enqueue(options.queued)
    result["queue_s"] = time.perf_counter() - started
    admin_pages.Database().analyze(vacuum=False)
    job_table = Job._meta.db_table
    result["table"] = table_facts_mysql()
    sql, params = mysql_pick()
    result["sql"] = "\n".join(line.rstrip() for line in sql.strip().splitlines() if line.strip())
    result["params"] = {key: str(value) for key, value in params.items()}
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN " + sql, params)
        names = [column[0] for column in cursor.description]
        explain_rows = cursor.fetchall()
    result["explain"] = tabular(list(explain_rows), names)
    (plan_text,) = sql_rows("EXPLAIN FORMAT=JSON " + sql, params)[0]
    result["explain_json"] = plan_text
    mariadb = bool(connection.mysql_is_mariadb)
    analyze = "ANALYZE FORMAT=JSON " if mariadb else "EXPLAIN ANALYZE "
    (analyzed,) = in_rolled_back_transaction(analyze + sql, params)[0]
    result["analyze_statement"] = analyze.strip()
    result["analyze"] = analyzed
    picked = in_rolled_back_transaction(sql, params)
    result["picked"] = len(picked)
    result["counters"] = session_counters(sql, params)
    timings = []
    for _ in range(MYSQL_PICK_RUNS):
        started = time.perf_counter()
        in_rolled_back_transaction(sql, params)
        timings.append((time.perf_counter() - started) * 1000)
    result["pick_ms"] = {"median": statistics.median(timings), "max": max(timings)}
    # What the plans say about the job table's access in the outer query.
    accesses = [
        access
        for access in json_accesses(json.loads(plan_text))
        if access.get("table_name") == "job"
    ]
    outer = accesses[0] if accesses else {}
    analyzed_accesses = (
        [a for a in json_accesses(json.loads(analyzed)) if a.get("table_name") == "job"]
        if mariadb
        else []
    )
    result["check"] = {
        "key": outer.get("key"),
        "uses_claim_index": outer.get("key") == MYSQL_CLAIM_INDEX,
        "filesort": "filesort" in plan_text.lower() or "filesort" in str(analyzed).lower(),
        "r_rows": analyzed_accesses[0].get("r_rows") if analyzed_accesses else None,
        "attempts": Attempt.objects.count(),
        "job_table": job_table,
    }
    log(
        f"[claim] key {result['check']['key']}, filesort {result['check']['filesort']}, "
        f"r_rows {result['check']['r_rows']}, counters {result['counters']}"
    )
    return result


def mysql_server_facts() -> dict[str, str]:
    from django.db import connection

    with connection.cursor() as cursor:
        return run.mysql_facts(cursor)


def table_facts_mysql() -> dict[str, Any]:
    """Rows per state, and the sizes of the job table, its claim index and the attempts."""
    from django.db.models import Count

    from durable_jobs.models import Attempt, Job

    states = dict(Job.objects.values_list("state").annotate(n=Count("pk")).order_by())
    sizes = {}
    for label, table in (("jobs", Job._meta.db_table), ("attempts", Attempt._meta.db_table)):
        (size,) = sql_rows(
            "SELECT data_length + index_length FROM information_schema.tables "
            "WHERE table_schema = DATABASE() AND table_name = %s",
            [table],
        )[0]
        sizes[label] = f"{int(size) / 1024**2:.0f} MB"
    sizes["claim_index"] = mysql_index_size(Job._meta.db_table, MYSQL_CLAIM_INDEX)
    return {"states": states, "attempts": Attempt.objects.count(), "sizes": sizes}


def run_phase(options: argparse.Namespace) -> int:
    # The parent ends a phase with SIGTERM: unwind, so the finally blocks stop the workers.
    signal.signal(signal.SIGTERM, harness.raise_system_exit)
    if options.phase == "claim":
        harness.print_phase_result(run_claim(options))
        return 0
    result = run_flat(options) if options.phase == "flat" else run_memory(options)
    harness.print_phase_result(result)
    return 0


# ================================================================================================
# Parent: the database, the phases, the report
# ================================================================================================


def phase_timeout(part: str, options: argparse.Namespace) -> float:
    """Seconds a part may take before it is stopped: sized on slow rates, not typical ones."""
    if options.timeout is not None:
        return float(options.timeout)
    if part == "flat":
        return 60 + 2 * options.queued / MIN_DRAIN_RATE + options.finished / MIN_FILL_RATE
    if part == "claim":
        return 120 + (options.finished + options.queued) / (MIN_FILL_RATE / 4)
    return 60 + options.memory_jobs / MIN_WORKER_RATE


def run_part(part: str, options: argparse.Namespace) -> dict[str, Any]:
    """Run one part in a child process, against a database created for it and dropped after."""
    mysql = options.db == "mysql"
    # Both refuse an existing database.
    if mysql:
        harness.create_mysql_database(options, replace=False)
    else:
        harness.create_postgres_database(options, replace=False)
    try:
        command = [sys.executable, str(Path(__file__).resolve()), "--phase", part]
        command += ["--queued", str(options.queued), "--finished", str(options.finished)]
        command += ["--memory-jobs", str(options.memory_jobs), "--db", options.db]
        command += harness.postgres_argv(options) + harness.mysql_argv(options)
        timeout = phase_timeout(part, options)
        name = options.mysql_dbname if mysql else options.pg_dbname
        log(f"[{part}] database {name}, at most {timeout:.0f} s")
        started = time.monotonic()
        env = run.bench_env("mysql" if mysql else "postgres", options)
        result = harness.run_phase_process(command, vendor=part, env=env, timeout=timeout)
        result["seconds"] = time.monotonic() - started
        return result
    finally:
        if mysql:
            harness.drop_mysql_database(options)
        else:
            harness.drop_postgres_database(options)


# -- the figures ------------------------------------------------------------------------------


def flat_figures(flat: dict[str, Any]) -> dict[str, Any]:
    """The flat-cost figures of the JSON output."""
    empty, full = flat["empty"]["drain"]["rate"], flat["full"]["drain"]["rate"]
    states = flat["full"]["table"]["states"]
    return {
        "empty_rate": empty,
        "full_rate": full,
        "ratio": full / empty,
        "finished": sum(states.get(state, 0) for state in ("completed", "dead", "cancelled")),
        "queued": flat["full"]["drain"]["jobs"],
        "explain": flat["full"]["claim"]["plan"],
        "claim_uses_index": flat["full"]["claim"]["uses_index"],
    }


def memory_figures(memory: dict[str, Any]) -> dict[str, Any]:
    """The memory figures of the JSON output."""
    samples = memory["samples"]
    (first, first_kb), (done, last_kb) = samples[0], samples[-1]
    return {
        "rss_after_first_kb": first_kb,
        "rss_after_all_kb": last_kb,
        "first": first,
        "all": done,
        "ratio": last_kb / first_kb,
        "samples": samples,
    }


def figures(results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "flat" in results:
        out["flat_cost"] = flat_figures(results["flat"])
    if "memory" in results:
        out["memory"] = memory_figures(results["memory"])
    return out


# -- Markdown ---------------------------------------------------------------------------------


def verdict(met: bool) -> str:
    return "PASS" if met else "MISSED"


def machine_facts(results: dict[str, dict[str, Any]]) -> list[tuple[str, str]]:
    database = next(iter(results.values()))["database"]
    return [
        harness.cpu_fact(),
        harness.memory_fact(),
        ("Load average (1, 5, 15 min) at the end", harness.load_average()),
        *harness.software_facts(),
        ("PostgreSQL", f"{database['version']} ({database['settings']})"),
    ]


def table_label(table: dict[str, Any]) -> str:
    states = table["states"]
    finished = ", ".join(
        f"{states[state]:,} {state}"
        for state in ("completed", "dead", "cancelled")
        if states.get(state)
    )
    queued = states.get("queued", 0)
    if not finished:
        return f"empty: {queued:,} queued"
    return f"{finished}, {table['attempts']:,} attempts; {queued:,} queued"


def render_flat(flat: dict[str, Any]) -> list[str]:
    numbers = flat_figures(flat)
    lines = [
        "",
        "### Drain throughput over an empty and a full table",
        "",
        f"{DRAIN_WORKERS} `runworker --burst` processes, {CONCURRENCY} threads each, drain "
        f"{numbers['queued']:,} no-op jobs. Rate: jobs / (last `finished_at` - process start).",
        "",
        "| Table before the drain | jobs/s | jobs/s, first claim → last finish "
        "| Load average (1 min) before → after |",
        "| --- | ---: | ---: | --- |",
    ]
    for case in ("empty", "full"):
        drain = flat[case]["drain"]
        load = f"{drain['load_before'].split(',')[0]} → {drain['load_after'].split(',')[0]}"
        lines.append(
            f"| {table_label(flat[case]['table'])} | {drain['rate']:,.0f} "
            f"| {drain['steady_rate']:,.0f} | {load} |"
        )
    lines += [
        "",
        f"**Full ÷ empty: {numbers['ratio']:.2f}** (target ≥ {FLAT_TARGET:.2f}: "
        f"**{verdict(numbers['ratio'] >= FLAT_TARGET)}**).",
        "",
        "What a job cost the database during each drain (`pg_stat_database`, divided by the "
        "jobs: buffer hits, reads from outside PostgreSQL's buffer cache, and time spent "
        "running statements), the table pages that hold the drained jobs' rows before and "
        "after the drain, and the claim statement explained before the drain. Block and "
        "page counts do not depend on what else the machine runs; times do.",
        "",
        "| Table | Blocks hit per job | Blocks read per job | Statement ms per job "
        "| Table pages holding the jobs, before → after | "
        f"Claim of {CLAIM_LIMIT}: planning, execution ms | Claim: buffers "
        "| Claim reads the job table by index only |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for case in ("empty", "full"):
        per_job, claim = flat[case]["drain"]["per_job"], flat[case]["claim"]
        pages = flat[case]["drain"]["pages"]
        lines.append(
            f"| {case} | {per_job['hit']:.1f} | {per_job['read']:.2f} "
            f"| {per_job['active_ms']:.3f} "
            f"| {pages[0]:,} → {pages[1]:,} | {claim['planning_ms']}, {claim['execution_ms']} "
            f"| {claim['buffers']} "
            f"| {'yes' if claim['uses_index'] else 'no'} |"
        )
    lines += [
        "",
        "Jobs/s in each tenth of the drain, in finishing order:",
        "",
        "| Table | " + " | ".join(str(k) for k in range(1, 11)) + " |",
        "| --- |" + " ---: |" * 10,
    ]
    for case in ("empty", "full"):
        tenths = flat[case]["drain"]["tenths"]
        lines.append(f"| {case} | " + " | ".join(f"{rate:,.0f}" for rate in tenths) + " |")
    sizes = flat["full"]["table"]["sizes"]
    lines += [
        "",
        f"The full table was written in {flat['fill_s']:.0f} s; before its drain the job "
        f"table took {sizes['jobs']} (indexes included), its claim index "
        f"`{flat['full']['claim']['claim_index']}` {sizes['claim_index']}, the attempt table "
        f"{sizes['attempts']}.",
    ]
    return lines + render_claim(flat["full"]["claim"])


def render_claim(claim: dict[str, Any]) -> list[str]:
    uses = "yes" if claim["uses_index"] else "**no**"
    indexes = ", ".join(f"`{name}`" for name in claim["indexes"]) or "none"
    first = claim["first"]
    if claim["prepared"]:
        how = (
            "durable_jobs runs it as a prepared statement, so this is its "
            f"{ordinal(PLAN_CACHE_RUNS)} execution on one connection, when PostgreSQL has "
            f"settled on a {'generic' if claim['generic'] else 'custom'} plan "
            f"(the first execution, planned for its values: {first['execution_ms']} ms, "
            f"{first['buffers']}, index only: {'yes' if first['uses_index'] else 'no'})"
        )
        if not claim["generic"]:
            how += (
                ". A custom plan is made again at every execution: planning took "
                f"{claim['planning_ms']} ms, execution {claim['execution_ms']} ms"
            )
    else:
        how = "durable_jobs runs it unprepared, so it is planned for its values every time"
    values = ", ".join(f"${index} = `{value}`" for index, value in enumerate(claim["values"], 1))
    return [
        "",
        "### The claim statement over the full table",
        "",
        f"The statement a worker sends to claim up to {CLAIM_LIMIT} jobs, built by "
        "durable_jobs' PostgreSQL backend and explained (`EXPLAIN (ANALYZE, BUFFERS)`) with "
        "the full table in place, before the drain, in a transaction rolled back afterwards; "
        f"{how}. Reads the job table through an index only: {uses} (indexes: {indexes}; the "
        f"claim index is `{claim['claim_index']}`).",
        "",
        "```postgresql",  # the SQL lexer stops at the $1 parameters
        claim["sql"],
        "```",
        "",
        f"Parameters: {values}.",
        "",
        "```text",
        claim["plan"],
        "```",
    ]


def ordinal(number: int) -> str:
    suffix = (
        "th" if 10 <= number % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(number % 10, "th")
    )
    return f"{number}{suffix}"


def render_memory(memory: dict[str, Any]) -> list[str]:
    numbers = memory_figures(memory)
    lines = [
        "",
        "### Worker memory",
        "",
        f"One `runworker --queues default:{CONCURRENCY}` process runs {memory['total']:,} "
        "no-op jobs, all queued before it starts; its RSS (`VmRSS`) when the finished jobs "
        "reach each count:",
        "",
        "| Jobs finished | RSS (MB) | ÷ first |",
        "| ---: | ---: | ---: |",
    ]
    first_kb = numbers["rss_after_first_kb"]
    for done, rss in numbers["samples"]:
        lines.append(f"| {done:,} | {rss / 1024:.1f} | {rss / first_kb:.3f} |")
    lines += [
        "",
        f"**RSS after {numbers['all']:,} jobs ÷ after the first {numbers['first']:,}: "
        f"{numbers['ratio']:.3f}** (target ≤ {MEMORY_TARGET:.2f}: "
        f"**{verdict(numbers['ratio'] <= MEMORY_TARGET)}**); peak RSS (`VmHWM`) "
        f"{memory['peak_kb'] / 1024:.1f} MB.",
    ]
    return lines


def render_mysql_claim(claim: dict[str, Any], argv: list[str]) -> str:
    """The ``--db mysql`` report: the table, the pick, its plans and counters."""
    database = claim["database"]
    label, version = database["version"].split(" ", 1)
    facts = [
        harness.cpu_fact(),
        harness.memory_fact(),
        ("Load average (1, 5, 15 min) at the end", harness.load_average()),
        *harness.software_facts(mysql=True),
        (label, f"{version} ({database['settings']})"),
    ]
    lines = harness.report_heading("scale.py", argv, facts)
    table, check, counters = claim["table"], claim["check"], claim["counters"]
    states = ", ".join(f"{count:,} {state}" for state, count in sorted(table["states"].items()))
    sizes = table["sizes"]
    read_next = counters.get("Handler_read_next", 0)
    read_key = counters.get("Handler_read_key", 0)
    sorted_rows = counters.get("Sort_rows", 0)
    lines += [
        "",
        f"Time taken: {claim['seconds']:.0f} s. The job table: {states} "
        f"({table['attempts']:,} attempts); the finished jobs were written in "
        f"{claim['fill_s']:.0f} s (set-based `INSERT ... SELECT` over `seq_1_to_N`), the "
        f"waiting ones queued with `enqueue_many()` in {claim['queue_s']:.0f} s. Sizes after "
        f"`ANALYZE TABLE`: job table {sizes['jobs']} (indexes included), its claim index "
        f"`{MYSQL_CLAIM_INDEX}` {sizes['claim_index']}, attempt table {sizes['attempts']}.",
        "",
        f"The pick of a claim of up to {CLAIM_LIMIT} jobs from queue `default`, as "
        "`MySQLEngine.claim` sends it (`PICK_SQL` of `durable_jobs/db/mysql.py` formatted "
        "with `engine.claim_parts(request, guarded=True)`, bound to "
        "`engine.claim_params(request)`):",
        "",
        "```sql",
        claim["sql"],
        "```",
        "",
        "Parameters: "
        + ", ".join(
            f"`{key}` = `{value}`"
            for key, value in claim["params"].items()
            if f"%({key})s" in claim["sql"]
        )
        + ".",
        "",
        f"**Reads the claim index `{MYSQL_CLAIM_INDEX}`: "
        f"{'yes' if check['uses_claim_index'] else 'no (' + str(check['key']) + ')'}; "
        f"filesort: {'yes' if check['filesort'] else 'no'}; rows read from the job table "
        f"(`r_rows`): {check['r_rows'] if check['r_rows'] is not None else '-'}** for "
        f"{claim['picked']} jobs picked. One run's session counters: "
        f"`Handler_read_key` {read_key}, `Handler_read_next` {read_next}, `Sort_rows` "
        f"{sorted_rows} (the index range is opened once per lookup and read forward entry by "
        "entry; the guard's lookup of the queue's row counts as well). The pick took "
        f"{claim['pick_ms']['median']:.2f} ms at the median of {MYSQL_PICK_RUNS} runs "
        f"(max {claim['pick_ms']['max']:.2f} ms), each in a transaction rolled back, its "
        "commit round trip included.",
        "",
        "`EXPLAIN`:",
        "",
        "```text",
        claim["explain"],
        "```",
        "",
        f"`{claim['analyze_statement']}` (the statement run, in a transaction rolled back):",
        "",
        "```json" if claim["analyze_statement"].endswith("JSON") else "```text",
        claim["analyze"],
        "```",
    ]
    return "\n".join(lines) + "\n"


def render(results: dict[str, dict[str, Any]], argv: list[str]) -> str:
    lines = harness.report_heading("scale.py", argv, machine_facts(results))
    durations = ", ".join(f"{part} {results[part]['seconds']:.0f} s" for part in results)
    lines += ["", f"Time taken: {durations}."]
    if "flat" in results:
        lines += render_flat(results["flat"])
    if "memory" in results:
        lines += render_memory(results["memory"])
    return "\n".join(lines) + "\n"


SECTION_INTRO = """\
`python benchmarks/scale.py` checks two things a long-running deployment depends on
(PostgreSQL, a database of its own, created and dropped by the script):

- **Flat cost as the table grows**: the drain rate of 100,000 no-op jobs
  (2 `runworker --burst` processes) over an empty table, and again over 1,000,000
  finished jobs (completed, dead and cancelled, with their attempts, finished over
  30 days; written with set-based SQL, then `VACUUM ANALYZE` as autovacuum would),
  and the plan of the claim statement over the full table. Target: the full-table
  rate is at least 80 % of the empty-table rate, and the claim reads the job table
  through indexes only.
- **Worker memory**: the RSS of one `runworker` process after the first 1,000 jobs
  and after 100,000. Target: at most 10 % growth.

The rates move with whatever else the machine runs; the blocks each job reads and the
table pages that end up holding the drained jobs do not, and show what the history
costs each job. `--quick` uses 10,000 jobs per drain over 100,000 finished ones, and
10,000 jobs for the memory figure; `--json` prints the figures as one JSON object;
`--only flat` or `--only memory` runs one part.
"""


def write_section(path: Path, block: str, *, mysql: bool = False) -> None:
    """Replace the block between the markers of ``path`` (``--db mysql``: the
    ``scale-claim-mysql`` ones), or append the section."""
    text = path.read_text() if path.exists() else ""
    markers = MYSQL_MARKERS if mysql else MARKERS
    replaced = markers.replace_in(text, block)
    if replaced is None:
        if mysql:
            section = f"## {MYSQL_SECTION_TITLE}\n\n{markers.wrap(block)}\n"
        else:
            section = f"## {SECTION_TITLE}\n\n{SECTION_INTRO}\n{markers.wrap(block)}\n"
        replaced = text.rstrip("\n") + "\n\n" + section
    path.write_text(replaced)


# -- command line -----------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Drain throughput as the job table grows, and a worker's memory "
        "over many jobs (PostgreSQL)."
    )
    parser.add_argument("--json", action="store_true", help="Print the figures as one JSON object.")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="10,000-job drains over 100,000 finished jobs, 10,000 jobs for memory.",
    )
    parser.add_argument(
        "--db",
        choices=("postgres", "mysql"),
        default="postgres",
        help="postgres (default): flat cost and memory; mysql: the claim's plan over a large "
        "table on the --mysql-* server (MariaDB or MySQL 8), its one part.",
    )
    parser.add_argument(
        "--only",
        choices=PARTS + MYSQL_PARTS,
        default=None,
        help="Run one part only (flat or memory; claim with --db mysql).",
    )
    parser.add_argument(
        "--write", type=Path, default=None, help="Also write the section into this Markdown file."
    )
    parser.add_argument(
        "--queued", type=int, default=None, help="Jobs per drain (100,000; quick 10,000)."
    )
    parser.add_argument(
        "--finished",
        type=int,
        default=None,
        help="Finished jobs under the second drain (1,000,000; quick 100,000).",
    )
    parser.add_argument(
        "--memory-jobs",
        type=int,
        default=None,
        help="Jobs the memory worker runs (100,000; quick 10,000).",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="Seconds allowed per part (default: sized for a busy machine, about 12 "
        "minutes for flat and 8 for memory; 2 each with --quick).",
    )
    harness.add_postgres_arguments(
        parser,
        dbname="scale_bench",
        dbname_help="Database to create for each part and drop afterwards (must not exist; "
        "default scale_bench).",
    )
    harness.add_mysql_arguments(
        parser,
        dbname="scale_bench",
        dbname_help="With --db mysql, the database to create and drop afterwards (must not "
        "exist; default scale_bench).",
    )
    # Internal: one part, in a child process.
    parser.add_argument("--phase", choices=PARTS + MYSQL_PARTS, help=argparse.SUPPRESS)
    parser.set_defaults(concurrency=CONCURRENCY)
    options = parser.parse_args(argv)
    sizes = QUICK if options.quick else FULL
    options.queued = options.queued or sizes.queued
    options.finished = options.finished or sizes.finished
    options.memory_jobs = options.memory_jobs or sizes.memory
    if options.queued < 100 or options.finished < 10_000:
        parser.error("--queued must be at least 100 and --finished at least 10000")
    if options.memory_jobs < 2 * MEMORY_FIRST:
        parser.error(f"--memory-jobs must be at least {2 * MEMORY_FIRST}")
    if options.db == "mysql":
        if options.only not in (None, *MYSQL_PARTS):
            parser.error("with --db mysql the one part is claim")
        if options.json:
            parser.error(
                "--json prints the PostgreSQL parts' figures: leave it out with --db mysql"
            )
        options.only = None
    elif options.only in MYSQL_PARTS and not options.phase:
        parser.error("the claim part runs with --db mysql")
    elif options.write is not None and options.only:
        parser.error("--write records a run of both parts: leave out --only")
    return options


def main(argv: list[str]) -> int:
    options = parse_args(argv)
    if options.phase:
        return run_phase(options)
    signal.signal(signal.SIGTERM, harness.raise_system_exit)
    if options.db == "mysql":
        try:
            claim = run_part("claim", options)
        except KeyboardInterrupt:
            log("interrupted: the processes were stopped and the database dropped")
            return 130
        block = render_mysql_claim(claim, argv)
        print(block)
        if options.write is not None:
            write_section(options.write, block, mysql=True)
            log(f"wrote {options.write}")
        return 0
    parts = [options.only] if options.only else list(PARTS)
    try:
        results = {part: run_part(part, options) for part in parts}
    except KeyboardInterrupt:
        log("interrupted: the processes were stopped and the database dropped")
        return 130
    if options.json:
        print(json.dumps(figures(results)), flush=True)
    else:
        print(render(results, argv))
    if options.write is not None:
        write_section(options.write, render(results, argv))
        log(f"wrote {options.write}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
