"""Django settings for ``benchmarks/run.py`` and the ``runworker`` processes it starts.

The database comes from environment variables that ``run.py`` sets:

``DURABLE_JOBS_BENCH_DB``
    ``sqlite``, ``postgres`` or ``mysql`` (MySQL 8 or MariaDB).
``DURABLE_JOBS_BENCH_SQLITE_PATH``
    The SQLite file (WAL mode, ``transaction_mode`` IMMEDIATE).
``DURABLE_JOBS_BENCH_PG_NAME`` / ``_PG_HOST`` / ``_PG_PORT`` / ``_PG_USER`` / ``_PG_PASSWORD``
    The PostgreSQL database.
``DURABLE_JOBS_BENCH_MY_NAME`` / ``_MY_HOST`` / ``_MY_PORT`` / ``_MY_USER``
    The MySQL or MariaDB database (``MYSQL_PWD`` is the password, if any).
``DURABLE_JOBS_BENCH_POLL_INTERVAL``
    ``DURABLE_JOBS["POLL_INTERVAL"]`` (default 1.0, the library's default).
``DURABLE_JOBS_BENCH_CONCURRENCY``
    Concurrency of the ``default`` queue (default 10, the library's default).
``DURABLE_JOBS_BENCH_EXECUTOR`` / ``DURABLE_JOBS_BENCH_MAX_JOBS_PER_CHILD``
    The ``default`` queue's executor (``thread``, the default, or ``process``) and, for
    ``process``, its ``max_jobs_per_child`` (``benchmarks/processes.py`` sets them).
``DURABLE_JOBS_BENCH_SYNCHRONOUS_COMMIT``
    ``on`` (the default) or ``off``: ``DURABLE_JOBS["SYNCHRONOUS_COMMIT"]``.
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
elif _vendor == "mysql":
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.mysql",
            "NAME": os.environ.get("DURABLE_JOBS_BENCH_MY_NAME", "durable_jobs_bench"),
            "HOST": os.environ.get("DURABLE_JOBS_BENCH_MY_HOST", "127.0.0.1"),
            "PORT": os.environ.get("DURABLE_JOBS_BENCH_MY_PORT", "3306"),
            "USER": os.environ.get("DURABLE_JOBS_BENCH_MY_USER", "root"),
            "PASSWORD": os.environ.get("MYSQL_PWD", ""),
            # utf8mb4, as durable_jobs' check E022 asks; Django's default isolation level
            # on MySQL (READ COMMITTED) is kept.
            "OPTIONS": {"charset": "utf8mb4"},
        }
    }
else:
    raise ValueError(f"DURABLE_JOBS_BENCH_DB must be sqlite, postgres or mysql, not {_vendor!r}")

INSTALLED_APPS = [
    "durable_jobs",
    "benchmarks.benchapp",
]

_default_queue: dict[str, object] = {
    "concurrency": int(os.environ.get("DURABLE_JOBS_BENCH_CONCURRENCY", "10")),
    "executor": os.environ.get("DURABLE_JOBS_BENCH_EXECUTOR", "thread"),
}
if os.environ.get("DURABLE_JOBS_BENCH_MAX_JOBS_PER_CHILD"):
    _default_queue["max_jobs_per_child"] = int(os.environ["DURABLE_JOBS_BENCH_MAX_JOBS_PER_CHILD"])

DURABLE_JOBS = {
    "QUEUES": {"default": _default_queue},
    "POLL_INTERVAL": float(os.environ.get("DURABLE_JOBS_BENCH_POLL_INTERVAL", "1.0")),
    # Nothing is pruned during a run.
    "PRUNE_AFTER_DAYS": None,
    "SYNCHRONOUS_COMMIT": os.environ.get("DURABLE_JOBS_BENCH_SYNCHRONOUS_COMMIT", "on") == "on",
}

# Lifecycle events ("enqueued", "completed", ...) are logged at INFO; a benchmark keeps
# only warnings so that it measures the queue rather than log formatting and a terminal.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "loggers": {"durable_jobs": {"handlers": ["stderr"], "level": "WARNING"}},
}
