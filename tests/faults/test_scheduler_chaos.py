"""Three schedule-heartbeat nodes, SIGKILLed and restarted over 100 simulated minutes.

Each node is a real process that loops on ``durable_jobs.schedules.tick.tick(now)``
with ``now`` read from a shared clock file (the injected clock: minute ``k`` of the
simulation). The test advances the clock one simulated minute per step while killing
nodes with SIGKILL at random moments (often just after the clock moved, when a
heartbeat is writing), restarting them, and twice taking the whole cluster down for
several minutes, so that a restarted node must catch up on the occurrences nobody
enqueued.

What must hold: for each schedule, the jobs keyed ``schedule:<id>:<run-at>`` are exactly
one per occurrence in the simulated span, with no gap and no duplicate, and the
schedule's ``run_count`` says the same. Both schedules use ``catch_up="all"``, so every
missed occurrence is enqueued on restart.
"""

from __future__ import annotations

import argparse
import datetime
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from tests.conftest import ROOT
from tests.faults.conftest import record_figures

pytestmark = [
    pytest.mark.faults,
    pytest.mark.subprocess,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(120),
]

UTC = datetime.UTC
#: Simulated minute 0. Far from the real date on purpose: only the injected clock counts.
T0 = datetime.datetime(2031, 5, 6, 7, 0, tzinfo=UTC)
MINUTE = datetime.timedelta(minutes=1)
TICKS = 100
NODES = 3
#: Real seconds per simulated minute.
STEP_SECONDS = 0.05
#: Chance, per simulated minute, of killing one live node.
KILL_CHANCE = 0.3
#: Simulated minutes at which every node is killed, and for how long they stay down.
BLACKOUTS = {35: 6, 70: 4}
SEED = 20310506

#: Runs node() after django.setup().
BOOTSTRAP = """
import sys
import django
django.setup()
from tests.faults.test_scheduler_chaos import node
sys.exit(node(sys.argv[1:]))
"""


def simulated(k: int) -> datetime.datetime:
    return T0 + k * MINUTE


# -- the node process -------------------------------------------------------------------------


def node(argv: list[str]) -> int:
    """Tick at the simulated time in ``--clock`` until it says ``stop``; log each tick.

    ``begin k`` and ``end k enqueued duplicates failed schedules unix-time`` lines go to
    ``--log`` with one write each, so a SIGKILL loses nothing written before it, and a
    log ending in ``begin`` tells that the kill landed inside ``tick()``. A database
    error is not caught: it ends the node with a traceback, and the test fails.
    """
    parser = argparse.ArgumentParser()
    parser.add_argument("--clock", type=Path, required=True)
    parser.add_argument("--log", type=Path, required=True)
    parser.add_argument("--activate", type=Path, required=True)
    args = parser.parse_args(argv)

    from django.db import connections

    from durable_jobs.schedules.tick import tick

    # Started ahead as a spare (see Cluster): Python, Django and the database driver are
    # loaded (creating the connection wrapper does not connect), but nothing has touched
    # the database yet. Once activated it is a freshly restarted node, whose first tick
    # opens a new connection and finds whatever was left overdue.
    connections["default"]
    while not args.activate.exists():
        time.sleep(0.005)
    with open(args.log, "a", buffering=1) as log:
        log.write(f"pid {os.getpid()}\n")
        while True:
            text = args.clock.read_text()
            if text == "stop":
                return 0
            k = int(text)
            log.write(f"begin {k}\n")
            result = tick(simulated(k))
            log.write(
                f"end {k} {result.enqueued} {result.duplicates} {result.failed} "
                f"{result.schedules} {time.time():.3f}\n"
            )
            time.sleep(0.01)


# -- the chaos --------------------------------------------------------------------------------


@dataclass
class NodeProcess:
    proc: subprocess.Popen[bytes]
    #: Its tick log (see node()); its stdout and stderr go to the same name with ``.err``.
    log: Path
    #: The file whose creation makes it start ticking.
    activate: Path


