"""SQLite under contention: four processes enqueue and drain one database file at once.

Each process runs an in-process worker (two pool threads, a 50 ms poll) and, at the
same moment as the others, enqueues through every path there is: single ``delay()``
calls, ``enqueue_many`` chunks, a ``Batch`` with a callback, and idempotency keys
that all four processes enqueue at the same time. The handler writes a row too. So
every enqueue, claim, acknowledgement, handler write and batch check of four
processes competes for SQLite's single write lock.

What must hold: no ``database is locked`` (nor any other error) reaches the code that
enqueues, no process fails, and no job is lost or doubled: every id handed out ends
``completed`` after exactly one attempt and one handler run, each shared key names
one job, and every batch finishes with its callback. Lock errors that the worker
caught and retried itself are counted and reported separately (they would show in
the logs, not to the caller).

The child processes run this module's :func:`child` (``python -c``, after
``django.setup()``), once with the test settings' ``transaction_mode = "IMMEDIATE"``
(what check W001 recommends) and once with Django's default (DEFERRED), in which
``durable_jobs`` must still take the write lock up front where it reads then writes.

SQLite only.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.db.models import Count

from tests.conftest import ROOT
from tests.faults.conftest import record_figures

pytestmark = [
    pytest.mark.faults,
    pytest.mark.subprocess,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(120),
]

PROCESSES = 4
#: Per process: single enqueues, enqueue_many chunks x size, one batch of BATCH_SIZE
#: (plus its callback job), and the shared keys every process enqueues.
SINGLES = 100
MANY_CHUNKS, MANY_SIZE = 5, 10
BATCH_SIZE = 20
SHARED_KEYS = 40
PER_PROCESS = SINGLES + MANY_CHUNKS * MANY_SIZE + BATCH_SIZE + 1
TOTAL = PROCESSES * PER_PROCESS + SHARED_KEYS
#: Bound on a child's whole run (start, enqueue, drain, stop).
CHILD_TIMEOUT = 90.0

#: Sets the transaction mode before Django reads the settings, then runs child().
BOOTSTRAP = """
import sys
import tests.settings as settings
mode = sys.argv[1]
options = settings.DATABASES["default"].setdefault("OPTIONS", {})
if mode == "DEFERRED":
    options.pop("transaction_mode", None)
else:
    options["transaction_mode"] = mode
