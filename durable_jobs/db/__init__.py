"""Per-database SQL, chosen once per connection from ``connection.vendor``.

Everything that depends on the database engine lives in this package: the claim
query, the idempotent insert, wake-ups, and transaction modes. The rest of the
package talks to a :class:`~durable_jobs.db.base.Backend`.
"""

from __future__ import annotations

from django.db import connections, router

from durable_jobs.db.base import Backend

SUPPORTED_VENDORS = ("postgresql", "sqlite")


def job_db_alias() -> str:
    from durable_jobs.models import Job

    return router.db_for_write(Job) or "default"


def backend_for(using: str | None = None) -> Backend:
    alias = using or job_db_alias()
    connection = connections[alias]
    vendor = connection.vendor
    if vendor == "postgresql":
        from durable_jobs.db.postgresql import PostgreSQLBackend

        return PostgreSQLBackend(alias)
    if vendor == "sqlite":
        from durable_jobs.db.sqlite import SQLiteBackend

        return SQLiteBackend(alias)
    raise NotImplementedError(
        f"durable_jobs does not support the {vendor!r} database yet; use PostgreSQL or SQLite."
    )
