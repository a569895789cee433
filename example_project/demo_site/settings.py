"""Settings for the durable_jobs example project.

Configured from the environment (or a ``.env`` file beside ``manage.py``) with
django-environ. Every value has a development default, so ``python manage.py
migrate && python manage.py demo`` works with nothing set:

    DATABASE_URL  default: a SQLite file, example_project/db.sqlite3
                  e.g. postgres://postgres@127.0.0.1:5432/durable_jobs_example
    DEBUG         default: true
    SECRET_KEY    default: an insecure development key
    LOG_LEVEL     default: INFO (level of the durable_jobs and shop loggers)
"""

from pathlib import Path

import django
import environ

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env(
    DEBUG=(bool, True),
    SECRET_KEY=(str, "django-insecure-durable-jobs-example-only"),
    ALLOWED_HOSTS=(list, ["localhost", "127.0.0.1"]),
    LOG_LEVEL=(str, "INFO"),
)
if (BASE_DIR / ".env").exists():
    env.read_env(BASE_DIR / ".env")

DEBUG = env("DEBUG")
SECRET_KEY = env("SECRET_KEY")
ALLOWED_HOSTS = env("ALLOWED_HOSTS")

DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}")}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Take SQLite's write lock when a transaction begins, so an enqueue inside
    # transaction.atomic() waits for a busy worker instead of failing with
    # "database is locked" (system check durable_jobs.W001).
    DATABASES["default"].setdefault("OPTIONS", {})["transaction_mode"] = "IMMEDIATE"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "durable_jobs",
    "shop",
    "catalog",
]
if django.VERSION < (6, 0):
    INSTALLED_APPS.append("django_tasks")  # Django's Tasks framework, from the backport

# Django's Tasks framework runs on durable_jobs: `@task` code (shop/tasks.py) gets durable
# jobs, retries and leases.
TASKS = {
    "default": {
        "BACKEND": "durable_jobs.backends.tasks.DurableJobsBackend",
        "QUEUES": [],  # any queue name
        "OPTIONS": {"max_retries": 3, "backoff": [1, 5, 30]},
    }
}

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "demo_site.urls"
WSGI_APPLICATION = "demo_site.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True  # durable_jobs requires it (system check durable_jobs.E006)
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

DURABLE_JOBS = {
    # Queue name -> options; `runworker` without --queues serves all of them.
    "QUEUES": {
        "default": {"concurrency": 4},
        "emails": {"concurrency": 2},
        "imports": {"concurrency": 1},
        # At most 4 job starts per sliding second across every worker (a global limit).
        "partners": {"concurrency": 2, "rate": "4/1s"},
    },
    # Durable schedules, synced to the Schedule table when a worker starts (or by
    # `manage.py schedules sync`). Each worker runs the heartbeat that enqueues them.
    "SCHEDULES": {
        "ott-release-refresh": {
            "cron": "0 0 * * 0",  # Sundays at midnight, Toronto time (DST handled)
            "timezone": "America/Toronto",
            "job": "catalog.ott_release_refresh",
            "queue": "imports",
            "payload": {
                "countries": ["CA", "US"],
                "release_window": "weekly",
                "requested_horizon": 7,
            },
        },
        "price-snapshot": {"interval": "1s", "job": "catalog.price_snapshot"},
    },
    # Poll four times a second so the demo's retries (half a second apart) and its delayed
    # job start promptly. (On PostgreSQL, LISTEN/NOTIFY wakes idle workers at once anyway.)
    "POLL_INTERVAL": 0.25,
    "SHUTDOWN_GRACE_SECONDS": 10,
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)-7s %(name)s: %(message)s"},
        # One JSON object per line, with job_id, queue, name, attempt, state, ...
        "json": {"()": "durable_jobs.logging.JSONFormatter"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "durable_jobs": {"handlers": ["console"], "level": env("LOG_LEVEL")},
        "shop": {"handlers": ["console"], "level": env("LOG_LEVEL")},
    },
}
