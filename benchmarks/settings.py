"""Django settings for ``benchmarks/run.py`` and the ``runworker`` processes it starts.

The database comes from environment variables that ``run.py`` sets:

``DURABLE_JOBS_BENCH_DB``
    ``sqlite`` or ``postgres``.
``DURABLE_JOBS_BENCH_SQLITE_PATH``
    The SQLite file (WAL mode, ``transaction_mode`` IMMEDIATE).
``DURABLE_JOBS_BENCH_PG_NAME`` / ``_PG_HOST`` / ``_PG_PORT`` / ``_PG_USER`` / ``_PG_PASSWORD``
    The PostgreSQL database.
``DURABLE_JOBS_BENCH_POLL_INTERVAL``
    ``DURABLE_JOBS["POLL_INTERVAL"]`` (default 1.0, the library's default).
``DURABLE_JOBS_BENCH_CONCURRENCY``
    Concurrency of the ``default`` queue (default 10, the library's default).
"""

import os

SECRET_KEY = "durable-jobs-benchmarks"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

_vendor = os.environ.get("DURABLE_JOBS_BENCH_DB", "sqlite")
if _vendor == "postgres":
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": os.environ.get("DURABLE_JOBS_BENCH_PG_NAME", "durable_jobs_bench"),
            "HOST": os.environ.get("DURABLE_JOBS_BENCH_PG_HOST", "127.0.0.1"),
            "PORT": os.environ.get("DURABLE_JOBS_BENCH_PG_PORT", "5432"),
            "USER": os.environ.get("DURABLE_JOBS_BENCH_PG_USER", "postgres"),
            "PASSWORD": os.environ.get("DURABLE_JOBS_BENCH_PG_PASSWORD", ""),
        }
    }
elif _vendor == "sqlite":
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": os.environ.get("DURABLE_JOBS_BENCH_SQLITE_PATH", "durable_jobs_bench.sqlite3"),
            # durable_jobs puts the file in WAL mode (DURABLE_JOBS["SQLITE_WAL"], on by default).
            "OPTIONS": {"transaction_mode": "IMMEDIATE"},
        }
    }
else:
    raise ValueError(f"DURABLE_JOBS_BENCH_DB must be sqlite or postgres, not {_vendor!r}")

INSTALLED_APPS = [
    "durable_jobs",
    "benchmarks.benchapp",
]

DURABLE_JOBS = {
    "QUEUES": {
        "default": {"concurrency": int(os.environ.get("DURABLE_JOBS_BENCH_CONCURRENCY", "10"))}
    },
    "POLL_INTERVAL": float(os.environ.get("DURABLE_JOBS_BENCH_POLL_INTERVAL", "1.0")),
    # Nothing is pruned during a run.
    "PRUNE_AFTER_DAYS": None,
}

# Lifecycle events ("enqueued", "completed", ...) are logged at INFO; a benchmark keeps
# only warnings so that it measures the queue rather than log formatting and a terminal.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "loggers": {"durable_jobs": {"handlers": ["stderr"], "level": "WARNING"}},
}
