"""What a process loads when it starts: only the driver of the database it uses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

# Django set up, the system checks run (they look up the jobs' database engine) and the
# worker imported, as `manage.py runworker` does before its first claim.
STARTUP = """
import io
import sys
import django
django.setup()
from django.core.management import call_command
call_command("check", stdout=io.StringIO())
import durable_jobs.worker.worker
print(sorted(name for name in ("psycopg", "MySQLdb") if name in sys.modules))
"""


def test_a_project_on_sqlite_loads_no_other_database_driver(tmp_path: Path) -> None:
    pytest.importorskip("psycopg")  # installed with the test extra: otherwise nothing to see
    env = dict(os.environ)
    env["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    env["DATABASE_URL"] = f"sqlite:///{tmp_path / 'jobs.sqlite3'}"
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-c", STARTUP],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    # psycopg costs a process about 70 ms to import; a SQLite project never uses it.
    assert done.stdout.strip() == "[]"
