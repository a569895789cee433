"""How long a failed job waits before its next attempt."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

#: ``backoff(attempt) -> seconds``; ``attempt`` is the number of the attempt that failed (1-based).
Backoff = Callable[[int], float]

JITTER = 0.25
#: The longest retry delay or snooze a job can be given (a year). Longer ones, and ``inf``,
#: would overflow the datetime arithmetic that records them, in the worker's loop.
MAX_DELAY_SECONDS = 365 * 86400.0


def exponential(attempt: int) -> float:
    """base * 2**(attempt-1), capped, plus 0-25 % random jitter so retries don't stampede."""
    from durable_jobs.conf import get_settings

    settings = get_settings()
    delay = min(
        settings.backoff_base_seconds * 2 ** max(attempt - 1, 0), settings.backoff_max_seconds
    )
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
