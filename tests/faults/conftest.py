"""Shared helpers of the fault tests: workers to kill, a chaos loop, execution accounting.

What the fault tests prove is a count: every job ends in a final state, and every run
of a handler is accounted for by the attempt recorded for it ("at-least-once, never
silently twice"). The pieces:

``fault_workers`` (fixture) / :class:`FaultWorkers`
    :class:`tests.conftest.WorkerProcesses` (real ``runworker`` subprocesses on the test
    database, each logging to its own file) plus ``kill`` (SIGKILL by pid),
    ``terminate`` (SIGTERM, then the exit code), ``node_name`` and ``wait_registered``.
    Every process it started is SIGKILLed by pid when the test ends, pass or fail
    (pytest-timeout's default ``signal`` method also runs this teardown).

:class:`Chaos`
    Keeps a pool of workers and, every ``interval`` seconds (random, from a seeded
    generator), SIGKILLs a random registered worker and starts a replacement at once,
    until a condition holds. ``chaos.kills`` counts the faults injected.

:func:`account_executions` / :class:`ExecutionAccount`
    Reads the jobs, their attempts and the handlers' side-effect rows
    (``SideEffect(job_id, attempt, label=<node>)``, written by the handlers of
    ``tests/testapp/crash_jobs.py``) and checks that they correspond one to one;
    ``account.problems`` lists every violation.

:class:`FaultSummary`
    The figures a fault test prints (and appends, as one JSON line, to the file named
    by ``DURABLE_JOBS_FAULT_SUMMARY`` when it is set, for the docs).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import os
import random
import signal
import subprocess
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.utils import timezone

from durable_jobs.models import Attempt, Job, Node, Outcome
from durable_jobs.states import FINAL, UNFINISHED, State
from tests.conftest import WorkerProcesses, kill_children, logs_of, wait_until
from tests.testapp.models import SideEffect

#: Generous bound for a worker process to start (Django setup) on a loaded 2-core machine.
START_TIMEOUT = 60.0
#: Workers for chaos runs: a 2 s lease (renewed every 2/3 s by a live worker) and a rescue
#: every second, so a killed worker's jobs are back within about 3 s.
CHAOS_WORKER_ARGS = (
    "--queues",
    "default:4",
    "--lease-seconds",
    "2",
    "--poll-interval",
    "0.2",
    "--no-scheduler",
)
#: Outcomes of an attempt whose run was overtaken: the job ran (or will run) again.
OVERTAKEN = frozenset({Outcome.LOST, Outcome.INTERRUPTED})


def fault_seed(default: int) -> int:
    """The chaos seed: ``default``, or ``DURABLE_JOBS_FAULT_SEED`` to replay another run."""
    return int(os.environ.get("DURABLE_JOBS_FAULT_SEED", default))


def is_postgresql() -> bool:
    return connection.vendor == "postgresql"


# -- worker processes -----------------------------------------------------------------------


class FaultWorkers(WorkerProcesses):
    """``runworker`` subprocesses that a test may kill; all are SIGKILLed by pid at the end."""

    def __init__(self, tmp_path: Path) -> None:
        super().__init__(tmp_path)
        #: pid -> when the process was started. A killed worker's Node row stays behind,
        #: and pids are reused (pid_max may be 32768), so a Node row is only taken to be
        #: a process's own if it was registered after that process started.
        self.spawned_at: dict[int, datetime.datetime] = {}

    def start(self, *args: str) -> subprocess.Popen[bytes]:
        spawned_at = timezone.now()
        proc = super().start(*args)
        self.spawned_at[proc.pid] = spawned_at
        return proc

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        """``kill -9``: no handler runs, nothing is handed back or acknowledged."""
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

    def terminate(self, proc: subprocess.Popen[bytes], timeout: float) -> int:
        """SIGTERM (a graceful stop), then the exit code; fail with the log if it hangs."""
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"worker pid {proc.pid} did not exit within {timeout}s of SIGTERM\n"
                f"{logs_of(self, [proc])}"
            ) from None

    def alive(self) -> list[subprocess.Popen[bytes]]:
        return [p for p in self.procs if p.poll() is None]

    def registered(self, procs: Iterable[subprocess.Popen[bytes]]) -> dict[int, str]:
        """pid -> node name, for those of ``procs`` that have registered their Node row."""
        wanted = {p.pid: self.spawned_at[p.pid] for p in procs}
        rows = Node.objects.filter(pid__in=list(wanted)).values_list("pid", "name", "started_at")
        return {pid: name for pid, name, started in rows if started >= wanted[pid]}

    def node_name(self, proc: subprocess.Popen[bytes]) -> str | None:
        """The name of the Node row the process registered, if it has (yet)."""
        return self.registered([proc]).get(proc.pid)

    def wait_registered(
        self, procs: Sequence[subprocess.Popen[bytes]], timeout: float = START_TIMEOUT
    ) -> list[str]:
        """Wait until each process has its Node row; return their names, in order."""

        def all_registered() -> dict[int, str] | None:
            found = self.registered(procs)
            return found if len(found) == len(procs) else None

        names = wait_until(
            all_registered,
            self,
            timeout=timeout,
            alive=procs,
            what=f"{len(procs)} workers registered",
            interval=0.1,
        )
        return [names[p.pid] for p in procs]

    def combined_log(self) -> str:
        return "\n".join(self.log(p) for p in self.procs)

    def cleanup(self) -> None:
        # By pid, each process this test started; never by name.
        for proc in self.procs:
            if proc.poll() is None:
                kill_children(proc.pid)  # a supervisor's workers
                with contextlib.suppress(ProcessLookupError):  # it exited meanwhile
                    os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


@pytest.fixture
def fault_workers(tmp_path: Path) -> Iterator[FaultWorkers]:
    """Real ``runworker`` processes (see :class:`FaultWorkers`), killed by pid at teardown."""
    workers = FaultWorkers(tmp_path)
    try:
        yield workers
    finally:
        workers.cleanup()


# -- the chaos loop ---------------------------------------------------------------------------


@dataclasses.dataclass
class Fault:
    at: float  # seconds since the chaos started
    pid: int
    node: str


class Chaos:
    """SIGKILLs a random worker every ``interval`` seconds and starts a replacement.

    >>> chaos = Chaos(fault_workers, ["--queues", "default:4"], size=4, seed=7)
    >>> chaos.start()
    >>> chaos.run_until(lambda: nothing_left(), timeout=120, what="all jobs final")
    >>> chaos.kills, chaos.started

    Only workers that have registered their Node row are chosen: killing a process
    still importing Django tests nothing. The victim and the delays come from
    ``random.Random(seed)``, so a run's choices can be replayed (the machine's timing
    still varies). A worker that exits on its own fails the test with its log: only
    the chaos loop may stop workers.
    """

    def __init__(
        self,
        workers: FaultWorkers,
        args: Sequence[str],
        *,
        size: int,
        seed: int,
        interval: tuple[float, float] = (1.0, 3.0),
    ) -> None:
        self.workers = workers
        self.args = list(args)
        self.size = size
        self.seed = seed
        self.rng = random.Random(seed)
        self.interval = interval
        self.pool: list[subprocess.Popen[bytes]] = []
        self.faults: list[Fault] = []
        self.started = 0

    @property
    def kills(self) -> int:
        return len(self.faults)

    def start(self) -> list[str]:
        """Start the pool; return the node names once every worker registered."""
        procs = [self._start_one() for _ in range(self.size)]
        return self.workers.wait_registered(procs)

    def _start_one(self) -> subprocess.Popen[bytes]:
        proc = self.workers.start(*self.args)
        self.pool.append(proc)
        self.started += 1
        return proc

    def run_until(
        self,
        predicate: Callable[[], Any],
        *,
        timeout: float,
        what: str,
        max_kills: int | None = None,
        poll: float = 0.2,
    ) -> float:
        """Inject faults until ``predicate()`` is true; return the seconds it took."""
        t0 = time.monotonic()
        deadline = t0 + timeout
        next_kill = t0 + self.rng.uniform(*self.interval)
        while not predicate():
            self._check_pool()
            now = time.monotonic()
            if now >= deadline:
                raise AssertionError(
                    f"not within {timeout}s under chaos ({self.kills} kills): {what}\n"
                    f"{logs_of(self.workers, self.pool)}"
                )
            due = now >= next_kill and (max_kills is None or self.kills < max_kills)
            # No registered worker to kill: try again at the next poll.
            if due and self.kill_one(at=now - t0):
                next_kill = time.monotonic() + self.rng.uniform(*self.interval)
            time.sleep(poll)
        return time.monotonic() - t0

    def kill_one(self, at: float = 0.0) -> bool:
        """SIGKILL one registered worker, chosen at random, and start its replacement."""
        names = self.workers.registered(self.pool)
        candidates = [p for p in self.pool if p.pid in names]
        if not candidates:
            return False
        victim = self.rng.choice(candidates)
        self.workers.kill(victim)
        self.pool.remove(victim)
        self.faults.append(Fault(at=round(at, 2), pid=victim.pid, node=names[victim.pid]))
        self._start_one()
        return True

    def _check_pool(self) -> None:
        exited = [p for p in self.pool if p.poll() is not None]
        if exited:
            raise AssertionError(
                f"a worker exited on its own under chaos\n{logs_of(self.workers, exited)}"
            )

    def stop(self, timeout: float = 60.0) -> list[int]:
        """Gracefully stop the surviving workers (SIGTERM); return their exit codes.

        Waits for the latest replacements to register first: ``runworker`` installs its
        SIGTERM handler once Django is set up, so a process still starting dies of the
        signal (exit -15). It holds nothing then, but that is not the graceful stop
        under test.
        """
        self.workers.wait_registered(self.pool)
        for proc in self.pool:
            proc.send_signal(signal.SIGTERM)
        codes = []
        for proc in self.pool:
            try:
                codes.append(proc.wait(timeout=timeout))
            except subprocess.TimeoutExpired:
                codes.append(-1)
        return codes


# -- accounting -------------------------------------------------------------------------------


@dataclasses.dataclass
class ExecutionAccount:
    """What happened to a set of jobs, counted from the database.

    ``executions``: side-effect rows, one per run of a handler that got that far.
    ``duplicates``: runs matched to an attempt whose outcome was not theirs (``lost``:
    the lease expired after a kill; ``interrupted``: handed back by a stopping worker; or
    an outcome in ``explains``), so the job ran again. ``explained``: those matched to
    such an attempt; every duplicate must be. ``problems``: every violation found.
    """

    jobs: int
    states: Counter[str]
    missing: list[int]
    unfinished: list[int]
    executions: int
    duplicates: int
    duplicate_jobs: int
    explained: int
    outcomes: Counter[str]
    problems: list[str]

    @property
    def lost(self) -> int:
        """Jobs that vanished or never reached a final state."""
        return len(self.missing) + len(self.unfinished)

    def report(self, limit: int = 40) -> str:
        shown = "\n".join(self.problems[:limit])
        more = len(self.problems) - limit
        return shown + (f"\n... and {more} more" if more > 0 else "")


def _in_chunks(ids: Sequence[int], size: int = 500) -> Iterator[list[int]]:
    for start in range(0, len(ids), size):
        yield list(ids[start : start + size])


def account_executions(
    ids: Collection[int],
    *,
    effect_outcomes: Collection[str] = (Outcome.COMPLETED,),
    explains: Collection[str] = OVERTAKEN,
) -> ExecutionAccount:
    """Match every job's side-effect rows to its attempts; list what does not add up.

    The rules (one execution = ``(job_id, attempt number, node)``):

    * every id has a job row, in a final state;
    * the attempt numbers recorded for a job are ``1..attempts``, each once, apart from
      ``interrupted`` ones (a hand-back gives the number back, so the next claim reuses
      it): each outcome is recorded at most once;
    * a ``completed`` job's last attempt is its one ``completed`` attempt; a ``dead``
      job's ``last_error`` is its last attempt's error, and is not empty;
    * every side-effect row matches exactly one attempt with the same job, number and
      node, and no execution wrote twice;
    * each attempt with an outcome in ``effect_outcomes`` (the handler got to its side
      effect before it returned or raised) has exactly one side-effect row;
    * a row matched to any other attempt is a duplicate run, explained only when that
      attempt's outcome is in ``explains`` (by default ``lost`` or ``interrupted``).
    """
    ids = sorted(set(ids))
    effect_outcomes = set(effect_outcomes)
    explains = set(explains)
    problems: list[str] = []
    jobs: dict[int, dict[str, Any]] = {}
    attempts: dict[int, list[tuple[int, int, str, str, str]]] = defaultdict(list)
    effects: Counter[tuple[int, int, str]] = Counter()
    for chunk in _in_chunks(ids):
        for row in Job.objects.filter(pk__in=chunk).values(
            "id", "state", "attempts", "last_error", "name"
        ):
            jobs[row["id"]] = dict(row)
        for pk, job_id, number, node, outcome, error in (
            Attempt.objects.filter(job_id__in=chunk)
            .order_by("id")
            .values_list("id", "job_id", "number", "node", "outcome", "error_message")
        ):
            attempts[job_id].append((pk, number, node, outcome, error))
        effects.update(
            SideEffect.objects.filter(job_id__in=chunk).values_list("job_id", "attempt", "label")
        )

    missing = [pk for pk in ids if pk not in jobs]
    unfinished = [pk for pk in ids if pk in jobs and jobs[pk]["state"] in UNFINISHED]
    problems += [f"job {pk}: missing" for pk in missing]
    problems += [f"job {pk}: left {jobs[pk]['state']}" for pk in unfinished]

    outcomes: Counter[str] = Counter()
    #: (job, number, node) -> the outcomes of the attempts recorded under that key.
    by_key: dict[tuple[int, int, str], list[str]] = defaultdict(list)
    for pk, job in jobs.items():
        history = attempts.get(pk, [])
        outcomes.update(outcome for *_, outcome, _ in history)
        for _, number, node, outcome, _ in history:
            by_key[(pk, number, node)].append(outcome)
        counted = sorted(
            number for _, number, _, outcome, _ in history if outcome != Outcome.INTERRUPTED
        )
        if counted != list(range(1, job["attempts"] + 1)):
            problems.append(
                f"job {pk}: attempt numbers {counted} for attempts={job['attempts']}: "
                f"{[(n, o) for _, n, _, o, _ in history]}"
            )
        if job["state"] == State.COMPLETED:
            completed = [o for *_, o, _ in history if o == Outcome.COMPLETED]
            if len(completed) != 1 or history[-1][3] != Outcome.COMPLETED:
                problems.append(f"job {pk}: completed, attempts {[h[1:4] for h in history]}")
        elif job["state"] == State.DEAD and (
            not job["last_error"] or not history or history[-1][4] != job["last_error"]
        ):
            problems.append(
                f"job {pk}: dead with reason {job['last_error']!r}, last attempt "
                f"{history[-1][1:] if history else None}"
            )

    duplicates = explained = 0
    duplicate_jobs: set[int] = set()
    for (job_id, number, node), rows in sorted(effects.items()):
        if rows > 1:
            problems.append(f"job {job_id}: attempt {number} on {node} wrote {rows} side effects")
        matched = by_key.get((job_id, number, node), [])
        if len(matched) != 1:
            problems.append(
                f"job {job_id}: the run of attempt {number} on {node} matches "
                f"{len(matched)} attempts {matched}: a run no single attempt accounts for"
            )
            continue
        if matched[0] in effect_outcomes:
            continue
        duplicates += rows
        duplicate_jobs.add(job_id)
        if matched[0] in explains:
            explained += rows
        else:
            problems.append(
                f"job {job_id}: attempt {number} on {node} ran (a side effect) but ended "
                f"{matched[0]}, which does not explain a second run"
            )
    for (job_id, number, node), recorded in by_key.items():
        for outcome in recorded:
            if outcome in effect_outcomes and effects[(job_id, number, node)] != 1:
                problems.append(
                    f"job {job_id}: attempt {number} on {node} ended {outcome} with "
                    f"{effects[(job_id, number, node)]} side effects (expected 1)"
                )

    return ExecutionAccount(
        jobs=len(jobs),
        states=Counter(job["state"] for job in jobs.values()),
        missing=missing,
        unfinished=unfinished,
        executions=sum(effects.values()),
        duplicates=duplicates,
        duplicate_jobs=len(duplicate_jobs),
        explained=explained,
        outcomes=outcomes,
        problems=problems,
    )


def unfinished_count(ids: Collection[int]) -> int:
    """How many of ``ids`` are not yet in a final state (missing ones count too).

    One indexed count over the ids' range, cheap enough to poll: ``ids`` must be the only
    jobs in that range (as after one ``enqueue_many``, or one producer's enqueues).
    """
    low, high = min(ids), max(ids)
    final = Job.objects.filter(pk__range=(low, high), state__in=sorted(FINAL)).count()
    return len(ids) - final


def leased_count(ids: Iterable[int] | None = None) -> int:
    qs = Job.objects.filter(state=State.LEASED)
    if ids is not None:
        ids = list(ids)
        qs = qs.filter(pk__range=(min(ids), max(ids)))
    return qs.count()


# -- the summary ------------------------------------------------------------------------------


@dataclasses.dataclass
class FaultSummary:
    """The figures of one fault run, as printed and as kept for the docs."""

    scenario: str
    database: str
    jobs: int
    faults: int
    executions: int
    duplicates: int
    explained: int
    lost: int
    wall_seconds: float
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def of(
        cls,
        scenario: str,
        account: ExecutionAccount,
        *,
        faults: int,
        wall_seconds: float,
        **extra: Any,
    ) -> FaultSummary:
        return cls(
            scenario=scenario,
            database=connection.vendor,
            jobs=account.jobs,
            faults=faults,
            executions=account.executions,
            duplicates=account.duplicates,
            explained=account.explained,
            lost=account.lost,
            wall_seconds=round(wall_seconds, 1),
            extra={"states": dict(account.states), "outcomes": dict(account.outcomes), **extra},
        )

    def line(self) -> str:
        extra = " ".join(f"{k}={v}" for k, v in self.extra.items())
        return (
            f"[{self.scenario} on {self.database}] jobs={self.jobs} faults={self.faults} "
            f"executions={self.executions} duplicates={self.duplicates} "
            f"explained={self.explained} lost={self.lost} wall={self.wall_seconds}s {extra}"
        )

    def emit(self) -> FaultSummary:
        """Print the summary line; append it as JSON to ``$DURABLE_JOBS_FAULT_SUMMARY``."""
        print(self.line())
        path = os.environ.get("DURABLE_JOBS_FAULT_SUMMARY")
        if path:
            with open(path, "a", encoding="utf-8") as out:
                out.write(json.dumps(dataclasses.asdict(self), sort_keys=True) + "\n")
        return self


def record_figures(scenario: str, **figures: Any) -> None:
    """Print a scenario's figures; append them as JSON to ``$DURABLE_JOBS_FAULT_SUMMARY``
    (as :meth:`FaultSummary.emit` does) for scenarios that count something else than
    handler executions."""
    record = {"scenario": scenario, "database": connection.vendor, **figures}
    print(
        f"[{scenario} on {connection.vendor}] " + " ".join(f"{k}={v}" for k, v in figures.items())
    )
    path = os.environ.get("DURABLE_JOBS_FAULT_SUMMARY")
    if path:
        with open(path, "a", encoding="utf-8") as out:
            out.write(json.dumps(record, sort_keys=True, default=str) + "\n")
