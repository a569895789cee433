"""Queue controls: pause and resume (one queue or all), and cluster-wide limits.

A queue's shared state lives in its :class:`~durable_jobs.models.Queue` row. Claims
read it inside their transaction, so a pause stops new starts on every node at once
and running jobs finish undisturbed. Limits declared in ``DURABLE_JOBS["QUEUES"]``
(or ``runworker --queues name:N:rate``) are written to the row when a worker starts;
queues not declared there keep whatever limits were set through this API or the admin.

::

    from durable_jobs.flow import queues
    queues.pause("webhooks")
    queues.set_limits("webhooks", rate="30/1m", global_concurrency=5)
    queues.resume_all()
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping

from django.utils import timezone

from durable_jobs import validate
from durable_jobs.conf import get_settings
from durable_jobs.db import engine_for
from durable_jobs.flow.rates import parse_rate
from durable_jobs.lifecycle.states import CLAIMABLE
from durable_jobs.models import Job, Node, Queue

#: ``set_limits`` leaves a limit alone when given this.
UNCHANGED = object()


def ensure(names: Iterable[str], *, using: str | None = None) -> None:
    """Create missing rows (running, unlimited) for ``names``."""
    now = timezone.now()
    Queue.objects.using(using).bulk_create(
        [Queue(name=name, created_at=now, updated_at=now) for name in sorted(set(names))],
        ignore_conflicts=True,
    )


def sync_for_worker(
    served: Iterable[str], rates: Mapping[str, str] | None = None, *, using: str | None = None
) -> None:
    """At worker start: rows for the served queues, and the limits that settings and
    ``--queues`` declare. A limit the settings do not mention is left as it is (set in
    the admin or by :func:`set_limits`); ``"rate": None`` removes one."""
    served = list(served)
    declared = get_settings().raw["QUEUES"]
    ensure([*served, *declared], using=using)
    for name in served:
        options = dict(declared.get(name) or {})
        if rates and name in rates:
            options["rate"] = rates[name]
        changes = {k: options[k] for k in ("rate", "global_concurrency") if k in options}
        if changes:
            set_limits(name, **changes, using=using)


def set_limits(
    name: str,
    *,
    rate: str | object | None = UNCHANGED,
    global_concurrency: int | object | None = UNCHANGED,
    using: str | None = None,
) -> Queue:
    """Set (or with None, remove) a queue's rate limit (``"30/1m"``) or global concurrency."""
    ensure([name], using=using)
    changes: dict[str, object] = {"updated_at": timezone.now()}
    if rate is not UNCHANGED:
        limit, period = parse_rate(str(rate)) if rate else (None, None)
        changes.update(rate_limit=limit, rate_period=period)
    if global_concurrency is not UNCHANGED:
        if not validate.is_global_concurrency(global_concurrency):
            raise ValueError(
                f"Queue {name!r}: global_concurrency must be an integer >= 1, or None for no limit"
            )
        changes["global_concurrency"] = global_concurrency
    Queue.objects.using(using).filter(name=name).update(**changes)
    return Queue.objects.using(using).get(name=name)


def pause(name: str, *, using: str | None = None) -> bool:
    """Stop new starts from ``name`` on every node; True if it was running."""
    return bool(_set_paused([name], paused=True, using=using))


def resume(name: str, *, using: str | None = None) -> bool:
    """Let ``name`` start jobs again; True if it was paused."""
    return bool(_set_paused([name], paused=False, using=using))


def pause_all(*, using: str | None = None) -> list[str]:
    """Pause every known queue (see :func:`known`); return those that were running."""
    return _set_paused(known(using=using), paused=True, using=using)


def resume_all(*, using: str | None = None) -> list[str]:
    names = list(Queue.objects.using(using).filter(paused=True).values_list("name", flat=True))
    return _set_paused(names, paused=False, using=using)


def declared(*, using: str | None = None) -> list[str]:
    """The queues of the queue table, the settings and the registered nodes."""
    names = set(Queue.objects.using(using).values_list("name", flat=True))
    names.update(get_settings().queues)
    for served in Node.objects.using(using).values_list("queues", flat=True):
        if isinstance(served, dict):
            names.update(served)
    return sorted(names)


def known(*, using: str | None = None) -> list[str]:
    """Every queue anything knows of: :func:`declared` ones and those of waiting jobs."""
    names = set(declared(using=using))
    # Read through the partial claim index: only waiting jobs, however large the table.
    names.update(
        Job.objects.using(using)
        .filter(state__in=sorted(CLAIMABLE))
        .order_by()
        .values_list("queue", flat=True)
        .distinct()
    )
    return sorted(names)


def limited(names: Iterable[str], *, using: str | None = None) -> set[str]:
    """Those of ``names`` whose claims must lock and count (rate or global concurrency)."""
    rows = Queue.objects.using(using).filter(name__in=list(names))
    return {q.name for q in rows if q.is_limited}


def serving_nodes(
    *, using: str | None = None, now: datetime.datetime | None = None
) -> dict[str, list[Node]]:
    """Queue name -> the live nodes (not stopping) that serve it."""
    serving: dict[str, list[Node]] = {}
    live = Node.objects.using(using).filter(
        last_heartbeat_at__gte=Node.live_after(now), stopping=False
    )
    for node in live:
        for name in node.queues if isinstance(node.queues, dict) else ():
            serving.setdefault(name, []).append(node)
    return serving


def _set_paused(names: list[str], *, paused: bool, using: str | None) -> list[str]:
    """Set ``paused`` on ``names`` (creating missing rows); return those that changed."""
    engine = engine_for(using)
    now = timezone.now()
    with engine.write_transaction():
        ensure(names, using=engine.alias)
        rows = Queue.objects.using(engine.alias).filter(name__in=names, paused=not paused)
        changed = sorted(rows.values_list("name", flat=True))
        rows.update(paused=paused, paused_at=now if paused else None, updated_at=now)
    return changed
