"""django-tasks-db (the database backend of Django's tasks API), on its own database."""

from __future__ import annotations

from benchmarks.peers.base import Adapter


class DjangoTasksDb(Adapter):
    key = "django_tasks_db"
    label = "django-tasks-db"
    venv = "django_tasks_db"
    requirements = (
        "django-tasks-db[compat]==0.13.0",
        "django-tasks==0.12.0",
        "Django==5.2.19",
        "psycopg[binary]==3.3.9",
    )
    driver_module = "benchmarks.peers.django_tasks_db_project.driver"
    workers_note = (
        "`manage.py db_worker` per process: one task at a time (it has no concurrency "
        "setting), polling every second when idle (`--interval 1`, the default)"
    )
    bulk_note = "no batch API: N `enqueue()` calls in one `transaction.atomic()`"
    finish_note = "last `finished_at` of the task results"
