"""Shared fixtures: real worker threads, real ``runworker`` subprocesses, a clean registry."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection

from durable_jobs.logging import JSONFormatter

ROOT = Path(__file__).resolve().parent.parent

#: A project's ``manage.py``, as ``startproject`` writes it, on the test settings: for
#: tests that run ``python manage.py ...`` as an operator or a probe does.
MANAGE_PY = """\
import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
"""


def wait_for(predicate: Callable[[], Any], timeout: float = 30.0, interval: float = 0.05) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail the test on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s: {predicate}")
        time.sleep(interval)


def command_output(name: str, *args: str) -> str:
    """Run ``manage.py name args`` in-process and return what it wrote to stdout."""
    out = StringIO()
    call_command(name, *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def vendor() -> str:
    return connection.vendor


class WorkerProcesses:
    """Starts ``manage.py runworker`` subprocesses on the test database; kills leftovers by pid."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.procs: list[subprocess.Popen[bytes]] = []

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["DJANGO_SETTINGS_MODULE"] = "tests.settings"
        env["DURABLE_JOBS_TEST_DB_NAME"] = str(connection.settings_dict["NAME"])
        env["PYTHONPATH"] = str(ROOT)
        env.setdefault("DURABLE_JOBS_LOG_LEVEL", "INFO")
        return env

    def start(self, *args: str) -> subprocess.Popen[bytes]:
        log = open(self.tmp_path / f"worker-{len(self.procs)}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            [sys.executable, "-m", "django", "runworker", *args],
            cwd=ROOT,
            env=self.env(),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.procs.append(proc)
        return proc

    def log(self, proc: subprocess.Popen[bytes]) -> str:
        index = self.procs.index(proc)
        return (self.tmp_path / f"worker-{index}.log").read_text(errors="replace")

    def cleanup(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                # A supervisor's (runworker --processes) children first: once it is gone
                # they would stop gracefully, still using the test database meanwhile.
                kill_children(proc.pid)
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=10)


def child_pids(pid: int) -> list[int]:
    """The pids of ``pid``'s live child processes (Linux: read from /proc; else none)."""
    found = []
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            stat = entry.read_text()
        except OSError:  # it exited meanwhile
            continue
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        state, ppid = stat[stat.rindex(")") + 2 :].split()[:2]
        if int(ppid) == pid and state not in ("Z", "X"):
            found.append(int(entry.parent.name))
    return found


def pid_running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie, exited but not reaped, is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in ("Z", "X")


def kill_children(pid: int) -> None:
    for child in child_pids(pid):
        with contextlib.suppress(ProcessLookupError):  # it exited meanwhile
            os.kill(child, signal.SIGKILL)


def logs_of(workers: WorkerProcesses, procs: Iterable[subprocess.Popen[bytes]]) -> str:
    return "\n".join(
        f"--- worker pid {p.pid} (exit {p.poll()}) ---\n{workers.log(p)[-4000:]}" for p in procs
    )


def wait_until(
    predicate: Callable[[], Any],
    workers: WorkerProcesses,
    *,
    timeout: float,
    alive: Iterable[subprocess.Popen[bytes]] = (),
    what: str = "",
    interval: float = 0.05,
) -> Any:
    """Poll ``predicate``; fail with the logs on timeout, or if a worker in ``alive`` exits."""
    alive = list(alive)
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        dead = [p for p in alive if p.poll() is not None]
        if dead:
            raise AssertionError(
                f"worker exited while waiting for {what or predicate}\n{logs_of(workers, dead)}"
            )
        if time.monotonic() > deadline:
            raise AssertionError(
                f"not within {timeout}s: {what or predicate}\n{logs_of(workers, workers.procs)}"
            )
        time.sleep(interval)


@pytest.fixture
def json_lines() -> Iterator[Callable[[], list[dict[str, Any]]]]:
    """The records logged on ``durable_jobs`` while the test runs, as parsed JSON lines."""
    stream = StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JSONFormatter())
    root = logging.getLogger("durable_jobs")
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)


@pytest.fixture
def async_connections_closed() -> Iterator[None]:
    """Close the database connections of asgiref's thread for ``sync_to_async`` calls made
    outside a request (``asyncio.run(...)`` in a test): that thread outlives the test, and
    a connection left open there keeps the test database from being dropped."""
    yield
    import asyncio

    from asgiref.sync import sync_to_async
    from django.db import connections

    asyncio.run(sync_to_async(connections.close_all, thread_sensitive=True)())


@pytest.fixture
def worker_processes(tmp_path: Path) -> Iterator[WorkerProcesses]:
    procs = WorkerProcesses(tmp_path)
    try:
        yield procs
    finally:
        procs.cleanup()
