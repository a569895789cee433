"""Per-user throttles of requestable handlers: ``@job(requestable=True, throttle="10/1m")``.

At most N requests per user and handler in any sliding window of the period (the
format of queue rates, :func:`durable_jobs.flow.rates.parse_rate`). What is counted
is the user's :class:`~durable_jobs.models.JobRequest` rows of the handler: one per
request that got a job, a retried request (same ``Idempotency-Key``) not again, and
one per refused request (bad arguments, too large, throttled), which has no job.

Exact across every process and machine, and durable: the count is a database read
done while :func:`durable_jobs.http.requesting.submit` holds a lock on the user and
handler (PostgreSQL: an advisory lock taken before the transaction, so its snapshot sees
the previous request under any isolation level; SQLite: the write lock), and
the new request's row is written in the same transaction, so two concurrent requests
can never both take the last slot, and a restart forgets nothing. The read is one
range of the ``(user, name, created_at)`` index, at most N rows long.

Django's cache was the other candidate. Its default backend keeps a copy per
process (N processes would allow N times the limit), any backend may evict a counter
early, and an exact sliding window needs more than its atomic ``incr``. The jobs
table was the third: its ``meta`` cannot be indexed portably by user, so counting
there would read every recent job of the handler, whoever asked.

Rows go with their job (pruning included), so a window longer than
``PRUNE_AFTER_DAYS`` would undercount: system check ``durable_jobs.W004`` says so.
"""

from __future__ import annotations

import datetime
import math

from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from durable_jobs.flow.rates import InvalidRate, parse_rate
from durable_jobs.models import JobRequest


def parse(throttle: str, handler_name: str) -> tuple[int, float]:
    """``"10/1m"`` -> ``(10, 60.0)``. An invalid throttle refuses every request (the
    system check ``durable_jobs.E014`` reports it first): never unthrottled by mistake."""
    try:
        return parse_rate(throttle)
    except InvalidRate as exc:
        raise ImproperlyConfigured(
            f"@job(throttle=...) of {handler_name}: {exc} (system check durable_jobs.E014)"
        ) from None


def retry_after(
    *,
    user: str,
    name: str,
    throttle: str,
    using: str,
    now: datetime.datetime | None = None,
) -> int | None:
    """Whole seconds until ``user`` may request ``name`` again; None when they may now.

    Call it while holding the user and handler's lock, and record the request in the
    same transaction, or two requests may both see the last free slot.
    """
    limit, period = parse(throttle, name)
    now = now or timezone.now()
    window = datetime.timedelta(seconds=period)
    newest = list(
        JobRequest.objects.using(using)
        .filter(user=user, name=name, created_at__gt=now - window)
        .order_by("-created_at")
        .values_list("created_at", flat=True)[:limit]
    )
    if len(newest) < limit:
        return None
    # The oldest of the newest `limit` requests is the first to leave the window.
    return max(1, math.ceil((newest[-1] + window - now).total_seconds()))
