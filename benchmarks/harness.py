"""What the benchmark scripts share: phases, PostgreSQL and MySQL/MariaDB databases, the
machine, Markdown.

Django is configured once per process, from one settings module, so each script
measures each database in a child process of its own, a *phase* (the script run again
with ``--phase VENDOR``). The parent creates and removes the databases, bounds every
phase with a timeout, kills whatever a phase left running, and reads the phase's
result from one line of its standard output; everything else a phase says goes to
standard error, as progress.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
import datetime
import json
import math
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
#: Starts the line of standard output on which a phase hands its result (JSON) to the parent.
RESULT_PREFIX = "BENCHMARK-PHASE-RESULT "
#: SIGTERM, then this long for the phase and its processes to stop, before SIGKILL.
GRACEFUL_STOP_SECONDS = 20


# ================================================================================================
# Small helpers
# ================================================================================================


def log(message: str) -> None:
    """Progress, on standard error: standard output is for the results."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def raise_system_exit(signum: int, frame: Any) -> None:
    """A SIGTERM handler that unwinds the stack, so that ``finally`` blocks clean up."""
    raise SystemExit(128 + signum)


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile: with 20 values, p95 is the second largest."""
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


def utc_now_text() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


# ================================================================================================
# PostgreSQL: the server, and the database a benchmark creates for itself
# ================================================================================================


def add_postgres_arguments(
    parser: argparse.ArgumentParser, *, dbname: str, dbname_help: str
) -> None:
    """``--pg-host``, ``--pg-port``, ``--pg-user`` (libpq's variables, else the local
    server as ``postgres``) and ``--pg-dbname``, the benchmark's own database."""
    parser.add_argument(
        "--pg-host",
        default=os.environ.get("PGHOST", "127.0.0.1"),
        help="PostgreSQL host (default $PGHOST or 127.0.0.1).",
    )
    parser.add_argument(
        "--pg-port",
        type=int,
        default=int(os.environ.get("PGPORT", "5432")),
        help="PostgreSQL port (default $PGPORT or 5432).",
    )
    parser.add_argument(
        "--pg-user",
        default=os.environ.get("PGUSER", "postgres"),
        help="PostgreSQL user (default $PGUSER or postgres); $PGPASSWORD is used if set.",
    )
    parser.add_argument("--pg-dbname", default=dbname, help=dbname_help)


def postgres_argv(options: argparse.Namespace) -> list[str]:
    """The ``--pg-*`` options again, for a phase that connects to the server itself."""
    values = {
        "--pg-host": options.pg_host,
        "--pg-port": str(options.pg_port),
        "--pg-user": options.pg_user,
        "--pg-dbname": options.pg_dbname,
    }
    return [word for option in values.items() for word in option]


def pg_connect(options: argparse.Namespace, dbname: str) -> Any:
    """A psycopg connection in autocommit mode to ``dbname`` on the ``--pg-*`` server."""
    import psycopg

    return psycopg.connect(
        host=options.pg_host,
        port=options.pg_port,
        user=options.pg_user,
        password=os.environ.get("PGPASSWORD") or None,
        dbname=dbname,
        connect_timeout=10,
        autocommit=True,
    )


def postgres_database_exists(options: argparse.Namespace) -> bool:
    admin = pg_connect(options, "postgres")
    try:
        found = admin.execute(
            "SELECT 1 FROM pg_database WHERE datname = %s", (options.pg_dbname,)
        ).fetchone()
    finally:
        admin.close()
    return found is not None


def create_postgres_database(options: argparse.Namespace, *, replace: bool) -> None:
    """Create ``--pg-dbname``. If it exists: drop it first with ``replace`` (the name is
    the benchmark's own), else refuse, since it may hold data someone wants."""
    if not replace and postgres_database_exists(options):
        raise SystemExit(
            f"database {options.pg_dbname!r} already exists (left by an interrupted run?); "
            f"drop it (dropdb -h {options.pg_host} -U {options.pg_user} {options.pg_dbname}) "
            "or pass --pg-dbname"
        )
    admin = pg_connect(options, "postgres")
    try:
        if replace:
            admin.execute(f'DROP DATABASE IF EXISTS "{options.pg_dbname}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{options.pg_dbname}"')
    finally:
        admin.close()


