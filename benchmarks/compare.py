#!/usr/bin/env python
"""durable_jobs side by side with its peers, on this machine, in one run.

    python benchmarks/compare.py [--quick] [--jobs N] [--only SYSTEM,...] [--skip-scale]
                                 [--write docs/benchmarks.md]

Systems (``--only`` takes these names): durable_jobs on PostgreSQL
(``durable_jobs_pg``) and on SQLite (``durable_jobs_sqlite``), ``procrastinate``,
``django_tasks_db``, ``django_q2`` (ORM broker), ``celery_redis`` (Celery with a local
Redis), and ``pgbench``, the ceiling; ``scale`` is ``benchmarks/scale.py``'s flat cost
and memory figures. On MariaDB (or MySQL 8, the ``--mysql-*`` server), only when
``--only`` names them: ``durable_jobs_mysql``, ``django_tasks_db_mysql`` and
``django_q2_mysql`` (the same projects as their PostgreSQL rows). Each peer is installed
from PyPI at pinned versions into a virtualenv of its own under ``benchmarks/.venvs/``
and runs there, its worker processes included; each PostgreSQL or MariaDB system gets a
fresh database of its own (``peers_<system>``, utf8mb4 on MariaDB, created and dropped
by the run, never an existing one).

Measured for every system, one measurement at a time for all systems before the next,
so that all see about the same load on a shared machine: enqueue one job per
transaction, bulk enqueue, drain N no-op jobs with 1 and then 2 worker processes, and
the pickup latency of an idle worker. The report prints each target's ratio with PASS
or MISSED, and ``--write`` puts it, with a chart, into a Markdown page.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    # Run as a script: the repository's root must be importable for ``benchmarks``.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import harness, run
from benchmarks.harness import log
from benchmarks.peers import report, venvs
from benchmarks.peers.base import Adapter, Context
from benchmarks.peers.celery_redis import CeleryRedis
from benchmarks.peers.django_q2 import DjangoQ2, DjangoQ2Mysql
from benchmarks.peers.django_tasks_db import DjangoTasksDb, DjangoTasksDbMysql
from benchmarks.peers.durable_jobs import DurableJobsMysql, DurableJobsPostgres, DurableJobsSqlite
from benchmarks.peers.pgbench import Pgbench
from benchmarks.peers.procrastinate import Procrastinate

SYSTEMS: tuple[type[Adapter], ...] = (
    DurableJobsPostgres,
    DurableJobsSqlite,
    Procrastinate,
    DjangoTasksDb,
    DjangoQ2,
    CeleryRedis,
    Pgbench,
)
#: Run only when ``--only`` names them, so that the full run stays what it was.
MYSQL_SYSTEMS: tuple[type[Adapter], ...] = (DurableJobsMysql, DjangoTasksDbMysql, DjangoQ2Mysql)
MARKERS = harness.Markers("peer-comparison")
SECTION = "## Side by side with the peers"
#: The chart, relative to the directory of the page ``--write`` writes.
CHART = Path("_static/benchmarks/peers.png")
#: Where ``--write`` puts a run that includes MariaDB systems: a block of its own, so
#: that it never replaces the full run's.
MYSQL_MARKERS = harness.Markers("peer-comparison-mysql")
MYSQL_SECTION = "## MariaDB"
MYSQL_CHART = Path("_static/benchmarks/peers-mysql.png")
TOOLS_REQUIREMENTS = ("matplotlib==3.11.2",)
SCALE_SCRIPT = harness.REPO / "benchmarks" / "scale.py"


# ================================================================================================
# The run
# ================================================================================================


def run_all(adapters: list[Adapter], options: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Every measurement of every system, measurement by measurement. The enqueue
    measurements are short, and so easily skewed by a burst of other work on a shared
    machine: they run ``--rounds`` times, the systems taking turns, and the median
    round is kept."""
    out: dict[str, dict[str, Any]] = {adapter.key: {} for adapter in adapters}
    ready = []
    for adapter in adapters:
        log(f"[{adapter.key}] setting up")
        out[adapter.key]["setup"] = adapter.setup()
        if adapter.set_up:
            ready.append(adapter)

    def each(name: str, measure: Callable[[Adapter], dict[str, Any]], rounds: int = 1) -> None:
        found: dict[str, list[dict[str, Any]]] = {adapter.key: [] for adapter in ready}
        for index in range(rounds):
            for adapter in ready:
                turn = f" (round {index + 1} of {rounds})" if rounds > 1 else ""
                log(f"[{adapter.key}] {name}{turn}")
                result = measure(adapter)
                # How busy the machine was: other work on it moves every figure.
                result["load_1m"] = os.getloadavg()[0]
                found[adapter.key].append(result)
                log(f"[{adapter.key}] {name}{turn}: {summary(result)}")
        for key, results in found.items():
            out[key][name] = median_round(results)

    each("enqueue_single", lambda a: a.enqueue_one_per_tx(options.single_jobs), options.rounds)
    each("enqueue_bulk", lambda a: a.enqueue_bulk(options.jobs), options.rounds)
    each("drain_1", lambda a: a.drain(options.jobs, 1))
    each("drain_2", lambda a: a.drain(options.jobs, 2))
    each("latency", lambda a: a.latency(options.samples))
    return out


