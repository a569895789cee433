"""The Celery app: Redis as broker and as result backend (``PEERS_REDIS_URL``, a
database number the benchmark owns). Celery's defaults otherwise: a message is
acknowledged when a worker receives it, and each worker prefetches 4 per thread."""

from __future__ import annotations

import os
import time

from celery import Celery

REDIS_URL = os.environ.get("PEERS_REDIS_URL", "redis://127.0.0.1:6379/15")
QUEUE = "peers"

app = Celery("peers", broker=REDIS_URL, backend=REDIS_URL)
app.conf.update(task_default_queue=QUEUE, broker_connection_retry_on_startup=True)


@app.task(name="noop")
def noop(n: int = 0) -> None:
    """Does nothing."""


@app.task(name="probe")
def probe(n: int = 0) -> float:
    """Returns the time it started; the Redis result backend stores it."""
    return time.time()
