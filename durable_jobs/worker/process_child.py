"""A child of the process executor: Django set up once, then one job at a time, as sent.

The worker (its parent) keeps everything that makes a job durable: the claim, the
lease and its renewals, the timeout, the outcome write. The child only runs handlers
and reports how each attempt ended (:mod:`.wire`). The context's ``progress()`` and
``heartbeat()`` are sent up to the worker, which writes them under the job's lease.

The child is in a process group of its own, so that a terminal's Ctrl-C reaches the
worker alone (which then hands the job back or lets it finish), and it exits as soon
as its worker is gone: its job's lease will be rescued, and running it on unwatched
could only run it twice at once.
"""

from __future__ import annotations

import os
import resource
import signal
import sys
import threading
from multiprocessing import parent_process
from multiprocessing.connection import Connection, wait
from typing import Any

#: Exit status of a child whose worker died (nothing is left to report to).
ORPHANED_EXIT = 70


def main(conn: Connection, setup: dict[str, Any]) -> None:
    """The child's whole life: set up, say ready, run jobs until told to stop."""
    if hasattr(os, "setpgrp"):
        os.setpgrp()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _exit_with_parent()
    # The worker's own command line would tell an app's ready() that this is, say, a
    # development server (and start an inline worker in it): the child is neither.
    sys.argv = sys.argv[:1]
    os.environ["DJANGO_SETTINGS_MODULE"] = setup["settings"]
    import django

    django.setup()
    from django.db import connections

    from durable_jobs.db.upkeep import refresh_thread_connections
    from durable_jobs.worker import wire
    from durable_jobs.worker.execute import execute

    # The worker's database names win over the settings' (a test database, for one).
    for alias, name in setup["databases"].items():
        connections[alias].settings_dict["NAME"] = name
    writes = WorkerWrites(conn)
    conn.send_bytes(wire.encode({"type": "ready", "pid": os.getpid()}))
    while True:
        try:
            message = wire.decode(conn.recv_bytes())
        except EOFError:
            break
        if message["type"] != "job":
            break  # "stop"
        job = wire.job_from_fields(message["job"], setup["alias"])
        result = execute(
            job,
            node=setup["node"],
            lease_seconds=setup["lease_seconds"],
            writes=writes,
            announce=False,
        )
        refresh_thread_connections()
        reply = wire.result_fields(result, type="result", rss=resident_bytes())
        with writes.lock:
            conn.send_bytes(wire.encode(reply))
    connections.close_all()


class WorkerWrites:
    """The context's writes, sent to the worker (which owns the lease) and, for a
    heartbeat, answered by it."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        # A handler may report progress from threads of its own.
        self.lock = threading.Lock()

    def progress(self, percent: float) -> None:
        from durable_jobs.worker.wire import encode

        with self.lock:
            self.conn.send_bytes(encode({"type": "progress", "percent": percent}))

    def heartbeat(self) -> bool:
        from durable_jobs.worker.wire import decode, encode

        with self.lock:
            self.conn.send_bytes(encode({"type": "heartbeat"}))
            return bool(decode(self.conn.recv_bytes()).get("held"))


def resident_bytes() -> int:
    """This process's resident set size now (Linux), else its peak (other systems)."""
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024


def _exit_with_parent() -> None:
    parent = parent_process()
    if parent is None or parent.sentinel is None:
        return
    sentinel = parent.sentinel

    def watch() -> None:
        wait([sentinel])
        os._exit(ORPHANED_EXIT)

    threading.Thread(target=watch, name="durable-jobs-parent-watch", daemon=True).start()