def median_round(results: list[dict[str, Any]]) -> dict[str, Any]:
    """The round with the median rate, with every round's rate; the first failure if
    no round succeeded."""
    measured = sorted((r for r in results if "rate" in r), key=lambda r: r["rate"])
    if not measured:
        return results[0]
    chosen = dict(measured[(len(measured) - 1) // 2])
    if len(results) > 1:
        chosen["rounds"] = [r.get("rate") for r in results]
    return chosen


def summary(result: dict[str, Any]) -> str:
    if "error" in result:
        return f"failed: {result['error']}"
    if "not_supported" in result:
        return f"n/a ({result['not_supported']})"
    if "p50_ms" in result:
        return f"p50 {result['p50_ms']:.1f} ms, p95 {result['p95_ms']:.1f} ms"
    if "variants" in result:  # pgbench
        return "; ".join(
            f"{run['label']}: {run['rate']:,.0f} jobs/s{cpu_summary(run)}"
            for run in result["variants"].values()
        )
    if "rate" in result:
        return f"{result['rate']:,.0f} jobs/s{cpu_summary(result)}"
    return "done"


def cpu_summary(result: dict[str, Any]) -> str:
    """A drain's CPU per 1,000 jobs, workers and database, if it has them."""
    workers, database = result.get("worker_cpu_per_1000"), result.get("db_cpu_per_1000")
    if workers is None:
        return ""
    shown = "none" if database is None else f"{database:.3f} s"
    return f" (CPU per 1,000: workers {workers:.3f} s, database {shown})"


def run_scale(options: argparse.Namespace, context: Context) -> dict[str, Any]:
    """``benchmarks/scale.py --json`` as one bounded phase; it prints one JSON object."""
    if options.skip_scale or (options.only and "scale" not in options.only):
        return {"status": "not run", "reason": "left out of this run"}
    if not SCALE_SCRIPT.exists():
        return {"status": "not run", "reason": "benchmarks/scale.py is not there"}
    timeout = min(options.scale_timeout, context.remaining())
    if timeout < 10:
        return {"status": "not run", "reason": "the run's --timeout was reached"}
    command = [sys.executable, str(SCALE_SCRIPT), "--json", *(["--quick"] if options.quick else [])]
    command += scale_database_arguments(options)
    log(f"[scale] {' '.join(command[1:])}")
    started = time.monotonic()
    output = context.scratch / "scale.out"
    with output.open("wb") as stdout:
        process = subprocess.Popen(
            command,
            cwd=harness.REPO,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group, ended by pid on the way out
        )
    # Its progress is passed on as it comes, and the last lines kept to say why it failed.
    last_lines: collections.deque[str] = collections.deque(maxlen=5)
    relay = threading.Thread(target=_relay, args=(process.stderr, last_lines), daemon=True)
    relay.start()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"status": "failed", "reason": f"took longer than {timeout:.0f}s"}
    finally:
        harness.kill_group(process)
        relay.join(timeout=5)
    seconds = time.monotonic() - started
    if process.returncode != 0:
        why = " / ".join(line.strip() for line in last_lines)
        return {"status": "failed", "reason": f"exited with {process.returncode}: {why}"}
    for line in reversed(output.read_text(errors="replace").splitlines()):
        with contextlib.suppress(ValueError):
            data = json.loads(line)
            if isinstance(data, dict) and "flat_cost" in data and "memory" in data:
                return {"status": "ok", "data": data, "seconds": seconds, "quick": options.quick}
    return {"status": "failed", "reason": "it printed no JSON object with flat_cost and memory"}


def _relay(stream: Any, last_lines: collections.deque[str]) -> None:
    for raw in iter(stream.readline, b""):
        line = raw.decode(errors="replace")
        sys.stderr.write(line)
        if line.strip():
            last_lines.append(line)


def scale_database_arguments(options: argparse.Namespace) -> list[str]:
    """The server, and a database named like the run's others, if scale.py takes them
    (it creates and drops that database itself)."""
    try:
        usage = subprocess.run(
            [sys.executable, str(SCALE_SCRIPT), "--help"],
            capture_output=True,
            text=True,
            timeout=30,
            cwd=harness.REPO,
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return []
    if "--pg-dbname" not in usage:
        return []
    return harness.postgres_argv(
        argparse.Namespace(**{**vars(options), "pg_dbname": "peers_scale"})
    )


# ================================================================================================
# Facts about the machine and the servers
# ================================================================================================


def postgres_fact(options: argparse.Namespace) -> tuple[str, str]:
    names = ("synchronous_commit", "fsync", "shared_buffers", "max_connections")
    try:
        connection = harness.pg_connect(options, "postgres")
    except Exception as exc:  # the report still says what it can
        return ("PostgreSQL", f"unavailable: {exc}")
    try:
        version = connection.execute("SHOW server_version").fetchone()[0]
        settings = [f"{name}={connection.execute(f'SHOW {name}').fetchone()[0]}" for name in names]
    finally:
        connection.close()
    return ("PostgreSQL", f"{version} ({', '.join(settings)})")


def mysql_fact(options: argparse.Namespace) -> tuple[str, str]:
    try:
        connection = harness.mysql_connect(options)
    except Exception as exc:  # the report still says what it can
        return ("MariaDB/MySQL", f"unavailable: {exc}")
    try:
        facts = run.mysql_facts(connection.cursor())
    finally:
        connection.close()
    label, version = facts["version"].split(" ", 1)
    note = "; the Django projects' connections use READ COMMITTED, Django's default"
    return (label, f"{version} ({facts['settings']}{note})")


def machine_facts(options: argparse.Namespace, systems: dict[str, Any]) -> list[tuple[str, str]]:
    facts = [
        harness.cpu_fact(),
        harness.memory_fact(),
        ("Load average (1, 5, 15 min) at the end of the run", harness.load_average()),
        ("OS", platform.platform()),
        ("Python (every virtualenv)", platform.python_version()),
        postgres_fact(options),
    ]
    if any(system.key in systems for system in MYSQL_SYSTEMS):
        facts.append(mysql_fact(options))
    celery = systems.get("celery_redis", {}).get("facts", {})
    if celery.get("server"):
        facts.append(("Redis", f"{celery['server'][6:]} ({celery['persistence']})"))
    sqlite = systems.get("durable_jobs_sqlite", {}).get("facts", {}).get("database")
    if sqlite:
        facts.append(("SQLite", f"{sqlite['version'].split(' ', 1)[1]} ({sqlite['settings']})"))
    return facts


def shown_argv(argv: list[str]) -> list[str]:
    """The command line for the report, without ``--json FILE``, which changes nothing
    measured (and names a file of one machine)."""
    shown, skip = [], False
    for word in argv:
        if skip:
            skip = False
        elif word == "--json":
            skip = True
        elif not word.startswith("--json="):
            shown.append(word)
    return shown


def collect(
    adapters: list[Adapter],
    measured: dict[str, dict[str, Any]],
    scale: dict[str, Any],
    options: argparse.Namespace,
    argv: list[str],
    elapsed: float,
) -> dict[str, Any]:
    """Everything the report needs, JSON-able (the chart is drawn in another process)."""
    systems: dict[str, Any] = {}
    for adapter in adapters:
        entry = dict(measured.get(adapter.key, {}))
        facts = adapter.facts
        entry.update(
            label=adapter.label,
            facts=facts,
            versions=facts.get("versions") or {"pinned": ", ".join(adapter.requirements)},
            workers_note=adapter.workers_note,
            bulk_note=adapter.bulk_note,
            finish_note=adapter.finish_note,
            where=adapter.where,
        )
        if adapter.key == "celery_redis":
            entry["where"] = f"Redis `{options.redis_url}`"
        systems[adapter.key] = entry
    return {
        "meta": {
            "argv": shown_argv(argv),
            "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "jobs": options.jobs,
            "single_jobs": options.single_jobs,
            "samples": options.samples,
            "rounds": options.rounds,
            "concurrency": options.concurrency,
            "elapsed_s": elapsed,
            "machine": machine_facts(options, systems),
        },
        "systems": systems,
        "scale": scale,
    }


# ================================================================================================
# Writing
# ================================================================================================


def draw_chart(results: dict[str, Any], path: Path, scratch: Path) -> bool:
    """Draw the chart with matplotlib from the tools virtualenv; False if that failed."""
    try:
        python = venvs.ensure("tools", TOOLS_REQUIREMENTS)
    except (subprocess.SubprocessError, OSError) as exc:
        log(f"[chart] could not install matplotlib: {exc}")
        return False
    data = scratch / "results.json"
    data.write_text(json.dumps(results))
    command = [str(python), "-m", "benchmarks.peers.report", "chart", str(data), str(path)]
    env = {**os.environ, "PYTHONPATH": str(harness.REPO), "MPLCONFIGDIR": str(scratch / "mpl")}
    process = subprocess.Popen(command, cwd=harness.REPO, env=env, start_new_session=True)
    try:
        process.wait(timeout=120)
    except subprocess.TimeoutExpired:
        log("[chart] matplotlib took longer than 120s")
        return False
    finally:
        harness.kill_group(process)
    return process.returncode == 0


def write_page(path: Path, block: str, *, mysql: bool = False) -> None:
    """Replace the block between the markers (a run with MariaDB systems: the
    ``peer-comparison-mysql`` ones); without them, add the section before the page's
    results (or at its end)."""
    markers, heading = (MYSQL_MARKERS, MYSQL_SECTION) if mysql else (MARKERS, SECTION)
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    replaced = markers.replace_in(text, block)
    if replaced is None:
        section = f"{heading}\n\n{markers.wrap(block)}\n\n"
        if "\n## Results\n" in text:
            before, after = text.split("\n## Results\n", 1)
            replaced = f"{before}\n{section}## Results\n{after}"
        else:
            replaced = text.rstrip("\n") + "\n\n" + section
    path.write_text(replaced)


# ================================================================================================
# The command line
# ================================================================================================


def parse_args(argv: list[str]) -> argparse.Namespace:
    names = [system.key for system in (*SYSTEMS, *MYSQL_SYSTEMS)] + ["scale"]
    parser = argparse.ArgumentParser(
        description="durable_jobs side by side with Procrastinate, django-tasks-db, Django-Q2, "
        "Celery on Redis and a pgbench ceiling, on this machine, in one run.",
    )
    parser.add_argument("--quick", action="store_true", help="Smaller runs (about 6 minutes).")
    parser.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="N: jobs per drain and per bulk enqueue "
        "(default 10,000; 1,000 with --quick). One-per-transaction enqueues use N/5.",
    )
    parser.add_argument(
        "--only", default="", help=f"Comma-separated systems to run: {', '.join(names)}."
    )
    parser.add_argument("--skip-scale", action="store_true", help="Leave benchmarks/scale.py out.")
    parser.add_argument(
        "--write",
        type=Path,
        default=None,
        help=f"Write the results into this Markdown page (between the {MARKERS.name} markers) "
        f"and the chart beside it, in {CHART}; a run with MariaDB systems between the "
        f"{MYSQL_MARKERS.name} markers, with the chart in {MYSQL_CHART}.",
    )
    parser.add_argument("--json", type=Path, default=None, help="Also save the raw results here.")
    parser.add_argument(
        "--samples", type=int, default=None, help="Latency samples (default 100; 30 with --quick)."
    )
    parser.add_argument(
        "--concurrency", type=int, default=10, help="Concurrency per worker process (default 10)."
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="Rounds of each enqueue measurement, the systems taking turns; the median round "
        "is reported (default 3).",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="Seconds the whole run may take (default 2,400; 720 with --quick); measurements "
        "not started by then are reported as not run.",
    )
    parser.add_argument(
        "--scale-timeout",
        type=float,
        default=None,
        help="Seconds benchmarks/scale.py may take (default 1,200; 360 with --quick).",
    )
    parser.add_argument(
        "--redis-url",
        default="redis://127.0.0.1:6379/15",
        help="The Redis database Celery uses (default DB 15), emptied at start and end; "
        "refused if it holds data the benchmark did not put there.",
    )
    parser.add_argument("--seed", type=int, default=1234, help="Seed of the latency spacing.")
    harness.add_postgres_arguments(parser, dbname="", dbname_help=argparse.SUPPRESS)
    harness.add_mysql_arguments(parser, dbname="", dbname_help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    options.only = {name.strip() for name in options.only.split(",") if name.strip()}
    if unknown := options.only - set(names):
        parser.error(f"unknown systems in --only: {', '.join(sorted(unknown))}")
    if options.jobs is None:
        options.jobs = 1000 if options.quick else 10_000
    if options.jobs < 10 or options.concurrency < 1 or options.rounds < 1:
        parser.error("--jobs must be at least 10, --concurrency and --rounds at least 1")
    options.single_jobs = max(100, options.jobs // 5)
    if options.samples is None:
        options.samples = 30 if options.quick else 100
    if options.timeout is None:
        options.timeout = 720 if options.quick else 2400
    if options.scale_timeout is None:
        options.scale_timeout = 360 if options.quick else 1200
    return options


def main(argv: list[str]) -> int:
    options = parse_args(argv)
    # SIGTERM unwinds like Ctrl-C, so that every ``finally`` below ends its processes;
    # and Ctrl-C does so even when a shell started the run with SIGINT ignored.
    signal.signal(signal.SIGTERM, harness.raise_system_exit)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    started = time.monotonic()
    scratch = Path(tempfile.mkdtemp(prefix="peers_compare_"))
    context = Context(options=options, deadline=started + options.timeout, scratch=scratch)
    chosen = [s for s in SYSTEMS if not options.only or s.key in options.only]
    chosen += [s for s in MYSQL_SYSTEMS if s.key in options.only]
    adapters = [system(context) for system in chosen]
    mysql = any(adapter.uses_mysql for adapter in adapters)
    existing = [adapter for adapter in adapters if adapter.database_exists()]
    if existing:
        names = ", ".join(
            f"{adapter.dbname} ({'MariaDB/MySQL' if adapter.uses_mysql else 'PostgreSQL'})"
            for adapter in existing
        )
        raise SystemExit(
            f"database(s) {names} already exist (left by an interrupted run?); drop them "
            f"(dropdb -h {options.pg_host} -U {options.pg_user} NAME, or DROP DATABASE NAME "
            "on MariaDB/MySQL) and run again"
        )
    harness.compile_sources()
    try:
        for adapter in adapters:
            adapter.prepare()
        # Installing can take minutes the first time: the deadline counts from here.
        context.deadline = time.monotonic() + options.timeout
        try:
            measured = run_all(adapters, options)
        finally:
            for adapter in adapters:
                try:
                    adapter.teardown()
                except Exception as exc:  # the others are still torn down
                    log(f"[{adapter.key}] teardown failed: {exc}")
        scale = run_scale(options, context)
        results = collect(adapters, measured, scale, options, argv, time.monotonic() - started)
        if options.json:
            options.json.write_text(json.dumps(results, indent=2))
        chart = None
        if options.write is not None:
            image = options.write.resolve().parent / (MYSQL_CHART if mysql else CHART)
            if draw_chart(results, image, scratch):
                chart = os.path.relpath(image, options.write.resolve().parent)
                log(f"wrote {image}")
        block = report.markdown(results, chart)
        print(block)
        for check in report.checks(results):
            print(check.line())
        for reference in report.references(results):
            print(reference)
        if options.write is not None:
            write_page(options.write, block, mysql=mysql)
            log(f"wrote {options.write}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    log(f"done in {(time.monotonic() - started) / 60:.1f} minutes")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        # Every ``finally`` has run by now: processes ended, databases dropped.
        log("interrupted: the processes were stopped and the databases dropped")
        sys.exit(130)
