"""Settings for durable_jobs' own test suite.

The database comes from ``DATABASE_URL`` (default: a SQLite file, so that worker
subprocesses share it with the test process), e.g.
``DATABASE_URL=postgres://postgres@127.0.0.1:5432/durable_jobs``.
Worker subprocesses started by the tests set ``DURABLE_JOBS_TEST_DB_NAME`` to
the test database's name.
"""

import hashlib
import json
import os
import tempfile
from pathlib import Path

import django
import environ

env = environ.Env()

BASE_DIR = Path(__file__).resolve().parent
# One file per checkout, so two checkouts on one machine never share a test database.
_checkout = hashlib.sha1(str(BASE_DIR).encode()).hexdigest()[:8]
SQLITE_PATH = Path(tempfile.gettempdir()) / f"durable_jobs_tests_{_checkout}.sqlite3"

SECRET_KEY = "durable-jobs-tests"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
ALLOWED_HOSTS = ["*"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{SQLITE_PATH}")}
_db = DATABASES["default"]
if _db["ENGINE"].endswith("sqlite3"):
    _db.setdefault("OPTIONS", {})["transaction_mode"] = "IMMEDIATE"
    # Beside the database file: tox's environments (each with its own DATABASE_URL) and
    # a checkout's own runs never share a test database.
    _name = Path(_db["NAME"])
    _db["TEST"] = {"NAME": str(_name.with_name(_name.stem + "_test.sqlite3"))}
if _db["ENGINE"].endswith("mysql"):
    # Whatever the server's default: the test database holds text as durable_jobs needs.
    _db["TEST"] = {"CHARSET": "utf8mb4", "COLLATION": "utf8mb4_unicode_ci"}
if os.environ.get("DURABLE_JOBS_TEST_DB_NAME"):
    _db["NAME"] = os.environ["DURABLE_JOBS_TEST_DB_NAME"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    # The admin's CSS and JavaScript, served by the browser tests' live server.
    "django.contrib.staticfiles",
    "durable_jobs",
    "tests.testapp",
]
if django.VERSION < (6, 0):
    # Django's Tasks framework, from the backport.
    INSTALLED_APPS.append("django_tasks")

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

ROOT_URLCONF = "tests.urls"
STATIC_URL = "static/"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

DURABLE_JOBS = {
    "QUEUES": {
        "default": {"concurrency": 4},
        "emails": {"concurrency": 2},
        "webhooks": {"concurrency": 3},
    },
    "LEASE_SECONDS": 30,
    "HEARTBEAT_SECONDS": 5,
    "POLL_INTERVAL": 0.2,
    "SHUTDOWN_GRACE_SECONDS": 5,
}

if os.environ.get("DURABLE_JOBS_TEST_PROCESS_QUEUE"):
    # tests/test_process_executor.py: a "processes" queue for runworker subprocesses.
    _queues: dict = DURABLE_JOBS["QUEUES"]  # type: ignore[assignment]
    _queues["processes"] = json.loads(os.environ["DURABLE_JOBS_TEST_PROCESS_QUEUE"])

if os.environ.get("DURABLE_JOBS_TEST_BAD_MIDDLEWARE"):
    # tests/test_health.py: a probe runs without the system checks (this fails E020).
    DURABLE_JOBS["MIDDLEWARE"] = ["tests.no_such_module.middleware"]

if django.VERSION >= (6, 1):
    # Email configuration from Django 6.1 (the topic guide's email tasks send mail).
    MAILERS = {"default": {"BACKEND": "django.core.mail.backends.locmem.EmailBackend"}}

# Django's Tasks framework on durable_jobs (tests/test_tasks_*.py). "other" shows a second
# alias keeping its own name and OPTIONS.
TASKS = {
    "default": {
        "BACKEND": "durable_jobs.backends.tasks.DurableJobsBackend",
        "QUEUES": [],
        "OPTIONS": {"max_retries": 2, "backoff": [0]},
    },
    "other": {
        "BACKEND": "durable_jobs.backends.tasks.DurableJobsBackend",
        "QUEUES": ["default"],
        "OPTIONS": {"max_retries": 0},
    },
    "strict": {
        "BACKEND": "durable_jobs.backends.tasks.DurableJobsBackend",
        "QUEUES": [],
        "OPTIONS": {"max_retries": 0, "timeout": 1},
    },
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"json": {"()": "durable_jobs.logging.JSONFormatter"}},
    "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "json"}},
    "loggers": {
        "durable_jobs": {
            "handlers": ["stderr"],
            "level": os.environ.get("DURABLE_JOBS_LOG_LEVEL", "WARNING"),
        }
    },
}
