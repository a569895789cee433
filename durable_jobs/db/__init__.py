"""The database engines: everything that depends on the database, behind one contract.

:func:`engine_for` gives the :class:`~durable_jobs.db.engine.Engine` of an alias, one
complete module per database (``postgresql``, ``sqlite``, and ``mysql`` for MySQL and
MariaDB). Internal: nothing in this package is public API.
"""

from __future__ import annotations

from django.core.checks import CheckMessage, Error
from django.db import connections, router

from durable_jobs.db.engine import Engine
from durable_jobs.db.mysql import MySQLEngine
from durable_jobs.db.postgresql import PostgreSQLEngine
from durable_jobs.db.sqlite import SQLiteEngine
from durable_jobs.models import Job

#: ``connection.vendor`` -> its engine.
ENGINES: dict[str, type[Engine]] = {
    engine.vendor: engine for engine in (PostgreSQLEngine, SQLiteEngine, MySQLEngine)
}
SUPPORTED_VENDORS = tuple(ENGINES)

_engines: dict[tuple[str, str], Engine] = {}


def job_db_alias() -> str:
    """The alias Django's router picks for writing jobs."""
    return router.db_for_write(Job) or "default"


def engine_for(using: str | None = None) -> Engine:
    """The engine of ``using`` (default: :func:`job_db_alias`)."""
    alias = using or job_db_alias()
    vendor = connections[alias].vendor
    engine = _engines.get((alias, vendor))
    if engine is None:
        try:
            engine_class = ENGINES[vendor]
        except KeyError:
            raise NotImplementedError(
                f"durable_jobs does not support the {vendor!r} database yet; use PostgreSQL, "
                "SQLite, MariaDB or MySQL."
            ) from None
        engine = _engines[(alias, vendor)] = engine_class(alias)
    return engine


def check(*, server: bool = False) -> list[CheckMessage]:
    """The database checks: the jobs' database is one durable_jobs supports, and is
    configured for it (each engine's own checks); with ``server``, instead, what the server
    says of itself (its version, its character set), which needs a connection."""
    alias = job_db_alias()
    if alias not in connections.settings:
        return []
    vendor = connections[alias].vendor
    if vendor not in ENGINES:
        return (
            []
            if server
            else [
                Error(
                    f"Database {alias!r} uses {vendor}, which durable_jobs does not support yet.",
                    hint="Use PostgreSQL, SQLite, MariaDB 10.6+ or MySQL 8.0.4+ for the database "
                    "that holds the jobs.",
                    id="durable_jobs.E007",
                )
            ]
        )
    return engine_for(alias).check(server=server)
