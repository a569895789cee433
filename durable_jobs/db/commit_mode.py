"""How the worker's own transactions commit: durably (the default), or without waiting
for PostgreSQL's WAL flush (``DURABLE_JOBS["SYNCHRONOUS_COMMIT"] = False``).

Where a flush is slow (network disks) it is a large part of every loop pass
(``benchmarks/passes.py`` measures both modes). Without the wait, a database crash (not
a worker crash, not a restart) may lose the last fraction of a second of the worker's
commits: a lost claim runs its job again, still at least once, and the run that was
under way may leave no attempt row; a lost outcome leaves its job leased, to be
rescued. Enqueues are never relaxed: they commit in the project's own transactions.

``SET LOCAL``, not a session setting: it ends with the transaction, so it never leaks
to other clients through a pooler in transaction mode (PgBouncer), nor to anything
else the worker's connection runs. A loop pass that is one statement in autocommit
carries the same setting inside that statement instead (``set_config(..., true)``, see
:data:`durable_jobs.db.postgresql_sql.RELAX_JOIN`), so that relaxing it adds no round trip.
"""

from __future__ import annotations

from durable_jobs.conf import get_settings
from durable_jobs.db.engine import Engine


def relax_commit(engine: Engine) -> None:
    """As the first statement of one of the worker's transactions: commit it without
    waiting for the flush, if so configured (PostgreSQL only; elsewhere nothing)."""
    if engine.vendor != "postgresql" or get_settings().synchronous_commit:
        return
    with engine.connection.cursor() as cursor:
        cursor.execute("SET LOCAL synchronous_commit = off")
