"""The soak: mixed jobs enqueued without pause while workers are killed, for a while.

Two *steady* ``runworker`` processes run for the whole soak and are never signalled:
their memory (RSS) is sampled throughout, to show whether a worker grows as it runs
jobs. Two *chaos* workers are SIGKILLed one at a time every few seconds and replaced.
A producer thread enqueues a mix of jobs (quick ones, ones that work on after their
side effect, slow ones, ones that fail on purpose) until the soak's time is up; then
everything must drain, and every run is accounted for as in the crash test.

CI runs a short soak (``DURABLE_JOBS_SOAK_SECONDS``, default 30). The long one:

    DURABLE_JOBS_SOAK_SECONDS=600 make test-postgres \\
        PYTEST_ARGS="tests/faults/test_soak.py -s -o timeout=1200"
"""

from __future__ import annotations

import os
import random
import statistics
import threading
import time
from pathlib import Path

import pytest
from django.db import connection

from durable_jobs import enqueue_many
from durable_jobs.handlers import PreparedJob
from durable_jobs.models import Outcome
from durable_jobs.states import State
from tests.faults.conftest import (
    CHAOS_WORKER_ARGS,
    Chaos,
    FaultSummary,
    FaultWorkers,
    account_executions,
    fault_seed,
    unfinished_count,
)
from tests.testapp import crash_jobs

pytestmark = [
    pytest.mark.faults,
    pytest.mark.subprocess,
    pytest.mark.django_db(transaction=True),
]

#: Seconds between memory samples of the steady workers.
SAMPLE_EVERY = 2.0


def soak_seconds() -> float:
    return float(os.environ.get("DURABLE_JOBS_SOAK_SECONDS", 30))


def rss_mb(pid: int) -> float | None:
    """Resident memory of a process, from /proc (None once it has gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return None


def mixed_jobs(first: int, count: int, rng: random.Random) -> list[PreparedJob]:
    """A page of the mix: mostly quick, some working on after their side effect (where a
    kill yields a second run), some slow, 2 % failing on purpose."""
    out = []
    for n in range(first, first + count):
        roll = rng.random()
        if roll < 0.02:
            out.append(crash_jobs.fault_always_fails.prepare(n=n))
        elif roll < 0.07:
            out.append(crash_jobs.fault_slow.prepare(n=n, seconds=rng.uniform(0.1, 0.5)))
        else:
            after = rng.choice((0, 0, 0, 0.005, 0.02))
            out.append(crash_jobs.fault_record.prepare(n=n, after=after))
    return out


class Producer(threading.Thread):
    """Enqueues pages of mixed jobs, with small pauses, until told to stop."""

    # About 100 jobs a second: more than a worker drains on SQLite under chaos would
    # only grow a backlog for the drain at the end.
    def __init__(self, seed: int, page: int = 20, pause: float = 0.2) -> None:
        super().__init__(name="soak-producer", daemon=True)
        self.rng = random.Random(seed)
        self.page = page
        self.pause = pause
        self.ids: list[int] = []
        self.error: BaseException | None = None
        self._stop_event = threading.Event()

    def run(self) -> None:
        try:
            while not self._stop_event.is_set():
                jobs = mixed_jobs(len(self.ids), self.page, self.rng)
                self.ids += [job.pk for job in enqueue_many(jobs)]
                self._stop_event.wait(self.pause)
        except BaseException as exc:  # reported by the test, not lost in the thread
            self.error = exc
        finally:
            connection.close()

    def stop(self) -> list[int]:
        self._stop_event.set()
        self.join(timeout=60)
        if self.error is not None:
            raise AssertionError(f"the producer failed: {self.error!r}") from self.error
        return self.ids


def test_soak_with_chaos_loses_nothing_and_workers_do_not_grow(
    fault_workers: FaultWorkers,
) -> None:
    seed = fault_seed(20_261_130)
    duration = soak_seconds()
    wall = time.monotonic()

    steady = [fault_workers.start(*CHAOS_WORKER_ARGS) for _ in range(2)]
    fault_workers.wait_registered(steady)
    chaos = Chaos(fault_workers, CHAOS_WORKER_ARGS, size=2, seed=seed, interval=(2.0, 5.0))
    chaos.start()
    samples: dict[int, list[float]] = {proc.pid: [] for proc in steady}
    next_sample = 0.0

    def sample() -> None:
        nonlocal next_sample
        if time.monotonic() < next_sample:
            return
        next_sample = time.monotonic() + SAMPLE_EVERY
        for proc in steady:
            assert proc.poll() is None, f"a steady worker exited\n{fault_workers.log(proc)}"
            mb = rss_mb(proc.pid)
            if mb is not None:
                samples[proc.pid].append(mb)

    producer = Producer(seed)
    producer.start()
    deadline = time.monotonic() + duration

    def soaked() -> bool:
        sample()
        return time.monotonic() >= deadline

    chaos.run_until(soaked, timeout=duration + 60, what=f"a {duration:g} s soak")
    ids = producer.stop()
    assert ids, "the producer enqueued nothing"
    chaos.run_until(
        lambda: sample() or unfinished_count(ids) == 0,
        timeout=180,
        what=f"all {len(ids)} soaked jobs final",
    )
    codes = [fault_workers.terminate(proc, timeout=60) for proc in steady] + chaos.stop()
    assert codes == [0] * len(codes), codes
    wall = time.monotonic() - wall

    account = account_executions(ids, effect_outcomes={Outcome.COMPLETED, Outcome.FAILED})
    memory = {
        f"steady_{i}": {
            "start_mb": round(series[0], 1),
            "end_mb": round(series[-1], 1),
            "peak_mb": round(max(series), 1),
            # The second half's median over the first half's: above 1 is growth.
            "trend": round(
                statistics.median(series[len(series) // 2 :])
                / statistics.median(series[: max(len(series) // 2, 1)]),
                3,
            ),
            "samples": len(series),
        }
        for i, series in enumerate(samples.values())
    }
    summary = FaultSummary.of(
        "soak",
        account,
        faults=chaos.kills,
        wall_seconds=wall,
        seed=seed,
        soak_seconds=duration,
        jobs_per_second=round(len(ids) / wall, 1),
        memory=memory,
    ).emit()

    assert not account.problems, account.report()
    assert account.lost == 0
    assert account.jobs == len(ids)
    assert set(account.states) <= {State.COMPLETED, State.DEAD}
    assert account.duplicates == account.explained
    # Not vacuous: workers were killed while jobs ran, and the steady ones were watched.
    assert chaos.kills >= 2, summary.line()
    assert all(len(series) >= 3 for series in samples.values()), samples
    for name, figures in memory.items():
        # A generous bound on a short, noisy run: a leak of a few kB per job shows up as a
        # trend well above this over the long soak; the figures are in the summary.
        assert figures["trend"] < 1.5, (name, figures)
