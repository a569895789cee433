"""Tells the cluster this node is alive, renews the leases of the jobs it runs, and
learns which of its queues have global limits (so changes reach every node within
one heartbeat)."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from django.utils import timezone

from durable_jobs.db import engine_for
from durable_jobs.models import Node
from durable_jobs.plugins.base import Plugin

if TYPE_CHECKING:
    from durable_jobs.worker.worker import Worker


class Heartbeat(Plugin):
    name = "heartbeat"

    def interval(self, worker: Worker) -> float:
        return worker.heartbeat_seconds

    def run(self, worker: Worker) -> None:
        now = timezone.now()
        node = worker.node
        updated = (
            Node.objects.using(worker.alias)
            .filter(pk=node.pk)
            .update(last_heartbeat_at=now, stopping=worker.stopping)
        )
        if not updated:
            # Pruned while we were unreachable for a long time: come back under a new row.
            worker.reregister_node()
            return
        worker.refresh_queue_limits()
        leases = worker.running_leases()
        if leases:
            expires = now + timedelta(seconds=worker.lease_seconds)
            engine_for(worker.alias).renew_leases(leases, expires)
