"""django-tasks-db: the database backend of Django's tasks API, run by ``manage.py
db_worker`` processes (one task at a time each, polling every ``--interval``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from benchmarks.peers import driver


class DjangoTasksDbPeer(driver.DjangoPeer):
    """django-tasks-db on PostgreSQL, or on MySQL/MariaDB with --database mysql."""

    settings = "benchmarks.peers.django_tasks_db_project.settings"
    packages = ("django-tasks-db", "django-tasks", "Django")

    def __init__(self, options: argparse.Namespace) -> None:
        super().__init__(options)
        from django_tasks_db.models import DBTaskResult

        from benchmarks.peers.django_tasks_db_project import tasks

        self.model = DBTaskResult
        self.tasks = tasks

    def tables(self) -> Sequence[str]:
        return (self.model._meta.db_table,)

    def enqueue_one(self, n: int) -> None:
        self.tasks.noop.enqueue(n=n)

    def check_count(self, count: int) -> None:
        if (found := self.model.objects.count()) != count:
            raise RuntimeError(f"{found} tasks queued, not {count}")

    def worker_commands(self, workers: int) -> list[list[str]]:
        # The defaults otherwise: --interval 1 (seconds between polls when idle) and a
        # random start-up delay of up to a second, to spread the workers' polls.
        command = [sys.executable, "-m", "django", "db_worker", "--queue-name", "default"]
        return [command for _ in range(workers)]

    def done_count(self) -> int:
        return self.model.objects.filter(status="SUCCESSFUL").count()

    def drain_window(self) -> tuple[float | None, float | None]:
        from django.db.models import Max, Min

        window = self.model.objects.aggregate(first=Min("started_at"), last=Max("finished_at"))
        return window["first"].timestamp(), window["last"].timestamp()

    def enqueue_probe(self, n: int) -> Any:
        return str(self.tasks.probe.enqueue(n=n).id)

    def probe_starts(self, keys: Sequence[Any]) -> dict[Any, float]:
        rows = self.model.objects.filter(id__in=list(keys), status="SUCCESSFUL")
        return {str(pk): value for pk, value in rows.values_list("id", "return_value")}


if __name__ == "__main__":
    sys.exit(driver.main(DjangoTasksDbPeer))
