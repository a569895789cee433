"""Handlers used by ``benchmarks/run.py``."""

from __future__ import annotations

import time

from durable_jobs import job


@job(name="bench.noop")
def noop(n: int = 0) -> None:
    """Does nothing: what is measured is the queue's own cost per job."""


@job(name="bench.record_start")
def record_start(n: int = 0) -> float:
    """Returns the wall-clock time at which the handler started; kept as the job's result."""
    return time.time()


@job(name="bench.spin")
def spin(loops: int = 200_000) -> int:
    """Pure-Python arithmetic holding the GIL throughout: CPU-bound work that threads of
    one process cannot run side by side."""
    total = 0
    for i in range(loops):
        total += i * i % 7
    return total
