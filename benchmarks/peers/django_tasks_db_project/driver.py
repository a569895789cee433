"""django-tasks-db: the database backend of Django's tasks API, run by ``manage.py
db_worker`` processes (one task at a time each, polling every ``--interval``)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib import metadata
from typing import Any

from benchmarks.peers import driver

SETTINGS = "benchmarks.peers.django_tasks_db_project.settings"


class DjangoTasksDbPeer(driver.Peer):
    """django-tasks-db on PostgreSQL."""

    def __init__(self, options: argparse.Namespace) -> None:
        super().__init__(options)
        driver.export_postgres(options)
        os.environ["DJANGO_SETTINGS_MODULE"] = SETTINGS
        import django

        django.setup()
        from django.db import connection
        from django_tasks_db.models import DBTaskResult

        from benchmarks.peers.django_tasks_db_project import tasks

        self.connection = connection
        self.model = DBTaskResult
        self.tasks = tasks

    def setup(self) -> None:
        from django.core.management import call_command

        call_command("migrate", verbosity=0, interactive=False)

    def facts(self) -> dict[str, Any]:
        names = ("django-tasks-db", "django-tasks", "Django", "psycopg")
        return {"versions": {name: metadata.version(name) for name in names}}

    def reset(self) -> None:
        with self.connection.cursor() as cursor:
            cursor.execute(f"TRUNCATE {self.model._meta.db_table}")

    def enqueue_one(self, n: int) -> None:
        self.tasks.noop.enqueue(n=n)

    def enqueue_bulk(self, count: int) -> None:
        """No batch API: ``count`` ``enqueue()`` calls in one transaction."""
        from django.db import transaction

        with transaction.atomic():
            for n in range(count):
                self.tasks.noop.enqueue(n=n)

    def check_count(self, count: int) -> None:
        if (found := self.model.objects.count()) != count:
            raise RuntimeError(f"{found} tasks queued, not {count}")

    def before_drain(self) -> None:
        with self.connection.cursor() as cursor:
            cursor.execute(f"ANALYZE {self.model._meta.db_table}")

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