def drop_postgres_database(options: argparse.Namespace) -> None:
    """Drop ``--pg-dbname``; FORCE ends the sessions a killed phase may have left."""
    admin = pg_connect(options, "postgres")
    try:
        admin.execute(f'DROP DATABASE IF EXISTS "{options.pg_dbname}" WITH (FORCE)')
    finally:
        admin.close()


# ================================================================================================
# MySQL and MariaDB: the server, and the database a benchmark creates for itself
# ================================================================================================


def add_mysql_arguments(parser: argparse.ArgumentParser, *, dbname: str, dbname_help: str) -> None:
    """``--mysql-host``, ``--mysql-port``, ``--mysql-user`` (the local server as ``root``
    unless ``$MYSQL_HOST``, ``$MYSQL_TCP_PORT`` or ``$MYSQL_USER`` say otherwise;
    ``$MYSQL_PWD`` is used if set) and ``--mysql-dbname``, the benchmark's own database."""
    parser.add_argument(
        "--mysql-host",
        default=os.environ.get("MYSQL_HOST", "127.0.0.1"),
        help="MySQL or MariaDB host (default $MYSQL_HOST or 127.0.0.1).",
    )
    parser.add_argument(
        "--mysql-port",
        type=int,
        default=int(os.environ.get("MYSQL_TCP_PORT", "3306")),
        help="MySQL or MariaDB port (default $MYSQL_TCP_PORT or 3306).",
    )
    parser.add_argument(
        "--mysql-user",
        default=os.environ.get("MYSQL_USER", "root"),
        help="MySQL or MariaDB user (default $MYSQL_USER or root); $MYSQL_PWD is used if set.",
    )
    parser.add_argument("--mysql-dbname", default=dbname, help=dbname_help)


def mysql_argv(options: argparse.Namespace) -> list[str]:
    """The ``--mysql-*`` options again, for a process that connects to the server itself."""
    values = {
        "--mysql-host": options.mysql_host,
        "--mysql-port": str(options.mysql_port),
        "--mysql-user": options.mysql_user,
        "--mysql-dbname": options.mysql_dbname,
    }
    return [word for option in values.items() for word in option]


def mysql_connect(options: argparse.Namespace, dbname: str | None = None) -> Any:
    """A mysqlclient connection in autocommit mode, to ``dbname`` or to no database."""
    import MySQLdb

    kwargs: dict[str, Any] = {"database": dbname} if dbname else {}
    connection = MySQLdb.connect(
        host=options.mysql_host,
        port=options.mysql_port,
        user=options.mysql_user,
        password=os.environ.get("MYSQL_PWD", ""),
        charset="utf8mb4",
        connect_timeout=10,
        **kwargs,
    )
    connection.autocommit(True)
    return connection


def mysql_query(options: argparse.Namespace, sql: str, params: Any = None) -> list[Any]:
    """Run one statement on the server (no database selected); its rows."""
    connection = mysql_connect(options)
    try:
        cursor = connection.cursor()
        cursor.execute(sql, params)
        return list(cursor.fetchall()) if cursor.description else []
    finally:
        connection.close()


def mysql_database_exists(options: argparse.Namespace) -> bool:
    rows = mysql_query(
        options,
        "SELECT 1 FROM information_schema.schemata WHERE schema_name = %s",
        [options.mysql_dbname],
    )
    return bool(rows)


def create_mysql_database(options: argparse.Namespace, *, replace: bool) -> None:
    """Create ``--mysql-dbname`` in utf8mb4 (durable_jobs' check E022 asks for it). If it
    exists: drop it first with ``replace``, else refuse, as for PostgreSQL."""
    name = options.mysql_dbname
    if not replace and mysql_database_exists(options):
        raise SystemExit(
            f"database {name!r} already exists on {options.mysql_host}:{options.mysql_port} "
            f"(left by an interrupted run?); drop it (DROP DATABASE `{name}`) or pass "
            "--mysql-dbname"
        )
    if replace:
        mysql_query(options, f"DROP DATABASE IF EXISTS `{name}`")
    mysql_query(
        options, f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"
    )


def drop_mysql_database(options: argparse.Namespace) -> None:
    """Drop ``--mysql-dbname``, after ending the sessions a killed phase may have left in it
    (a session holding a lock on one of its tables would keep DROP waiting)."""
    name = options.mysql_dbname
    for (session,) in mysql_query(
        options,
        "SELECT id FROM information_schema.processlist WHERE db = %s AND id <> CONNECTION_ID()",
        [name],
    ):
        with contextlib.suppress(Exception):
            mysql_query(options, f"KILL {int(session)}")
    mysql_query(options, f"DROP DATABASE IF EXISTS `{name}`")


