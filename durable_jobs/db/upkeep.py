"""Connection upkeep for long-lived worker threads."""

from __future__ import annotations

import time

from django.db import connections


def refresh_thread_connections(*, verify: bool = False) -> None:
    """Before and after each job: close this thread's connections that are broken or old.

    Like Django's ``close_old_connections``, with one difference: a worker thread keeps
    a healthy connection between jobs even when ``CONN_MAX_AGE`` is 0 (Django's
    default, which closes connections at the end of every request). Reconnecting for
    every job would cost more than most jobs do. A connection is closed when it is
    left outside autocommit, when it errored and no longer answers, or when a
    positive ``CONN_MAX_AGE`` has passed. With ``verify``, a connection that has not
    errored is asked too (one round trip): the worker passes it after it has seen the
    database fail, since a restart breaks idle connections without their knowing.
    """
    for conn in connections.all(initialized_only=True):
        if conn.connection is None or conn.in_atomic_block:
            continue
        # With CONN_HEALTH_CHECKS on, Django checks the connection at the job's first query.
        conn.health_check_done = False  # type: ignore[attr-defined]
        if conn.get_autocommit() != conn.settings_dict["AUTOCOMMIT"]:
            conn.close()
        elif conn.errors_occurred or verify:
            if conn.is_usable():
                conn.errors_occurred = False
            else:
                conn.close()
        elif (
            conn.settings_dict["CONN_MAX_AGE"]
            and conn.close_at is not None
            and time.monotonic() >= conn.close_at
        ):
            conn.close()
