"""Settings of the django-tasks-db project (PostgreSQL from the ``PEERS_PG_*`` variables, or
MySQL/MariaDB from ``PEERS_MY_*`` when ``PEERS_DATABASE`` is ``mysql``).

On Django 5.2 the ``django.tasks`` API comes from the ``django-tasks`` package (the
``compat`` extra of django-tasks-db), so the project runs on the same Django as
durable_jobs' benchmark.
"""

from benchmarks.peers.driver import django_database

SECRET_KEY = "peers-benchmark"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
DATABASES = {"default": django_database()}
INSTALLED_APPS = ["django_tasks", "django_tasks_db", "benchmarks.peers.django_tasks_db_project"]
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
# Task lifecycle logging off the hot path, as for durable_jobs (WARNING).
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["stderr"], "level": "WARNING"},
}