def mysql_server_label(version: str) -> str:
    """ "MariaDB" or "MySQL", from the server's version string."""
    return "MariaDB" if "mariadb" in version.lower() else "MySQL"


# ================================================================================================
# Phases: one database each, in a child process
# ================================================================================================


def child_env(
    settings_module: str, vendor: str, options: argparse.Namespace, **extra: str
) -> dict[str, str]:
    """Environment for a phase, or a process a phase starts: the repository importable,
    these Django settings, this database (the ``DURABLE_JOBS_BENCH_*`` variables that
    ``benchmarks/settings.py`` reads), and ``extra`` variables."""
    env = dict(os.environ)
    path = env.get("PYTHONPATH")
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + path if path else "")
    env["DJANGO_SETTINGS_MODULE"] = settings_module
    env["DURABLE_JOBS_BENCH_DB"] = vendor
    if vendor == "postgres":
        env["DURABLE_JOBS_BENCH_PG_NAME"] = options.pg_dbname
        env["DURABLE_JOBS_BENCH_PG_HOST"] = options.pg_host
        env["DURABLE_JOBS_BENCH_PG_PORT"] = str(options.pg_port)
        env["DURABLE_JOBS_BENCH_PG_USER"] = options.pg_user
    elif vendor == "mysql":
        env["DURABLE_JOBS_BENCH_MY_NAME"] = options.mysql_dbname
        env["DURABLE_JOBS_BENCH_MY_HOST"] = options.mysql_host
        env["DURABLE_JOBS_BENCH_MY_PORT"] = str(options.mysql_port)
        env["DURABLE_JOBS_BENCH_MY_USER"] = options.mysql_user
    elif getattr(options, "sqlite_path", None):
        # run.py's phase has no such option: the workers it starts inherit the variable.
        env["DURABLE_JOBS_BENCH_SQLITE_PATH"] = str(options.sqlite_path)
    env.update(extra)
    return env


def compile_sources() -> None:
    """Write the bytecode of this checkout's ``durable_jobs`` and ``benchmarks`` packages.

    The peers run from packages pip installed, which pip compiles as it installs them;
    durable_jobs runs from this checkout. Without its bytecode (a fresh checkout, or
    ``PYTHONDONTWRITEBYTECODE`` set, as some CI images do), every worker process would
    compile about a hundred modules as it starts (some 0.06-0.1 s here), a cost no
    installed deployment pays, and a drain timed from the workers' start would count it.
    ``compileall`` writes the files whatever ``PYTHONDONTWRITEBYTECODE`` says."""
    for package in ("durable_jobs", "benchmarks"):
        compileall.compile_dir(REPO / package, quiet=1, rx=re.compile(r"[/\\]\.venvs[/\\]"))


def setup_django() -> float:
    """Configure Django in a phase and migrate its database; return the seconds migrating
    took (building the indexes of a reused database can take a while)."""
    import django
    from django.core.management import call_command

    django.setup()
    started = time.perf_counter()
    call_command("migrate", verbosity=0, interactive=False)
    return time.perf_counter() - started


def print_phase_result(result: dict[str, Any]) -> None:
    """In a phase: hand the result to the parent (see :func:`run_phase_process`)."""
    print(RESULT_PREFIX + json.dumps(result), flush=True)


def serve_phase(make_phase: Callable[[], Any]) -> int:
    """In a phase process: make the phase (an object with ``run()`` and ``close()``), run
    it and print its result for the parent. SIGTERM from the parent, from the start,
    unwinds through ``close()``."""
    signal.signal(signal.SIGTERM, raise_system_exit)
    phase = make_phase()
    try:
        result = phase.run()
    finally:
        phase.close()
    print_phase_result(result)
    return 0


def run_phase_process(
    command: Sequence[str], *, vendor: str, env: dict[str, str], timeout: float
) -> dict[str, Any]:
    """Run a phase and return the result it printed; stop the run if it fails, prints no
    result or takes longer than ``timeout`` seconds. The phase and every process it
    started are ended in any case, on the way out."""
    process = subprocess.Popen(
        command,
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        start_new_session=True,  # its own process group, so its processes die with it
    )
    try:
        try:
            stdout, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise SystemExit(f"the {vendor} phase took longer than {timeout:g}s") from None
        if process.returncode != 0:
            raise SystemExit(f"the {vendor} phase failed (exit {process.returncode})")
        for line in stdout.decode().splitlines():
            if line.startswith(RESULT_PREFIX):
                return json.loads(line[len(RESULT_PREFIX) :])
        raise SystemExit(f"the {vendor} phase printed no result")
    finally:
        kill_group(process)


