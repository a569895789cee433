"""Settings of the Django-Q2 project: PostgreSQL from the ``PEERS_PG_*`` variables (or
MySQL/MariaDB from ``PEERS_MY_*`` when ``PEERS_DATABASE`` is ``mysql``), and
Django-Q2's ORM broker on the same database, so it is compared on the database the
other systems use. ``PEERS_Q_WORKERS`` sets the size of the cluster."""

import os

from benchmarks.peers.driver import django_database

SECRET_KEY = "peers-benchmark"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = {"default": django_database()}
INSTALLED_APPS = ["django_q", "benchmarks.peers.django_q2_project"]
Q_CLUSTER = {
    "name": "peers",
    # Worker processes in the cluster; each runs one task at a time.
    "workers": int(os.environ.get("PEERS_Q_WORKERS", "1")),
    "orm": "default",
    # Keep every result (the default keeps the last 250), so finished tasks can be counted.
    "save_limit": 0,
    "timeout": 60,
    "retry": 120,
    "log_level": "WARNING",
}
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["stderr"], "level": "WARNING"},
}
