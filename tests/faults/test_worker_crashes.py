"""Fault scenario 1: workers are killed with SIGKILL, over and over, while they run jobs.

Four ``runworker`` processes drain a large batch while a chaos loop SIGKILLs a random
one every 1-3 s (seeded) and starts a replacement. A killed worker acknowledges
nothing: its leases expire (2 s here) and any surviving worker rescues the jobs,
records the ``lost`` attempt and retries them. Every handler writes a side-effect row
naming its job, attempt and node, so afterwards each run can be matched to the attempt
recorded for it (``tests/faults/conftest.py``): at-least-once, never silently twice.
"""

from __future__ import annotations

import os
import random
import time

import pytest

from durable_jobs import enqueue_many
from durable_jobs.handlers import PreparedJob
from durable_jobs.models import Job, Node, Outcome
from durable_jobs.states import State
from tests.faults.conftest import (
    CHAOS_WORKER_ARGS,
    Chaos,
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

#: 1 job in 100 fails on purpose, every time: it must end dead, with its reason.
FAILING_EVERY = 100


def job_count() -> int:
    # PostgreSQL runs the full 10,000. SQLite runs 5,000: it has one writer, so every
    # claim, side effect and acknowledgement of the four workers (and each replacement's
    # start-up) takes the same lock in turn. 10,000 took 45 s on an idle 2-core machine
    # but up to 150 s on a busy one, over the fault suite's budget; 5,000 still spans
    # a dozen kills or more. A longer soak: DURABLE_JOBS_FAULT_JOBS=100000 (with a
    # larger --timeout).
    default = 10_000 if is_postgresql() else 5_000
    return int(os.environ.get("DURABLE_JOBS_FAULT_JOBS", default))


def prepared_jobs(total: int, rng: random.Random) -> list[PreparedJob]:
    out = []
    for n in range(total):
        if n % FAILING_EVERY == FAILING_EVERY - 1:
            out.append(crash_jobs.fault_always_fails.prepare(n=n))
        else:
            # Some work after the side effect: a kill then lands between the side
            # effect's commit and the acknowledgement, the case that runs a job twice.
            out.append(crash_jobs.fault_record.prepare(n=n, after=rng.choice((0, 0, 0.005, 0.02))))
    return out


def test_kill_9_chaos_loses_no_job_and_runs_none_silently_twice(
    fault_workers: FaultWorkers,
) -> None:
    seed = fault_seed(20_240_601)
    total = job_count()
    rng = random.Random(seed)
    wall = time.monotonic()

    chaos = Chaos(fault_workers, CHAOS_WORKER_ARGS, size=4, seed=seed, interval=(1.0, 3.0))
    chaos.start()
    ids = [job.pk for job in enqueue_many(prepared_jobs(total, rng))]
    failing = set(ids[FAILING_EVERY - 1 :: FAILING_EVERY])
    assert len(ids) == total

    chaos.run_until(
        lambda: unfinished_count(ids) == 0,
        timeout=240,
        what=f"all {total} jobs final",
    )
    # The survivors were never signalled: a graceful stop must still exit 0.
    codes = chaos.stop()
    assert codes == [0] * len(codes), codes
    wall = time.monotonic() - wall

    # Both handlers write their side effect before they return or raise, so every
    # completed and every failed attempt has exactly one.
    account = account_executions(ids, effect_outcomes={Outcome.COMPLETED, Outcome.FAILED})
    summary = FaultSummary.of(
        "worker crashes",
        account,
        faults=chaos.kills,
        wall_seconds=wall,
        seed=seed,
        workers_started=chaos.started,
        duplicate_jobs=account.duplicate_jobs,
    ).emit()

    assert not account.problems, account.report()
    assert account.lost == 0
    # Every id is there, each in the final state its handler leads to.
    assert account.jobs == total
    assert account.states == {State.COMPLETED: total - len(failing), State.DEAD: len(failing)}
    dead = Job.objects.filter(pk__in=sorted(failing))
    assert set(dead.values_list("state", flat=True)) == {State.DEAD}
    for reason in dead.values_list("last_error", flat=True):
        # The handler's own error, or (when a kill took its last attempt) the lost lease.
        assert "fails on purpose" in reason or "LeaseExpired" in reason, reason
    # No lease is left behind, even on a job that ended dead.
    held = Job.objects.filter(pk__range=(ids[0], ids[-1])).exclude(lease_expires_at=None)
    assert not held.exists()
    # Every run beyond the one that decided its job is explained by a lost attempt.
    assert account.duplicates == account.explained
    assert account.outcomes.keys() <= {Outcome.COMPLETED, Outcome.FAILED, Outcome.LOST}

    # Not vacuous: the chaos killed workers while they held jobs, and those were rescued.
    # (At least one kill every 3 s: about 10 s of draining on the fastest machine.)
    assert chaos.kills >= 3, summary.line()
    assert account.outcomes[Outcome.LOST] >= 1, summary.line()
    killed = [fault.node for fault in chaos.faults]
    assert Node.objects.filter(name__in=killed).count() == len(killed)
