"""Procrastinate, on its own PostgreSQL database."""

from __future__ import annotations

from benchmarks.peers.base import Adapter


class Procrastinate(Adapter):
    key = "procrastinate"
    label = "Procrastinate"
    venv = "procrastinate"
    requirements = (
        "procrastinate==3.10.0",
        "psycopg[binary,pool]==3.3.9",
        "psycopg-pool==3.3.3",
    )
    driver_module = "benchmarks.peers.procrastinate_project.driver"
    workers_note = (
        "`procrastinate worker --concurrency=10` per process (asyncio; `async def` tasks), "
        "a psycopg pool of up to 12 connections, LISTEN/NOTIFY on"
    )
    bulk_note = "`task.batch_defer(*kwargs)`, one call"
    finish_note = "`procrastinate_events`: last `succeeded` event"