import django
django.setup()
from tests.faults.test_sqlite_contention import child
sys.exit(child(sys.argv[2:]))
"""


# -- the child process ------------------------------------------------------------------------


def child(argv: list[str]) -> int:
    """Start a worker, wait for the go, enqueue this process's share, drain, report JSON."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--dir", type=Path, required=True)
    args = parser.parse_args(argv)

    from django.db import connections

    from durable_jobs import Batch, enqueue_many
    from durable_jobs.models import Job
    from durable_jobs.states import State
    from durable_jobs.worker import Worker
    from tests.testapp.partition_jobs import contention_record as record

    index, directory = args.index, args.dir
    errors: list[str] = []
    waits: list[float] = []

    def attempt(what: str, action: Any) -> Any:
        """Run one caller-side operation; any exception is an error the user would see."""
        started = time.monotonic()
        try:
            return action()
        except Exception as exc:
            errors.append(f"{what}: {type(exc).__name__}: {exc}")
            return None
        finally:
            waits.append(time.monotonic() - started)

    worker = Worker({"default": 2}, poll_interval=0.05, scheduler=False)
    thread = worker.start()
    (directory / f"ready-{index}").touch()
    deadline = time.monotonic() + 30
    while not (directory / "go").exists():
        if time.monotonic() > deadline:
            print("no go signal", file=sys.stderr)
            return 2
        time.sleep(0.005)

    singles: list[int] = []
    many: list[int] = []
    shared: dict[str, int] = {}
    batch_id = None
    # The same order in every process, so the shared keys are enqueued at about the same
    # moment by all four; the other paths interleave with them.
    for step in range(SINGLES):
        job = attempt("delay", lambda step=step: record.delay(process=index, n=step))
        if job is not None:
            singles.append(job.pk)
        if step < 2 * SHARED_KEYS and step % 2 == 0:
            key = f"shared:{step // 2}"
            job = attempt(
                "shared delay",
                lambda key=key: record.using(idempotency_key=key).delay(process=-1, n=0),
            )
            if job is not None:
                shared[key] = job.pk
        if step % (SINGLES // MANY_CHUNKS) == 0:
            chunk = [record.prepare(process=index, n=1000 + step + i) for i in range(MANY_SIZE)]
            jobs = attempt("enqueue_many", lambda chunk=chunk: enqueue_many(chunk))
            if jobs is not None:
                many += [j.pk for j in jobs]
        if step == SINGLES // 2:
            items = [record.prepare(process=index, n=2000 + i) for i in range(BATCH_SIZE)]
            batch = attempt(
                "batch",
                lambda items=items: Batch(
                    f"contention-{index}", on_complete=record.prepare(process=index, n=-1)
                ).enqueue(items),
            )
            batch_id = batch.pk if batch is not None else None
    enqueue_seconds = sum(waits)

    # Drain together: every process's worker keeps going until all jobs are done.
    deadline = time.monotonic() + CHILD_TIMEOUT - 30
    while time.monotonic() < deadline:
        done = attempt("count", lambda: Job.objects.filter(state=State.COMPLETED).count())
        if done == TOTAL:
            break
        time.sleep(0.1)
    else:
        errors.append(f"not all {TOTAL} jobs completed in time")
    worker.stop()
    thread.join(30)
    connections["default"].ensure_connection()  # the mode is read from the settings on connect
    mode = getattr(connections["default"], "transaction_mode", None)
    connections.close_all()
    report = {
        "index": index,
        "pid": os.getpid(),
        "transaction_mode": mode or "DEFERRED",
        "singles": singles,
        "many": many,
        "batch": batch_id,
        "shared": shared,
        "errors": errors,
        "worker_failure": repr(worker.failure) if worker.failure else None,
        "worker_alive": thread.is_alive(),
        "claimed": worker.stats.claimed,
        "outcomes": dict(worker.stats.outcomes),
        "enqueue_seconds": round(enqueue_seconds, 3),
        "longest_wait": round(max(waits), 3),
    }
    print(json.dumps(report))
    return 1 if errors or worker.failure or thread.is_alive() else 0


# -- the test ---------------------------------------------------------------------------------


def classify(stderr: str) -> tuple[list[str], list[str], list[str]]:
    """Sort a child's stderr: (lock errors the worker caught and retried, the worker's other
    warnings and errors, any other output). The worker logs one JSON object per line
    (tests/settings.py, WARNING and above here); any other line is unexpected."""
    handled, warnings, other = [], [], []
    for line in stderr.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if not isinstance(record, dict) or not record.get("logger", "").startswith("durable_jobs"):
            other.append(line)
        elif "database is locked" in line or "database table is locked" in line:
            handled.append(record.get("message", line))
        else:
            warnings.append(record.get("message", line))
    return handled, warnings, other


@pytest.mark.parametrize("mode", ["IMMEDIATE", "DEFERRED"])
def test_four_processes_enqueue_and_drain_one_sqlite_file(
    vendor: str, mode: str, tmp_path: Path
) -> None:
    if vendor != "sqlite":
        pytest.skip("SQLite-specific: its single write lock is what is contended")
    from durable_jobs.models import Attempt, Batch, Job, Outcome
    from durable_jobs.states import State
    from tests.testapp.models import SideEffect

    env = dict(os.environ)
    env["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    env["DURABLE_JOBS_TEST_DB_NAME"] = str(connection.settings_dict["NAME"])
    env["PYTHONPATH"] = str(ROOT)
    # Warnings and errors only: a handled lock error is a WARNING ("database error in
    # worker ... retrying").
    env["DURABLE_JOBS_LOG_LEVEL"] = "WARNING"
    procs: list[subprocess.Popen[str]] = []
    outputs: list[tuple[int | None, str, str]] = []
    started = time.monotonic()
    try:
        for index in range(PROCESSES):
            command = [sys.executable, "-c", BOOTSTRAP, mode, "--index", str(index)]
            procs.append(
                subprocess.Popen(
                    [*command, "--dir", str(tmp_path)],
                    cwd=ROOT,
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        deadline = time.monotonic() + 30
        while len(list(tmp_path.glob("ready-*"))) < PROCESSES:
            dead = [p for p in procs if p.poll() is not None]
            assert not dead, [p.communicate() for p in dead]
            assert time.monotonic() < deadline, "the processes did not get ready"
            time.sleep(0.02)
        (tmp_path / "go").touch()
        for proc in procs:
            remaining = max(1.0, CHILD_TIMEOUT - (time.monotonic() - started))
            try:
                out, err = proc.communicate(timeout=remaining)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
            outputs.append((proc.returncode, out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    elapsed = time.monotonic() - started

    reports = []
    handled: list[str] = []
    warnings: list[str] = []
    surfaced: list[str] = []
    for code, out, err in outputs:
        assert code == 0, f"exit {code}\nstdout: {out[-3000:]}\nstderr: {err[-3000:]}"
        report = json.loads(out.strip().splitlines()[-1])
        reports.append(report)
        worker_locks, worker_warnings, other = classify(err)
        handled += worker_locks
        warnings += worker_warnings
        surfaced += report["errors"] + other
    assert {r["transaction_mode"] for r in reports} == {mode}
    # Nothing reached the callers: no exception from any enqueue or read, no traceback.
    assert surfaced == []
    # Nor did the worker have to retry one: its write transactions take the lock when they
    # begin (BEGIN IMMEDIATE, whatever the project's mode) and wait for it (busy timeout).
    assert handled == [], handled
    # Nor did anything else go wrong in the workers (a batch check, an outcome write...).
    assert warnings == [], warnings

    # Nothing lost, nothing doubled.
    own = [pk for r in reports for pk in r["singles"] + r["many"]]
    assert len(own) == len(set(own)) == PROCESSES * (SINGLES + MANY_CHUNKS * MANY_SIZE)
    shared_ids = {key: {r["shared"][key] for r in reports} for key in reports[0]["shared"]}
    assert len(shared_ids) == SHARED_KEYS
    # Four processes enqueued each key at about the same moment: each got the same job.
    assert all(len(ids) == 1 for ids in shared_ids.values()), shared_ids
    batches = Batch.objects.filter(pk__in=[r["batch"] for r in reports])
    assert batches.count() == PROCESSES
    batch_jobs = set(Job.objects.filter(batch__in=batches).values_list("pk", flat=True))
    callbacks = set(batches.values_list("callback_job_id", flat=True))
    assert len(batch_jobs) == PROCESSES * BATCH_SIZE
    assert len(callbacks) == PROCESSES
    assert None not in callbacks
    expected = set(own) | {ids.pop() for ids in shared_ids.values()} | batch_jobs | callbacks
    assert len(expected) == TOTAL
    assert set(Job.objects.values_list("pk", flat=True)) == expected
    assert Counter(Job.objects.values_list("state", flat=True)) == {State.COMPLETED: TOTAL}
    assert set(Job.objects.values_list("attempts", flat=True)) == {1}
    assert Attempt.objects.count() == TOTAL
    assert set(Attempt.objects.values_list("outcome", flat=True)) == {Outcome.COMPLETED}
    runs = SideEffect.objects.values("job_id").annotate(n=Count("id"))
    assert {row["job_id"]: row["n"] for row in runs} == dict.fromkeys(expected, 1)
    for batch in batches:
        assert batch.finished_at is not None
        assert batch.counts == {State.COMPLETED: BATCH_SIZE}
    # Each job was claimed once, across the four workers, and they shared the work.
    claimed = [r["claimed"] for r in reports]
    assert sum(claimed) == TOTAL
    assert sum(1 for n in claimed if n) >= 2, claimed

    record_figures(
        f"sqlite contention ({mode})",
        processes=PROCESSES,
        jobs=TOTAL,
        claimed_per_process=claimed,
        lock_errors_handled=len(handled),
        lock_errors_surfaced=len(surfaced),
        longest_enqueue_seconds=round(max(r["longest_wait"] for r in reports), 3),
        wall_seconds=round(elapsed, 1),
    )
