"""The Procrastinate app the driver defers to and ``procrastinate worker`` runs.

The database comes from the ``PEERS_PG_*`` variables (see ``driver.export_postgres``).
"""

from __future__ import annotations

import os
import time

from procrastinate import App, PsycopgConnector

from benchmarks.peers.driver import DEFAULT_CONCURRENCY, postgres_conninfo

#: Connections per worker's pool: one per concurrent job, one for LISTEN, one to fetch,
#: so that no job waits for a connection (psycopg_pool's default is 4).
POOL_SIZE = int(os.environ.get("PEERS_CONCURRENCY", DEFAULT_CONCURRENCY)) + 2

app = App(connector=PsycopgConnector(conninfo=postgres_conninfo(), min_size=1, max_size=POOL_SIZE))


@app.task(name="noop", queue="default")
async def noop(n: int = 0) -> None:
    """Does nothing. ``async``: Procrastinate runs a sync task in a thread, an async one
    on its event loop, the cheaper way for a job without I/O."""


@app.task(name="probe", queue="default")
async def probe(n: int = 0) -> None:
    """Records when it started; Procrastinate keeps no return value, so a side table."""
    started = time.time()
    await app.connector.execute_query_async(
        "INSERT INTO peers_probe (n, started) VALUES (%(n)s, %(started)s)", n=n, started=started
    )
