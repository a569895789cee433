"""Django-Q2 with its ORM broker, on its own PostgreSQL (or MariaDB/MySQL) database."""

from __future__ import annotations

from benchmarks.peers.base import Adapter


class DjangoQ2(Adapter):
    key = "django_q2"
    label = "Django-Q2 (ORM broker)"
    venv = "django_q2"
    requirements = ("django-q2==1.11.1", "Django==5.2.19", "psycopg[binary]==3.3.9")
    driver_module = "benchmarks.peers.django_q2_project.driver"
    workers_note = (
        "one `manage.py qcluster` with `workers` = 1 or 2 worker processes, one task at a "
        "time each (no threads), plus its pusher and monitor; ORM broker polled every "
        "0.2 s (the default); every result kept (`save_limit: 0`)"
    )
    bulk_note = "no batch API: N `async_task()` calls in one `transaction.atomic()`"
    finish_note = "last `stopped` of the saved tasks"


class DjangoQ2Mysql(DjangoQ2):
    """The same project and driver, with ``DATABASES`` (and so the ORM broker) on the
    MariaDB/MySQL server."""

    key = "django_q2_mysql"
    label = "Django-Q2 (ORM broker, MariaDB)"
    venv = "django_q2_mysql"
    requirements = (
        "django-q2==1.11.1",
        "Django==5.2.19",
        "mysqlclient==2.3.2",  # built from source: needs libmariadb-dev (or libmysqlclient-dev)
    )
    uses_postgres = False
    uses_mysql = True
