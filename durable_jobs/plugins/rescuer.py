"""Rescues jobs whose lease expired: their node died, hung, or lost the database.

Any node may rescue any job; the rescue is a guarded write, so two nodes rescuing
at once record it once. The lost attempt is kept with outcome ``lost`` and counts
as a failure: the job is retried (or is ``dead`` when retries are exhausted).

Rescue is what makes delivery at-least-once: a worker that hangs longer than the
lease, then wakes and finishes, has already been overtaken, and its handler may have
run while another node ran the retry. Its late acknowledgement is rejected, but any
side effects it had are not undone. Keep ``LEASE_SECONDS`` well above the heartbeat
interval and make handlers idempotent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.utils import timezone

from durable_jobs import acks
from durable_jobs.models import Job, Outcome
from durable_jobs.plugins.base import Plugin
from durable_jobs.states import State

if TYPE_CHECKING:
    from durable_jobs.worker.worker import Worker

BATCH = 100


class Rescuer(Plugin):
    name = "rescuer"

    def interval(self, worker: Worker) -> float:
        return max(0.5, min(worker.lease_seconds / 2, 30.0))

    def run(self, worker: Worker) -> None:
        rescue_expired(using=worker.alias, node=worker.node.name)


def rescue_expired(*, using: str | None = None, node: str = "") -> int:
    """Rescue up to one batch of expired leases; return how many were rescued."""
    now = timezone.now()
    expired = list(
        Job.objects.using(using)
        .filter(state=State.LEASED, lease_expires_at__lt=now)
        .select_related("leased_by")
        .order_by("lease_expires_at")[:BATCH]
    )
    batch = []
    for job in expired:
        result = acks.unreported_result(job, now=now, outcome=Outcome.LOST)
        ack = acks.decide(result, node=job.leased_by.name if job.leased_by else "")
        ack.event = "rescued"
        ack.extra = {"rescued_by": node, "next_state": ack.target.value}
        batch.append(ack)
    # One statement for the batch; each is still fenced by the token read above, so a job
    # whose worker reported in the meantime, or that another node rescued, is left alone.
    return sum(acks.apply_many(batch, using=using)) if batch else 0
