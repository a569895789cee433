"""Fault scenario: kill -9 of supervised workers (``runworker --processes 2``) and of supervisors.

Two supervisors with two worker processes each drain a batch while a chaos loop, every
1-3 s (seeded), SIGKILLs either one of their worker processes (its supervisor restarts
it; its leases expire and are rescued) or, every fourth kill, a supervisor itself (its
children notice, hand their running jobs back to ``queued`` and exit; the test starts
a replacement supervisor). Afterwards every run of a handler is matched to the attempt
recorded for it (``tests/faults/conftest.py``): every job final, none lost, and every
second run explained by a ``lost`` or ``interrupted`` attempt.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from durable_jobs import enqueue_many
from durable_jobs.handlers import PreparedJob
from durable_jobs.models import Node, Outcome
from durable_jobs.states import State
from tests.conftest import pid_running, wait_until
from tests.faults.conftest import (
    CHAOS_WORKER_ARGS,
    START_TIMEOUT,
    Chaos,
    Fault,
    FaultSummary,
    FaultWorkers,
    account_executions,
    fault_seed,
    is_postgresql,
    unfinished_count,
)
from tests.testapp import crash_jobs

pytestmark = [
    pytest.mark.faults,
    pytest.mark.subprocess,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(300),
]

PROCESSES = 2
SUPERVISED_ARGS = (*CHAOS_WORKER_ARGS, "--processes", str(PROCESSES), "--shutdown-grace", "1")
FAILING_EVERY = 100


def parent_pid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2 :].split()[1])


class SupervisedChaos(Chaos):
    """:class:`Chaos` over supervisors: the pool holds supervisors, the victims are their
    registered worker processes (restarted by their supervisor) or, every
    ``supervisor_every`` kills from the second on, a supervisor (replaced by a new one)."""

    supervisor_every = 4

    def __init__(self, workers: FaultWorkers, args: Sequence[str], *, size: int, seed: int) -> None:
        super().__init__(workers, args, size=size, seed=seed, interval=(1.0, 3.0))
        #: Worker processes orphaned by a killed supervisor: they must exit on their own.
        self.orphans: list[int] = []
        self.child_kills = 0
        self.supervisor_kills = 0

    def children(self) -> dict[int, tuple[int, str]]:
        """Registered worker processes of the pool's live supervisors: pid -> (its
        supervisor's pid, node name)."""
        supervisors = {p.pid for p in self.pool if p.poll() is None}
        found = {}
        for pid, name in Node.objects.values_list("pid", "name"):
            parent = parent_pid(pid)
            if parent in supervisors and pid_running(pid):
                found[pid] = (parent, name)
        return found

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        """Every supervisor of the pool has all its worker processes registered."""

        def ready() -> bool:
            parents = [parent for parent, _ in self.children().values()]
            return all(parents.count(p.pid) == PROCESSES for p in self.pool)

        wait_until(ready, self.workers, timeout=timeout, alive=self.pool, what="pool ready")

    def start(self) -> list[str]:
        for _ in range(self.size):
            self._start_one()
        self.wait_ready()
        return [name for _, name in self.children().values()]

    def kill_one(self, at: float = 0.0) -> bool:
        children = self.children()
        if not children:
            return False
        if self.kills % self.supervisor_every == 1:
            ready = [p for p in self.pool if p.pid in {s for s, _ in children.values()}]
            victim = self.rng.choice(ready)
            self.orphans += [pid for pid, (parent, _) in children.items() if parent == victim.pid]
            self.workers.kill(victim)
            self.pool.remove(victim)
            self.faults.append(Fault(at=round(at, 2), pid=victim.pid, node="supervisor"))
            self.supervisor_kills += 1
            self._start_one()
            return True
        pid = self.rng.choice(sorted(children))
        os.kill(pid, signal.SIGKILL)
        self.faults.append(Fault(at=round(at, 2), pid=pid, node=children[pid][1]))
        self.child_kills += 1
        return True

    def stop(self, timeout: float = 60.0) -> list[int]:
        self.wait_ready()
        for proc in self.pool:
            proc.send_signal(signal.SIGTERM)
        codes = []
        for proc in self.pool:
            try:
                codes.append(proc.wait(timeout=timeout))
            except subprocess.TimeoutExpired:
                codes.append(-1)
        return codes


def prepared_jobs(total: int, rng: random.Random) -> list[PreparedJob]:
    out = []
    for n in range(total):
        if n % FAILING_EVERY == FAILING_EVERY - 1:
            out.append(crash_jobs.fault_always_fails.prepare(n=n))
        else:
            out.append(crash_jobs.fault_record.prepare(n=n, after=rng.choice((0, 0, 0.005, 0.02))))
    return out


def test_kill_9_of_supervised_workers_and_supervisors_loses_no_job(
    fault_workers: FaultWorkers,
) -> None:
    seed = fault_seed(20_250_301)
    total = int(os.environ.get("DURABLE_JOBS_FAULT_JOBS", 16_000 if is_postgresql() else 8_000))
    rng = random.Random(seed)
    wall = time.monotonic()

    chaos = SupervisedChaos(fault_workers, SUPERVISED_ARGS, size=2, seed=seed)
    chaos.start()
    ids = [job.pk for job in enqueue_many(prepared_jobs(total, rng))]
    failing = set(ids[FAILING_EVERY - 1 :: FAILING_EVERY])

    chaos.run_until(lambda: unfinished_count(ids) == 0, timeout=240, what=f"all {total} final")
    codes = chaos.stop()
    assert codes == [0] * len(codes), codes
    wall = time.monotonic() - wall
    # The orphans of killed supervisors exited by themselves, after handing back.
    assert not [pid for pid in chaos.orphans if pid_running(pid)]

    account = account_executions(ids, effect_outcomes={Outcome.COMPLETED, Outcome.FAILED})
    summary = FaultSummary.of(
        "supervised worker crashes",
        account,
        faults=chaos.kills,
        wall_seconds=wall,
        seed=seed,
        child_kills=chaos.child_kills,
        supervisor_kills=chaos.supervisor_kills,
        duplicate_jobs=account.duplicate_jobs,
    ).emit()

    assert not account.problems, account.report()
    assert account.lost == 0
    assert account.jobs == total
    assert account.states == {State.COMPLETED: total - len(failing), State.DEAD: len(failing)}
    assert account.duplicates == account.explained
    assert account.outcomes.keys() <= {
        Outcome.COMPLETED,
        Outcome.FAILED,
        Outcome.LOST,
        Outcome.INTERRUPTED,
    }
    # Not vacuous: worker processes were killed while they held jobs, and rescued.
    assert chaos.child_kills >= 3, summary.line()
    assert chaos.supervisor_kills >= 1, summary.line()
    assert account.outcomes[Outcome.LOST] >= 1, summary.line()
    assert not Node.objects.filter(pid__in=[p.pid for p in chaos.pool]).exists()
