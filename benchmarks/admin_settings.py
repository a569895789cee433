"""Django settings (and URLconf) for ``benchmarks/admin_pages.py``: the admin over the
benchmark database.

The database is chosen by the same ``DURABLE_JOBS_BENCH_*`` variables as
``benchmarks/settings.py`` (whose ``DATABASES`` this reuses). On top of it: the apps,
middleware and templates the admin needs, configured as in production (``DEBUG`` off,
so templates come from the cached loader and no query log is kept unless a benchmark
asks for one).
"""

from typing import Any

from benchmarks.settings import DATABASES, LOGGING, SECRET_KEY

__all__ = ["DATABASES", "LOGGING", "SECRET_KEY"]

DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# Django's test Client sends requests for this host.
ALLOWED_HOSTS = ["testserver"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "durable_jobs",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

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

STATIC_URL = "/static/"

# The queues of the generated data, so that the admin and the system checks see them as
# declared (as a project running these queues would).
DURABLE_JOBS = {
    "QUEUES": {
        name: {"concurrency": 10}
        for name in ("default", "emails", "webhooks", "reports", "billing")
    },
    "PRUNE_AFTER_DAYS": None,
}

# This module is its own URLconf, so the benchmark needs no third file. ``urlpatterns`` is
# built on first access (PEP 562): importing the admin here, while settings load, would
# run before the app registry is ready.
ROOT_URLCONF = "benchmarks.admin_settings"


def __getattr__(name: str) -> Any:
    if name == "urlpatterns":
        from django.contrib import admin
        from django.urls import path

        return [path("admin/", admin.site.urls)]
    raise AttributeError(name)
