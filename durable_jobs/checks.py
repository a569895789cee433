"""System checks: misconfiguration fails ``manage.py check``, not a worker at 3 a.m.

Each area checks what it knows, here only collected: the settings
(:func:`durable_jobs.conf.check`), the database (:func:`durable_jobs.db.check`), the
handlers' queues (:func:`durable_jobs.registry.check`), the declared schedules
(:func:`durable_jobs.schedules.definitions.check`) and the client boundary
(:func:`durable_jobs.http.checks.check`). IDs are stable; each is documented with its fix
in ``docs/checks.rst``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.core.checks import CheckMessage, Tags, register

from durable_jobs import conf, db, registry
from durable_jobs.http import checks as http_checks
from durable_jobs.schedules import definitions


@register()
def check_settings(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    return conf.check()


@register()
def check_databases(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    return db.check()


@register(Tags.database)
def check_database_server(
    app_configs: Sequence[AppConfig] | None = None,
    databases: Sequence[str] | None = None,
    **kwargs: Any,
) -> list[CheckMessage]:
    # A database check, run by migrate and `check --database`: it connects to the server.
    if not databases or db.job_db_alias() not in databases:
        return []
    return db.check(server=True)


@register()
def check_handler_queues(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    return registry.check()


@register()
def check_declared_schedules(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    return definitions.check()


@register()
def check_requestable_handlers(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    return http_checks.check()
