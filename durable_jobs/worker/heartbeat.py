"""The node heartbeat: tells the cluster this node is alive, renews the leases of the jobs
it runs, and learns which of its queues have global limits (so that a change reaches
every node within one heartbeat).

It runs on the worker's loop thread, first in every pass, so leases are renewed even
while outcome writes fail, and during the shutdown grace period, so a grace longer
than the lease never lets another node rescue a job that is about to finish here.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from django.utils import timezone

from durable_jobs.db.engine import Engine
from durable_jobs.flow import queues as flow_queues
from durable_jobs.models import Node
from durable_jobs.worker.node import register_node


class Heartbeat:
    def __init__(
        self, engine: Engine, queues: Mapping[str, int], *, interval: float, lease_seconds: float
    ) -> None:
        self._engine = engine
        self._queues = dict(queues)
        self.interval = interval
        self._lease_seconds = lease_seconds
        #: The first beat is due at once.
        self.next_due = 0.0

    def due(self) -> bool:
        return time.monotonic() >= self.next_due

    def beat(
        self, node: Node, *, stopping: bool, leases: Mapping[Any, Sequence[int]]
    ) -> tuple[Node, set[str]]:
        """One heartbeat; the node (a new one if its row was gone) and the served queues
        that have global limits."""
        # Scheduled first: a beat that fails is tried again at the next interval.
        self.next_due = time.monotonic() + self.interval
        now = timezone.now()
        alias = self._engine.alias
        updated = (
            Node.objects.using(alias)
            .filter(pk=node.pk)
            .update(last_heartbeat_at=now, stopping=stopping)
        )
        if not updated:
            # Pruned while we were unreachable for a long time: come back under a new row.
            node = register_node(self._queues, using=alias)
        else:
            if leases:
                expires = now + timedelta(seconds=self._lease_seconds)
                self._engine.renew_leases(leases, expires)
        limited = self.limited_queues()
        self.next_due = time.monotonic() + self.interval
        return node, limited

    def limited_queues(self) -> set[str]:
        """The served queues whose claims must lock and count (rate or global concurrency)."""
        return flow_queues.limited(self._queues, using=self._engine.alias)