@dataclass
class Cluster:
    """Three node slots: start, SIGKILL, restart; every kill and log kept for the report.

    A restart takes a *spare*: a node process started ahead that has loaded Python and
    Django and waits to be activated. On this 2-core machine, loading them takes 0.5 to
    3 s under load, long enough for most of the simulated span to pass between a kill and
    the restart; a spare makes a restart as quick as it is on a machine with cores to
    spare, while the restarted node still opens its own new connection.
    """

    directory: Path
    env: dict[str, str]
    nodes: dict[int, NodeProcess] = field(default_factory=dict)
    spares: list[NodeProcess] = field(default_factory=list)
    #: Killed slots: restarted once the clock reaches the minute and the real time given.
    down_until: dict[int, tuple[int, float]] = field(default_factory=dict)
    minute: int = 0
    started: list[Path] = field(default_factory=list)
    kills: list[Path] = field(default_factory=list)
    exits: list[int] = field(default_factory=list)
    spawned: int = 0

    @property
    def clock(self) -> Path:
        return self.directory / "clock"

    def set_clock(self, value: str) -> None:
        tmp = self.directory / "clock.tmp"
        tmp.write_text(value)
        os.replace(tmp, self.clock)  # atomic: a node never reads half a value
        if value.isdigit():
            self.minute = int(value)
        self.note(f"clock {value}")

    def note(self, event: str) -> None:
        """The chaos's own log (``chaos.log``), with times to match the nodes' ``end`` lines."""
        with open(self.directory / "chaos.log", "a") as log:
            log.write(f"{time.time():.3f} {event}\n")

    def spawn(self) -> NodeProcess:
        name = f"node-{self.spawned}"
        self.spawned += 1
        log, activate = self.directory / f"{name}.log", self.directory / f"{name}.go"
        with open(self.directory / f"{name}.err", "wb") as output:
            command = [sys.executable, "-c", BOOTSTRAP, "--clock", str(self.clock)]
            proc = subprocess.Popen(
                [*command, "--log", str(log), "--activate", str(activate)],
                cwd=ROOT,
                env=self.env,
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        return NodeProcess(proc, log, activate)

    def keep_spares(self) -> None:
        while len(self.spares) < NODES:
            self.spares.append(self.spawn())

    def start(self, slot: int) -> None:
        node = self.spares.pop(0) if self.spares else self.spawn()
        if node.proc.poll() is not None:
            self.fail(f"spare pid {node.proc.pid} exited with {node.proc.returncode}")
        node.activate.touch()
        self.nodes[slot] = node
        self.started.append(node.log)
        self.down_until.pop(slot, None)
        self.note(f"start slot {slot} pid {node.proc.pid} ({node.log.name})")
        self.keep_spares()

    def kill(self, slot: int, *, seconds: float = 0.0, minutes: int = 0) -> None:
        """SIGKILL node ``slot``; restart it after ``seconds`` and ``minutes`` (simulated)."""
        node = self.nodes[slot]
        if node.proc.poll() is None:
            node.proc.send_signal(signal.SIGKILL)
        code = node.proc.wait(10)
        if code != -signal.SIGKILL:
            self.fail(f"node {slot} (pid {node.proc.pid}) had already exited with {code}")
        self.kills.append(node.log)
        self.down_until[slot] = (self.minute + minutes, time.monotonic() + seconds)
        self.note(f"kill slot {slot} pid {node.proc.pid}: {last_line(node.log)!r}")

    def alive(self) -> list[int]:
        live = []
        for slot, node in self.nodes.items():
            if slot in self.down_until:
                continue
            if node.proc.poll() is not None:
                self.fail(f"node {slot} (pid {node.proc.pid}) exited with {node.proc.returncode}")
            live.append(slot)
        return live

    def ticking(self) -> list[int]:
        """The live nodes that have started ticking."""
        return [
            slot
            for slot in self.alive()
            if last_line(self.nodes[slot].log).startswith(("begin", "end"))
        ]

    def wait_inside(self, slot: int, k: int, timeout: float) -> bool:
        """Wait until node ``slot`` is inside ``tick()`` for minute ``k``; False on timeout."""
        deadline = time.monotonic() + timeout
        while last_line(self.nodes[slot].log) != f"begin {k}":
            if time.monotonic() > deadline:
                return False
            time.sleep(0.0005)
        return True

    def pace(self, k: int, timeout: float = 20.0) -> None:
        """Wait until a live node has finished a tick at minute ``k`` (restarting nodes as
        they come due), so each minute is ticked live unless every node is down."""
        deadline = time.monotonic() + timeout
        while True:
            self.restart_due()
            live = self.alive()
            if not live:
                return  # nobody to tick this minute: a later tick must catch it up
            if any(last_completed(self.nodes[slot].log) >= k for slot in live):
                return
            if time.monotonic() > deadline:
                self.fail(f"no node finished a tick at minute {k} within {timeout}s")
            time.sleep(0.002)

    def restart_due(self) -> None:
        now = time.monotonic()
        for slot, (minute, until) in list(self.down_until.items()):
            if self.minute >= minute and now >= until:
                self.start(slot)

    def stop(self) -> None:
        self.set_clock("stop")
        for node in self.nodes.values():
            try:
                self.exits.append(node.proc.wait(15))
            except subprocess.TimeoutExpired:
                self.fail(f"node pid {node.proc.pid} did not stop")

    def cleanup(self) -> None:
        """SIGKILL every process still running: nodes and unused spares, by pid."""
        for node in [*self.nodes.values(), *self.spares]:
            if node.proc.poll() is None:
                node.proc.send_signal(signal.SIGKILL)
                node.proc.wait(10)

    def fail(self, message: str) -> None:
        tails = [f"--- chaos.log ---\n{(self.directory / 'chaos.log').read_text()[-1500:]}"]
        for log in self.started[-6:]:
            err = log.with_suffix(".err")
            tails.append(f"--- {err.name} ---\n{err.read_text(errors='replace')[-2000:]}")
        raise AssertionError(message + "\n" + "\n".join(tails))

    def ticks(self) -> list[tuple[int, int, int, int]]:
        """(k, enqueued, duplicates, failed) of every tick that completed, in every node."""
        done = []
        for log in self.started:
            if not log.exists():
                continue  # killed before it opened its log
            for line in log.read_text().splitlines():
                if line.startswith("end "):
                    k, enqueued, duplicates, failed = map(int, line.split()[1:5])
                    done.append((k, enqueued, duplicates, failed))
        return done

    def killed_inside_tick(self) -> int:
        """Kills that landed between a node's ``begin`` and ``end``."""
        return sum(last_line(log).startswith("begin") for log in self.kills)


def last_line(log: Path) -> str:
    try:
        with open(log, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 64))
            lines = f.read().decode().splitlines()
    except FileNotFoundError:
        return ""
    return lines[-1] if lines else ""


