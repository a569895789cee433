"""CPU time of groups of processes during a drain, read from ``/proc``.

Throughput moves with whatever else a shared machine runs; the CPU time a drain costs
per job moves much less, so the comparison reports it beside throughput, for the worker
processes and for the database server separately. A :class:`Sampler` thread reads
``utime + stime`` of every process every :data:`SAMPLE_SECONDS` and keeps, for every
process, the last value it saw: a process that exits (a backend whose connection
closed, a worker that stopped) still counts with what it had used.

A :class:`DrainMeter` adds the drain's progress (done counts read every
:data:`POLL_SECONDS`) and divides the CPU time spent between the moments 10 % and 90 %
of the jobs were done by the jobs done in between: that leaves out process start-up
and the tail, which would otherwise dominate a drain of a few seconds.

Only the standard library: the drivers import this module inside the peers' own
virtualenvs.
"""

from __future__ import annotations

import bisect
import collections
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

#: How often the sampler reads the processes' CPU times.
SAMPLE_SECONDS = 0.02
#: How often a drain reads how many jobs are done, the same for every system: the
#: points the 10 % and 90 % moments are interpolated between. Each read is one small
#: query, whose cost lands in the database's figure like the rest.
POLL_SECONDS = 0.2
#: The part of a drain the per-job figures cover: from this fraction of the jobs done...
WINDOW_START = 0.1
#: ...to this one.
WINDOW_END = 0.9
#: The database server's processes, by the name the kernel knows them by (``comm``),
#: for each kind of database. SQLite has none: its work happens in the worker processes.
SERVERS: dict[str, tuple[str, ...]] = {
    "postgres": ("postgres",),
    "mysql": ("mariadbd", "mysqld"),
    "redis": ("redis-server",),
    "sqlite": (),
}
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


class Process(NamedTuple):
    """What one line of ``/proc/<pid>/stat`` says about a process."""

    name: str
    ppid: int
    #: When it started, in clock ticks since boot: with the pid, it tells a process
    #: from a later one that got the same pid.
    start: int
    #: CPU time used so far, user and system, all its threads, in clock ticks.
    ticks: int


#: Every process on the machine, by pid.
Table = dict[int, Process]
#: Picks a group's processes (pids) from the table.
Group = Callable[[Table], Iterable[int]]


def read_stat(pid: str) -> Process | None:
    """One process's stat line, or None if it has gone. The name is between the first
    "(" and the last ")", and may hold spaces or parentheses itself."""
    try:
        fd = os.open(f"/proc/{pid}/stat", os.O_RDONLY)
    except OSError:
        return None
    try:
        data = os.read(fd, 4096).decode(errors="replace")
    except OSError:
        return None
    finally:
        os.close(fd)
    close = data.rfind(")")
    fields = data[close + 2 :].split() if close > 0 else []
    if len(fields) < 20:
        return None
    # Fields 4, 14, 15 and 22 of proc(5): ppid, utime, stime, starttime.
    ticks = int(fields[11]) + int(fields[12])
    return Process(data[data.find("(") + 1 : close], int(fields[1]), int(fields[19]), ticks)


