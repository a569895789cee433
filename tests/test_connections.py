"""Worker threads keep healthy connections between jobs and drop broken ones."""

from __future__ import annotations

import pytest
from django.db import DatabaseError, connection, connections

from durable_jobs.db.upkeep import refresh_thread_connections

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_healthy_connection_is_kept_between_jobs_even_with_conn_max_age_0() -> None:
    assert connection.settings_dict["CONN_MAX_AGE"] == 0
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    raw = connection.connection
    refresh_thread_connections()
    assert connection.connection is raw


def test_a_connection_broken_by_the_server_is_closed_and_replaced(vendor) -> None:
    if vendor == "sqlite":
        pytest.skip("needs a server that can end a session (SQLite is a file)")
    own_id, kill = {
        "postgresql": ("SELECT pg_backend_pid()", "SELECT pg_terminate_backend({})"),
        "mysql": ("SELECT CONNECTION_ID()", "KILL CONNECTION {}"),
    }[vendor]
    with connection.cursor() as cursor:
        cursor.execute(own_id)
        pid = int(cursor.fetchone()[0])
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute(kill.format(pid))
    finally:
        other.close()
    with pytest.raises(DatabaseError), connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    refresh_thread_connections()
    assert connection.connection is None  # closed; the next query reconnects
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)
