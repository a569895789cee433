"""django-tasks-db (the database backend of Django's tasks API), on its own database:
PostgreSQL, or MariaDB/MySQL."""

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


class DjangoTasksDbMysql(DjangoTasksDb):
    """The same project and driver, with ``DATABASES`` on the MariaDB/MySQL server."""

    key = "django_tasks_db_mysql"
    label = "django-tasks-db (MariaDB)"
    venv = "django_tasks_db_mysql"
    requirements = (
        "django-tasks-db[compat]==0.13.0",
        "django-tasks==0.12.0",
        "Django==5.2.19",
        "mysqlclient==2.3.2",  # built from source: needs libmariadb-dev (or libmysqlclient-dev)
    )
    uses_postgres = False
    uses_mysql = True