def scan() -> Table:
    """Every process on the machine: one read of ``/proc/<pid>/stat`` each (under a
    millisecond for a hundred processes)."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (process := read_stat(entry)) is not None:
            table[int(entry)] = process
    return table


def tree(roots: Callable[[], Iterable[int]]) -> Group:
    """The processes ``roots()`` names and all their descendants, found by parent pid
    (the kernel here has no ``/proc/<pid>/task/*/children``): a worker's forked
    processes (Django-Q2's cluster, runworker's children) count as the worker's."""

    def members(table: Table) -> set[int]:
        children: dict[int, list[int]] = collections.defaultdict(list)
        for pid, process in table.items():
            children[process.ppid].append(pid)
        found: set[int] = set()
        pending = [pid for pid in roots() if pid in table]
        while pending:
            pid = pending.pop()
            if pid not in found:
                found.add(pid)
                pending.extend(children[pid])
        return found

    return members


def named(*names: str) -> Group:
    """Every process whose name is one of ``names``: a database server's processes
    (PostgreSQL's postmaster, backends, walwriter, checkpointer, autovacuum...)."""
    return lambda table: [pid for pid, process in table.items() if process.name in names]


def server(kind: str) -> Group | None:
    """The processes of a database server of ``kind`` (a key of :data:`SERVERS`)."""
    names = SERVERS[kind]
    return named(*names) if names else None


class Sampler:
    """Cumulative CPU seconds of each group, sampled every :data:`SAMPLE_SECONDS` by a
    thread between :meth:`start` and :meth:`stop`, at ``time.monotonic()`` times."""

    def __init__(self, groups: Mapping[str, Group]) -> None:
        self.groups = dict(groups)
        self.times: list[float] = []
        self.totals: dict[str, list[float]] = {name: [] for name in self.groups}
        #: Per group: the last ticks seen of each (pid, start), and what they were when
        #: sampling began (0 for a process started since).
        self._last: dict[str, dict[tuple[int, int], int]] = {name: {} for name in self.groups}
        self._base: dict[tuple[int, int], int] = {}
        self._began_ticks = 0.0
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)

    def start(self) -> None:
        self._began_ticks = uptime_ticks()
        self.sample()
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._thread.join()
        self.sample()

    def _run(self) -> None:
        while not self._stopping.wait(SAMPLE_SECONDS):
            self.sample()

    def sample(self) -> None:
        table = scan()
        now = time.monotonic()
        for name, group in self.groups.items():
            last = self._last[name]
            for pid in group(table):
                process = table[pid]
                key = (pid, process.start)
                if key not in self._base:
                    # A process already running when sampling began counts from then.
                    early = process.start < self._began_ticks
                    self._base[key] = process.ticks if early else 0
                last[key] = process.ticks
            used = sum(ticks - self._base[key] for key, ticks in last.items())
            self.totals[name].append(used / CLOCK_TICKS)
        self.times.append(now)

    def at(self, moment: float) -> dict[str, float]:
        """Each group's CPU seconds from the first sample to ``moment`` (a
        ``time.monotonic()`` time), interpolated linearly between the samples around it."""
        return {
            name: interpolate(self.times, totals, moment) for name, totals in self.totals.items()
        }

    def between(self, begin: float, end: float) -> dict[str, float]:
        """Each group's CPU seconds between two ``time.monotonic()`` times."""
        before, after = self.at(begin), self.at(end)
        return {name: after[name] - before[name] for name in self.totals}


def uptime_ticks() -> float:
    """Clock ticks since boot, the scale of a process's start time in ``/proc``."""
    with open("/proc/uptime") as uptime:
        return float(uptime.read().split()[0]) * CLOCK_TICKS


def interpolate(xs: list[float], ys: list[float], x: float) -> float:
    """``y`` at ``x`` on the line through the points (``xs`` ascending), held level
    beyond the first and last points."""
    index = bisect.bisect_left(xs, x)
    if index == 0:
        return ys[0]
    if index == len(xs):
        return ys[-1]
    x0, x1, y0, y1 = xs[index - 1], xs[index], ys[index - 1], ys[index]
    return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def crossing(points: list[tuple[float, int]], target: float) -> float | None:
    """When the done count reached ``target``, interpolated linearly between the two
    polls around it (it rose at a steady pace between them); None if it never did."""
    previous: tuple[float, int] | None = None
    for moment, done in points:
        if done >= target:
            if previous is None or done == previous[1]:
                return moment
            start, before = previous
            return start + (moment - start) * (target - before) / (done - before)
        previous = (moment, done)
    return None


class DrainMeter:
    """The CPU a drain costs, for its worker processes and the database server's
    (``database`` None: SQLite, no server). Used as a context manager around starting
    and stopping the workers, with :meth:`record` at every poll of the done count."""

    def __init__(self, workers: Group, database: Group | None) -> None:
        groups = {"workers": workers, **({"database": database} if database else {})}
        self.sampler = Sampler(groups)
        self.points: list[tuple[float, int]] = []
        self.began = self.ended = 0.0

    def __enter__(self) -> DrainMeter:
        self.sampler.start()
        self.began = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        self.ended = time.monotonic()
        self.sampler.stop()

    def record(self, done: int) -> None:
        """The done count, just read."""
        self.points.append((time.monotonic(), done))

    def whole(self) -> dict[str, float | None]:
        """CPU seconds from entering the context to leaving it."""
        whole = self.sampler.between(self.began, self.ended)
        return {"worker_cpu_s": whole["workers"], "db_cpu_s": whole.get("database")}

    def figures(self, jobs: int) -> dict[str, Any]:
        """CPU seconds per 1,000 jobs between the moments 10 % and 90 % of the ``jobs``
        were done (None if the polls never saw both), and for the whole drain, from
        before the workers started to after they stopped. ``db_*`` are None without a
        database server."""
        figures: dict[str, Any] = {
            **self.whole(),
            "worker_cpu_per_1000": None,
            "db_cpu_per_1000": None,
            "cpu_window_s": None,
        }
        begin = crossing(self.points, WINDOW_START * jobs)
        end = crossing(self.points, WINDOW_END * jobs)
        if begin is None or end is None:
            return figures
        window = self.sampler.between(begin, end)
        per_1000 = 1000 / ((WINDOW_END - WINDOW_START) * jobs)
        figures.update(
            worker_cpu_per_1000=window["workers"] * per_1000,
            db_cpu_per_1000=window["database"] * per_1000 if "database" in window else None,
            cpu_window_s=end - begin,
        )
        return figures