def run_in_fresh_database(
    script: str,
    vendor: str,
    options: argparse.Namespace,
    args: Sequence[str],
    *,
    settings_module: str,
    timeout: float,
    **env: str,
) -> dict[str, Any]:
    """Run ``script --phase VENDOR ARGS`` on a database of its own, and return its result:
    a SQLite file in a temporary directory, or the ``--pg-dbname`` database, created
    (replacing one left by an earlier run) and dropped again. ``env``: extra variables."""
    command = [sys.executable, str(Path(script).resolve()), "--phase", vendor, *args]
    with tempfile.TemporaryDirectory() as tmp:
        options.sqlite_path = Path(tmp) / f"{Path(script).stem}.sqlite3"
        if vendor == "postgres":
            create_postgres_database(options, replace=True)
        try:
            phase_env = child_env(settings_module, vendor, options, **env)
            return run_phase_process(command, vendor=vendor, env=phase_env, timeout=timeout)
        finally:
            if vendor == "postgres":
                drop_postgres_database(options)


def kill_group(process: subprocess.Popen[bytes]) -> None:
    """End a phase and every process it started (they share its process group): SIGTERM
    first, so that the phase can stop its own processes, then SIGKILL."""
    for sig, wait in ((signal.SIGTERM, GRACEFUL_STOP_SECONDS), (signal.SIGKILL, 10)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            process.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        # The phase has exited; the processes it started may not have yet.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        return


# ================================================================================================
# The report: the machine, Markdown
# ================================================================================================


def cpu_fact() -> tuple[str, str]:
    """The cores this process may use (not the machine's), and the CPU model."""
    cpu = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return ("CPU", f"{cores} cores available (nproc){', ' + cpu if cpu else ''}")


def memory_fact() -> tuple[str, str]:
    memory = ""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = f"{int(line.split()[1]) / 1024**2:.0f} GB"
    return ("RAM", memory or "unknown")


def load_average() -> str:
    """The 1, 5 and 15 minute load averages: how busy the (often shared) machine was."""
    return ", ".join(f"{value:.1f}" for value in os.getloadavg())


def software_facts(*, mysql: bool = False) -> list[tuple[str, str]]:
    """The OS, Python, Django and, if installed, psycopg (and with ``mysql``, mysqlclient)."""
    from importlib import metadata

    import django

    facts = [
        ("OS", platform.platform()),
        ("Python", platform.python_version()),
        ("Django", django.get_version()),
    ]
    with contextlib.suppress(ImportError):
        import psycopg

        facts.append(("psycopg", psycopg.__version__))
    if mysql:
        with contextlib.suppress(metadata.PackageNotFoundError):
            facts.append(("mysqlclient", metadata.version("mysqlclient")))
    return facts


def report_heading(script: str, argv: list[str], machine: list[tuple[str, str]]) -> list[str]:
    """The lines that open a report: when, the command that made it, the machine table."""
    lines = [f"Run on {utc_now_text()} with:", "", "```console"]
    lines += [f"$ python benchmarks/{script} " + " ".join(argv), "```", ""]
    lines += ["| Machine | |", "| --- | --- |"]
    lines += [f"| {key} | {value} |" for key, value in machine]
    return lines


@dataclass(frozen=True)
class Markers:
    """The HTML comments around a generated block of a Markdown page, which ``--write``
    replaces and leaves the rest of the page alone."""

    name: str

    @property
    def start(self) -> str:
        return f"<!-- {self.name}:start -->"

    @property
    def end(self) -> str:
        return f"<!-- {self.name}:end -->"

    def wrap(self, block: str) -> str:
        return f"{self.start}\n{block}{self.end}"

    def replace_in(self, text: str, block: str) -> str | None:
        """``text`` with its block replaced by ``block``; None if it lacks the markers."""
        if self.start not in text or self.end not in text:
            return None
        before, rest = text.split(self.start, 1)
        _, after = rest.split(self.end, 1)
        return before + self.wrap(block) + after
