"""Django-Q2 with its ORM broker on PostgreSQL or MySQL/MariaDB: ``async_task`` to enqueue, one
``manage.py qcluster`` whose cluster has as many worker processes as the drain asks
for (each runs one task at a time)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from benchmarks.peers import driver

NOOP = "benchmarks.peers.django_q2_project.tasks.noop"
PROBE = "benchmarks.peers.django_q2_project.tasks.probe"


class DjangoQ2Peer(driver.DjangoPeer):
    """Django-Q2 (ORM broker) on PostgreSQL, or on MySQL/MariaDB with --database mysql."""

    settings = "benchmarks.peers.django_q2_project.settings"
    packages = ("django-q2", "Django")

    def __init__(self, options: argparse.Namespace) -> None:
        super().__init__(options)
        from django_q.models import OrmQ, Task
        from django_q.tasks import async_task

        self.async_task = async_task
        self.task_model = Task
        self.queue_tables = (OrmQ._meta.db_table, Task._meta.db_table)

    def tables(self) -> Sequence[str]:
        return self.queue_tables

    def enqueue_one(self, n: int) -> None:
        self.async_task(NOOP, n)

    def worker_env(self, workers: int) -> dict[str, str]:
        env = super().worker_env(workers)
        env["PEERS_Q_WORKERS"] = str(workers)
        return env

    def worker_commands(self, workers: int) -> list[list[str]]:
        # One cluster: its sentinel starts the worker processes, a pusher that polls
        # the broker and a monitor that saves the results.
        return [[sys.executable, "-m", "django", "qcluster"]]

    def done_count(self) -> int:
        return self.task_model.objects.filter(success=True).count()

    def drain_window(self) -> tuple[float | None, float | None]:
        # Django-Q2 stores when a task was enqueued ("started") and when its function
        # returned ("stopped"), not when it began running.
        from django.db.models import Max

        last = self.task_model.objects.aggregate(last=Max("stopped"))["last"]
        return None, last.timestamp()

    def enqueue_probe(self, n: int) -> Any:
        return self.async_task(PROBE, n)

    def probe_starts(self, keys: Sequence[Any]) -> dict[Any, float]:
        rows = self.task_model.objects.filter(id__in=list(keys), success=True)
        return dict(rows.values_list("id", "result"))


if __name__ == "__main__":
    sys.exit(driver.main(DjangoQ2Peer))
