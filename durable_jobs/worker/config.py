"""What a worker serves and at what pace: the ``--queues`` grammar and the timing options.

Both are resolved against ``DURABLE_JOBS`` and validated here, before the worker
touches the database, so a bad value is refused with a message that names it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from durable_jobs import limits, validate
from durable_jobs.conf import get_settings
from durable_jobs.exceptions import ImproperlyConfiguredQueue
from durable_jobs.flow.rates import InvalidRate, parse_rate

#: The concurrency of a queue named without ``:N`` that the settings do not declare.
DEFAULT_CONCURRENCY = 10


def parse_queues(
    spec: str | Sequence[str] | None, default_concurrency: int | None = None
) -> dict[str, int]:
    """``"default,emails:5"`` -> ``{"default": 10, "emails": 5}``.

    A queue without ``:N`` takes ``default_concurrency``, else its configured
    concurrency, else 10. Without a spec, every queue in ``DURABLE_JOBS["QUEUES"]``.
    """
    return parse_queue_spec(spec, default_concurrency)[0]


def parse_queue_spec(
    spec: str | Sequence[str] | None, default_concurrency: int | None = None
) -> tuple[dict[str, int], dict[str, str]]:
    """:func:`parse_queues`, plus the global rates given as a third part:
    ``"webhooks:3:30/1m"`` -> ``({"webhooks": 3}, {"webhooks": "30/1m"})``."""
    configured = get_settings().queues
    rates: dict[str, str] = {}
    parts: list[str]
    if spec is None or spec == "" or spec == []:
        parts = list(configured)
    elif isinstance(spec, str):
        parts = [p.strip() for p in spec.split(",") if p.strip()]
    else:
        parts = list(spec)
    queues: dict[str, int] = {}
    for part in parts:
        name, _, rest = part.partition(":")
        limit, _, rate = rest.partition(":")
        name = name.strip()
        if rate:
            try:
                parse_rate(rate)
            except InvalidRate as exc:
                raise ImproperlyConfiguredQueue(f"Queue {name!r}: {exc}") from None
            rates[name] = rate.strip()
        if not name:
            raise ImproperlyConfiguredQueue(
                f"Empty queue name in {spec!r}; use name[:concurrency],..."
            )
        length = limits.length("Job", "queue")
        problem = validate.text_problem(name)
        if problem or len(name) > length:
            # The queue's row could not be stored (PostgreSQL), so the worker would fail
            # at start with a misleading database error, or claim forever in vain.
            raise ImproperlyConfiguredQueue(
                f"Queue name {name[:120]!r} is {problem or f'longer than {length} characters'}; "
                f"queue names are {validate.queue_name_rule()}"
            )
        if limit:
            try:
                concurrency = int(limit)
            except ValueError:
                raise ImproperlyConfiguredQueue(
                    f"Queue {part!r}: concurrency must be a whole number, as in {name}:5"
                ) from None
        elif default_concurrency is not None:
            concurrency = default_concurrency
        elif name in configured:
            concurrency = configured[name].concurrency
        else:
            concurrency = DEFAULT_CONCURRENCY
        if concurrency < 1:
            raise ImproperlyConfiguredQueue(f"Queue {name!r}: concurrency must be at least 1")
        queues[name] = concurrency
    if not queues:
        raise ImproperlyConfiguredQueue("No queues to serve; pass --queues name[:concurrency],...")
    return queues, rates


@dataclasses.dataclass(frozen=True)
class Timing:
    """A worker's clocks, in seconds: its options, or the settings' values."""

    lease_seconds: float
    heartbeat_seconds: float
    shutdown_grace: float
    poll_interval: float

    @classmethod
    def resolve(
        cls,
        *,
        lease_seconds: float | None = None,
        heartbeat_seconds: float | None = None,
        shutdown_grace: float | None = None,
        poll_interval: float | None = None,
    ) -> Timing:
        settings = get_settings()
        lease = float(settings.lease_seconds if lease_seconds is None else lease_seconds)
        timing = cls(
            lease_seconds=lease,
            # A third of the lease at most, so a lease survives two missed heartbeats.
            heartbeat_seconds=float(
                min(settings.heartbeat_seconds, lease / 3)
                if heartbeat_seconds is None
                else heartbeat_seconds
            ),
            shutdown_grace=float(
                settings.shutdown_grace_seconds if shutdown_grace is None else shutdown_grace
            ),
            poll_interval=float(settings.poll_interval if poll_interval is None else poll_interval),
        )
        periods = (timing.lease_seconds, timing.heartbeat_seconds, timing.poll_interval)
        if any(validate.seconds_problem(value) for value in periods):
            raise ValueError(
                "lease_seconds, heartbeat_seconds and poll_interval must be > 0 and at most "
                f"{limits.MAX_SECONDS:g} seconds (a year)"
            )
        return timing
