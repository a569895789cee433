"""The ``Node`` row of a running worker process: a synthetic name, never the host's."""

from __future__ import annotations

import os
import secrets

from django.utils import timezone

from durable_jobs.models import Node

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


def register_node(queues: dict[str, int], *, name: str | None = None, using: str) -> Node:
    now = timezone.now()
    return Node.objects.using(using).create(
        name=name or synthetic_name(),
        pid=os.getpid(),
        queues=queues,
        concurrency=sum(queues.values()),
        started_at=now,
        last_heartbeat_at=now,
    )
