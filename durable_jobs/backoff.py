"""How long to wait after a failure: a job's next attempt, and the worker's own retries."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Sequence
from typing import Any

from durable_jobs.conf import get_settings

#: ``backoff(attempt) -> seconds``; ``attempt`` is the number of the attempt that failed (1-based).
Backoff = Callable[[int], float]

JITTER = 0.25
#: Doublings past this change nothing (the cap is reached long before) and would overflow.
_MAX_DOUBLINGS = 64


@dataclasses.dataclass(frozen=True)
class Doubling:
    """``base`` seconds after the first failure, doubling after each further one, up to
    ``cap``. The one exponential backoff: jobs' retries (:func:`exponential`), the worker
    loop's and its listener's reconnections, and a schedule's failed enqueues."""

    base: float
    cap: float

    def delay(self, failures: int) -> float:
        """The wait after ``failures`` failures in a row (1 for the first)."""
        doublings = min(max(failures - 1, 0), _MAX_DOUBLINGS)
        return min(self.base * 2.0**doublings, self.cap)


def exponential(attempt: int) -> float:
    """base * 2**(attempt-1), capped, plus 0-25 % random jitter so retries don't stampede."""
    settings = get_settings()
    delay = Doubling(settings.backoff_base_seconds, settings.backoff_max_seconds).delay(attempt)
    return delay * (1 + random.uniform(0, JITTER))


def fixed(delays: Sequence[float]) -> Backoff:
    """Wait ``delays[attempt-1]`` seconds; the last delay repeats."""
    if not delays or any(d < 0 for d in delays):
        raise ValueError("backoff delays must be a non-empty list of seconds >= 0")
    frozen = tuple(float(d) for d in delays)

    def backoff(attempt: int) -> float:
        return frozen[min(attempt, len(frozen)) - 1]

    return backoff


def backoff_from(value: Any) -> Backoff:
    if value is None:
        return exponential
    if callable(value):
        return value
    if isinstance(value, Sequence) and not isinstance(value, str):
        return fixed(value)
    raise TypeError("@job(backoff=...) takes a callable attempt -> seconds, or a list of seconds")
