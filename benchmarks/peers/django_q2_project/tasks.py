"""The project's tasks, addressed by their dotted path."""

from __future__ import annotations

import time


def noop(n: int = 0) -> None:
    """Does nothing."""


def probe(n: int = 0) -> float:
    """Returns the time it started; Django-Q2 stores it as the task's result."""
    return time.time()