def last_completed(log: Path) -> int:
    """The minute of the node's last finished tick, or -1."""
    try:
        with open(log, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 200))
            lines = f.read().decode(errors="replace").splitlines()
    except FileNotFoundError:
        return -1
    ends = [line for line in lines[1:] if line.startswith("end ")]
    return int(ends[-1].split()[1]) if ends else -1


def occurrences(first: datetime.datetime, step: datetime.timedelta) -> list[datetime.datetime]:
    out, at = [], first
    while at <= simulated(TICKS - 1):
        out.append(at)
        at += step
    return out


def test_three_killed_and_restarted_heartbeats_enqueue_each_occurrence_once(
    tmp_path: Path,
) -> None:
    from durable_jobs import Scheduler
    from durable_jobs.models import Job, Schedule
    from durable_jobs.schedules.tick import occurrence_key

    # Created one simulated minute before T0: the cron's first run is T0 itself.
    scheduler = Scheduler(clock=lambda: T0 - MINUTE)
    common: dict[str, Any] = {
        "name": "tests.chaos.occurrence",
        "catch_up": "all",
        "catch_up_limit": 1000,
    }
    scheduler.schedule("chaos-minutely", expression="* * * * *", **common)
    scheduler.schedule_interval("chaos-3m", "3m", **common)
    expected = {
        "chaos-minutely": occurrences(T0, MINUTE),
        "chaos-3m": occurrences(T0 + 2 * MINUTE, 3 * MINUTE),
    }
    assert len(expected["chaos-minutely"]) == TICKS
    for schedule_id, times in expected.items():
        assert scheduler.get(schedule_id).next_run_at == times[0]

    env = dict(os.environ)
    env["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    env["DURABLE_JOBS_TEST_DB_NAME"] = str(connection.settings_dict["NAME"])
    env["PYTHONPATH"] = str(ROOT)
    env["DURABLE_JOBS_LOG_LEVEL"] = "WARNING"
    rng = random.Random(SEED)
    cluster = Cluster(tmp_path, env)
    started = time.monotonic()
    try:
        cluster.set_clock("0")
        cluster.keep_spares()
        for slot in range(NODES):
            cluster.start(slot)
        for k in range(TICKS):
            cluster.set_clock(str(k))
            cluster.restart_due()
            if k in BLACKOUTS:
                for slot in cluster.alive():
                    cluster.kill(slot, minutes=BLACKOUTS[k])
            elif (ticking := cluster.ticking()) and rng.random() < KILL_CHANCE:
                slot = rng.choice(ticking)
                if rng.random() < 0.5:
                    # Aim: strike while it is inside tick() for the minute that just began,
                    # when one heartbeat is enqueueing it; otherwise at a random moment.
                    cluster.wait_inside(slot, k, timeout=0.05)
                else:
                    time.sleep(rng.uniform(0, 0.03))
                cluster.kill(slot, seconds=rng.uniform(0, 0.3))
            cluster.pace(k)
            time.sleep(STEP_SECONDS)
        # The last minute: bring every node back and let them finish the span.
        for slot in list(cluster.down_until):
            cluster.start(slot)
        end = simulated(TICKS - 1)
        deadline = time.monotonic() + 30
        while Schedule.objects.filter(pk__in=expected, next_run_at__lte=end).exists():
            cluster.alive()
            assert time.monotonic() < deadline, "the nodes did not finish the last minute"
            time.sleep(0.05)
        cluster.stop()
    finally:
        cluster.cleanup()
    elapsed = time.monotonic() - started
    assert cluster.exits == [0] * NODES, cluster.exits

    for schedule_id, times in expected.items():
        keys = Counter(
            Job.objects.filter(meta__schedule__id=schedule_id).values_list(
                "idempotency_key", flat=True
            )
        )
        wanted = {occurrence_key(schedule_id, t) for t in times}
        missing = sorted(wanted - set(keys))
        extra = sorted(set(keys) - wanted, key=str)
        doubled = sorted((key for key, n in keys.items() if n > 1), key=str)
        assert (missing, extra, doubled) == ([], [], []), schedule_id
        assert sum(keys.values()) == len(times)
        schedule = Schedule.objects.get(pk=schedule_id)
        assert schedule.run_count == len(times)
        assert schedule.fail_count == 0, schedule.last_error
        assert schedule.next_run_at is not None
        assert schedule.next_run_at > end
        for job in Job.objects.filter(meta__schedule__id=schedule_id):
            scheduled = job.meta["schedule"]["scheduled_run_at"]
            assert job.idempotency_key == f"schedule:{schedule_id}:{scheduled}"
    assert Job.objects.count() == sum(len(t) for t in expected.values())

    ticks = cluster.ticks()
    enqueued = sum(t[1] for t in ticks)
    duplicates = sum(t[2] for t in ticks)
    assert sum(t[3] for t in ticks) == 0
    # A restart after a blackout caught up on the minutes nobody ticked, in one heartbeat.
    biggest = max(t[1] for t in ticks)
    assert biggest >= min(BLACKOUTS.values()), biggest
    # Completed ticks can only under-count (a node killed between commit and log line).
    assert enqueued <= Job.objects.count()
    record_figures(
        "scheduler",
        simulated_minutes=TICKS,
        occurrences=Job.objects.count(),
        per_schedule={s: len(t) for s, t in expected.items()},
        sigkills=len(cluster.kills),
        sigkills_inside_tick=cluster.killed_inside_tick(),
        node_starts=len(cluster.started),
        missing=0,
        duplicated=0,
        inserts_refused_by_key=duplicates,
        largest_catch_up=biggest,
        wall_seconds=round(elapsed, 1),
    )
