"""Celery with a local Redis as broker and result backend (a Redis database number the
run owns: it is emptied at the start and the end, and refused if it holds anything
the benchmark did not put there)."""

from __future__ import annotations

from benchmarks.peers.base import Adapter


class CeleryRedis(Adapter):
    key = "celery_redis"
    label = "Celery (Redis)"
    venv = "celery_redis"
    requirements = ("celery[redis]==5.7.0", "kombu==5.7.0", "redis==8.1.0")
    driver_module = "benchmarks.peers.celery_redis_project.driver"
    uses_postgres = False
    workers_note = (
        "`celery worker --pool=threads --concurrency=10` per process, "
        "`--without-gossip --without-mingle`; Celery's defaults otherwise (early "
        "acknowledgement, prefetch 4 per thread)"
    )
    bulk_note = "`group(...).apply_async()`, one call"
    finish_note = "last `date_done` in the Redis result backend"
