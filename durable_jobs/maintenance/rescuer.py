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

from django.utils import timezone

from durable_jobs.db import engine_for
from durable_jobs.lifecycle import outcomes, recording
from durable_jobs.maintenance.base import MaintenanceContext
from durable_jobs.models import Outcome

#: Expired leases rescued per run, oldest first.
BATCH = 100


class Rescuer:
    name = "rescuer"

    def interval(self, context: MaintenanceContext) -> float:
        return max(0.5, min(context.lease_seconds / 2, 30.0))

    def run(self, context: MaintenanceContext) -> None:
        rescue_expired(using=context.alias, node=context.node_name)


def rescue_expired(*, using: str | None = None, node: str = "") -> int:
    """Rescue up to one batch of expired leases; return how many were rescued."""
    now = timezone.now()
    engine = engine_for(using)
    batch = []
    for job in engine.expired_leases(now, BATCH):
        result = outcomes.unreported(job, now=now, outcome=Outcome.LOST)
        holder = job.lease_holder
        settlement = outcomes.decide(result, node=holder.name if holder else "")
        settlement.event = "rescued"
        settlement.extra = {"rescued_by": node, "next_state": settlement.target.value}
        batch.append(settlement)
    # One statement for the batch; each is still fenced by the token read above, so a job
    # whose worker reported in the meantime, or that another node rescued, is left alone.
    return sum(recording.write_now(batch, using=engine.alias)) if batch else 0
