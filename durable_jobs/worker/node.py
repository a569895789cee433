"""The ``Node`` row of a running worker process: a synthetic name, never the host's."""

from __future__ import annotations

import os
import secrets
from datetime import timedelta

from django.utils import timezone

from durable_jobs.db import engine_for
from durable_jobs.exceptions import DurableJobsError
from durable_jobs.models import Node


class NodeNameTaken(DurableJobsError):
    """Another live worker already uses this node name."""


_ADJECTIVES = (
    "amber", "brisk", "calm", "deft", "eager", "fleet", "gentle", "hardy", "keen", "lucid",
    "mellow", "nimble", "plucky", "quiet", "rapid", "steady", "tidy", "vivid", "wise", "zesty",
)  # fmt: skip
_NOUNS = (
    "badger", "crane", "dingo", "egret", "falcon", "gecko", "heron", "ibis", "jackal", "koala",
    "lynx", "marten", "newt", "otter", "puffin", "quokka", "raven", "stoat", "tapir", "wren",
)  # fmt: skip


def synthetic_name() -> str:
    """Readable and unique enough: ``steady-otter-3fa9c1``."""
    return f"{secrets.choice(_ADJECTIVES)}-{secrets.choice(_NOUNS)}-{secrets.token_hex(3)}"


def register_node(
    queues: dict[str, int], *, name: str | None = None, using: str, stale_after: float = 60.0
) -> Node:
    """Create this process's Node row. A chosen ``name`` may take over the row of a node that
    has been silent for ``stale_after`` seconds (a crashed predecessor), never a live one's."""
    now = timezone.now()
    if name is not None:
        existing = Node.objects.using(using).filter(name=name).first()
        if existing is not None:
            if existing.last_heartbeat_at > now - timedelta(seconds=stale_after):
                raise NodeNameTaken(
                    f"A live worker is already named {name!r} (pid {existing.pid}, last seen "
                    f"{existing.last_heartbeat_at:%H:%M:%S} UTC). Choose another --name, or "
                    "omit it for a generated one."
                )
            with engine_for(using).write_transaction():
                existing.delete()
    return Node.objects.using(using).create(
        name=name or synthetic_name(),
        pid=os.getpid(),
        queues=queues,
        concurrency=sum(queues.values()),
        started_at=now,
        last_heartbeat_at=now,
    )
