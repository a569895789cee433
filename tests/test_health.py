"""``manage.py jobs health``: exit 0 when the database answers, a worker is live and no
queue lags; exit 1, saying which check failed, otherwise.

Workers are real: a ``Worker`` thread, or a ``runworker`` subprocess. Stale nodes are
real rows whose heartbeat is set back in time, and an unreachable database is a real
one: a closed port, a directory that does not exist, a database without the tables.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test import RequestFactory
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from durable_jobs import health
from durable_jobs.flow import queues
from durable_jobs.models import Job, Node
from tests.conftest import MANAGE_PY, WorkerProcesses, wait_for, wait_until
from tests.test_docs_ports import DOCS, code_blocks
from tests.testapp import jobs

#: LEASE_SECONDS in tests/settings.py: a node is stale this long after its heartbeat.
STALE_AFTER = 30


def health_command(*args: str) -> tuple[int, str]:
    """Run ``jobs health args`` as ``call_command`` does: its exit status and output."""
    out = StringIO()
    try:
        call_command("jobs", "health", *args, stdout=out)
    except SystemExit as exited:
        code = exited.code
    else:
        code = 0
    assert code in (0, 1), code  # the only statuses it exits with itself
    return int(code), out.getvalue()


def node(name: str, *, silent_for: float = 0, stopping: bool = False) -> Node:
    """A node row; ``silent_for`` seconds since its last heartbeat."""
    row = Node.objects.create(name=name, pid=4242, queues={"default": 1}, stopping=stopping)
    beat = timezone.now() - timedelta(seconds=silent_for)
    Node.objects.filter(pk=row.pk).update(last_heartbeat_at=beat)
    return row


def waiting_since(seconds: float, queue: str = "emails") -> Job:
    """A queued job that has been available for ``seconds``."""
    job = jobs.add.using(queue=queue).delay(a=1)
    Job.objects.filter(pk=job.pk).update(available_at=timezone.now() - timedelta(seconds=seconds))
    return job


def free_port() -> int:
    """A local TCP port nothing listens on (bound, then closed)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def subprocess_env(tmp_path: Path, database_url: str | None = None) -> dict[str, str]:
    """A subprocess's environment: this test's database, or ``database_url``."""
    env = WorkerProcesses(tmp_path).env()
    env["DURABLE_JOBS_LOG_LEVEL"] = "WARNING"
    if database_url is not None:
        env["DATABASE_URL"] = database_url
        del env["DURABLE_JOBS_TEST_DB_NAME"]
    return env


def manage_py(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``python manage.py args`` in a project directory, as an operator or a probe runs it."""
    (tmp_path / "manage.py").write_text(MANAGE_PY)
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )


# -- workers ---------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_running_worker_thread_makes_it_healthy(durable_worker: Callable[..., Any]) -> None:
    worker = durable_worker("default:1", name="worker-1")
    wait_for(lambda: Node.objects.filter(name="worker-1").exists())

    code, out = health_command()

    assert code == 0, out
    lines = out.splitlines()
    assert re.fullmatch(
        r"ok +database: 'default' \((sqlite|postgresql|mysql)\) answered in [\d.]+ ms", lines[0]
    )
    assert lines[1:] == ["ok      nodes: 1 live (worker-1)", "healthy: 2 checks passed"]

    code, out = health_command("--node", "worker-1")
    assert code == 0, out
    assert re.search(
        r"^ok +node worker-1: last heartbeat \d+ s ago \(stale after 30 s\)$", out, re.M
    )

    worker.stop()  # a clean stop deletes the node
    wait_for(lambda: not Node.objects.filter(name="worker-1").exists())
    code, out = health_command()
    assert code == 1
    assert "failed  nodes: no node is registered: is a worker running?" in out
    assert out.splitlines()[-1] == "unhealthy: 1 of 2 checks failed (nodes)"


@pytest.mark.django_db(transaction=True)
def test_a_runworker_process_is_healthy_until_it_stops(
    worker_processes: WorkerProcesses, tmp_path: Path
) -> None:
    proc = worker_processes.start("--queues", "default:1", "--name", "shop-worker-1")
    wait_until(
        lambda: Node.objects.filter(name="shop-worker-1").exists(),
        worker_processes,
        timeout=60,
        alive=[proc],
        what="the worker's node registered",
    )
    env = subprocess_env(tmp_path)

    probe = manage_py(tmp_path, env, "jobs", "health", "--node", "shop-worker-1")
    assert probe.returncode == 0, probe.stdout + probe.stderr
    assert re.search(r"^ok +node shop-worker-1: last heartbeat \d+ s ago", probe.stdout, re.M)

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0, worker_processes.log(proc)
    probe = manage_py(tmp_path, env, "jobs", "health", "--node", "shop-worker-1")
    assert probe.returncode == 1, probe.stdout + probe.stderr
    assert "failed  node shop-worker-1: no such node is registered (none is)" in probe.stdout
    assert probe.stderr == ""


# -- nodes -----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_only_stale_nodes_is_unhealthy() -> None:
    node("worker-3", silent_for=95)
    node("worker-4", silent_for=400)

    code, out = health_command()

    assert code == 1
    assert (
        "failed  nodes: no live node: 2 stale (worker-3: last heartbeat 95 s ago, worker-4: "
        "last heartbeat 400 s ago; stale after 30 s)"
    ) in out


@pytest.mark.django_db
def test_one_live_node_among_stale_ones_is_enough() -> None:
    node("worker-3", silent_for=95)
    node("worker-5", silent_for=2)

    code, out = health_command()

    assert code == 0, out
    assert "ok      nodes: 1 live (worker-5); 1 stale (worker-3: last heartbeat 95 s ago" in out


@pytest.mark.django_db
def test_a_stopping_node_does_not_count_as_live_but_passes_by_name() -> None:
    node("worker-6", silent_for=1, stopping=True)

    code, out = health_command()
    assert code == 1
    assert "failed  nodes: no live node: 1 stopping (worker-6)" in out

    code, out = health_command("--node", "worker-6")
    assert code == 0, out
    assert "; stopping: finishing its running jobs" in out


@pytest.mark.django_db
def test_a_named_node_found_stale_or_unknown() -> None:
    node("worker-2", silent_for=3)
    node("worker-3", silent_for=95)

    code, out = health_command("--node", "worker-2")
    assert code == 0, out
    # --node replaces the check of the cluster: only this node matters.
    assert [line.split(":")[0] for line in out.splitlines()[:-1]] == [
        "ok      database",
        "ok      node worker-2",
    ]

    code, out = health_command("--node", "worker-3")
    assert code == 1
    assert "failed  node worker-3: last heartbeat 95 s ago (stale after 30 s)" in out

    code, out = health_command("--node", "worker-9")
    assert code == 1
    assert (
        "failed  node worker-9: no such node is registered (registered: worker-2, worker-3)"
    ) in out

    code, out = health_command("--node", "$(POD_NAME)")
    assert code == 1
    assert "looks like a variable reference that was not expanded" in out


@pytest.mark.django_db
def test_the_heartbeat_rule_is_the_lease() -> None:
    now = timezone.now()
    Node.objects.create(name="edge", pid=1, last_heartbeat_at=now - timedelta(seconds=STALE_AFTER))

    assert health.run_checks(node="edge", now=now).ok
    assert not health.run_checks(node="edge", now=now + timedelta(seconds=0.001)).ok


# -- queue lag -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_max_lag_fails_a_queue_whose_oldest_job_waited_longer() -> None:
    node("worker-1")
    waiting_since(340, "emails")
    waiting_since(5, "default")
    jobs.add.using(queue="webhooks", run_in=timedelta(hours=1)).delay(a=1)  # not due: no lag

    code, out = health_command("--max-lag", "300")

    assert code == 1
    assert re.search(
        r"^failed  queue emails: lag 34\d s exceeds the maximum lag of 300 s$", out, re.M
    )
    assert re.search(r"^ok +queue default: lag \d s, within the maximum lag of 300 s$", out, re.M)
    assert "ok      queue webhooks: no job is waiting to start" in out
    assert out.splitlines()[-1] == "unhealthy: 1 of 5 checks failed (queue emails)"

    code, out = health_command("--max-lag", "600")
    assert code == 0, out
    assert re.search(r"^ok +queue emails: lag 34\d s, within the maximum lag of 600 s$", out, re.M)

    # Without --max-lag, lag is not checked at all.
    code, out = health_command()
    assert code == 0, out
    assert "queue" not in out


@pytest.mark.django_db
def test_a_lag_just_past_the_maximum_does_not_read_as_the_maximum() -> None:
    node("worker-1")
    job = waiting_since(0, "emails")
    job.refresh_from_db()
    now = job.available_at + timedelta(seconds=300.4)

    report = health.run_checks(max_lag=300, now=now)

    (emails,) = [c for c in report.checks if c.name == "queue emails"]
    assert (emails.ok, emails.detail) == (False, "lag 300.400 s exceeds the maximum lag of 300 s")
    (emails,) = [
        c for c in health.run_checks(max_lag=301, now=now).checks if c.name == "queue emails"
    ]
    assert (emails.ok, emails.detail) == (True, "lag 300 s, within the maximum lag of 301 s")


@pytest.mark.django_db
def test_a_paused_queue_is_not_held_to_the_maximum_lag() -> None:
    node("worker-1")
    waiting_since(900, "emails")
    queues.pause("emails")

    code, out = health_command("--max-lag", "60")

    assert code == 0, out
    assert re.search(r"^ok +queue emails: paused, so its lag \(90\d s\) is not held", out, re.M)


@pytest.mark.django_db
def test_json_has_every_check_with_its_figures() -> None:
    node("worker-1", silent_for=2)
    node("worker-3", silent_for=95)
    waiting_since(340, "emails")

    code, out = health_command("--max-lag", "300", "--json")

    assert code == 1
    data = json.loads(out)
    assert set(data) == {"ok", "checks"}
    assert data["ok"] is False
    checks = {c["name"]: c for c in data["checks"]}
    assert list(checks) == ["database", "nodes", "queue default", "queue emails", "queue webhooks"]
    for check in data["checks"]:
        assert {"name", "ok", "detail"} <= set(check)
        assert isinstance(check["ok"], bool)
        assert isinstance(check["detail"], str)
    assert checks["database"]["ok"] is True
    assert checks["database"]["alias"] == "default"
    assert checks["database"]["milliseconds"] >= 0
    assert checks["nodes"] == {
        "name": "nodes",
        "ok": True,
        "detail": checks["nodes"]["detail"],
        "live": ["worker-1"],
        "stopping": [],
        "stale": ["worker-3"],
        "stale_after_seconds": STALE_AFTER,
    }
    emails = checks["queue emails"]
    assert emails["ok"] is False
    assert 340 <= emails["lag_seconds"] < 400
    assert (emails["max_lag_seconds"], emails["paused"]) == (300, False)
    assert checks["queue default"]["lag_seconds"] is None

    code, out = health_command("--node", "worker-3", "--json")
    (named,) = [c for c in json.loads(out)["checks"] if c["name"] == "node worker-3"]
    assert named["ok"] is False
    assert 95 <= named["seconds_since_heartbeat"] < 150
    assert (named["stale_after_seconds"], named["stopping"]) == (STALE_AFTER, False)
    assert named["last_heartbeat_at"].endswith("+00:00")


@pytest.mark.django_db
def test_the_checks_read_a_bounded_number_of_rows() -> None:
    """No count of the job table: one LIMITed read per queue, however many jobs wait."""
    node("worker-1")
    Job.objects.bulk_create(
        Job(name="tests.add", queue="emails", payload={"a": i}) for i in range(500)
    )

    with CaptureQueriesContext(connection) as queries:
        assert health.run_checks(max_lag=3600).ok

    job_reads = [q["sql"] for q in queries.captured_queries if "durable_jobs_job" in q["sql"]]
    assert len(job_reads) == 3  # one per queue: default, emails, webhooks
    for sql in job_reads:
        assert "COUNT(" not in sql.upper()
        assert "LIMIT 1" in sql.upper()


# -- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["-5", "abc", "nan", "inf", "1e40"])
def test_a_bad_max_lag_is_a_usage_error(value: str) -> None:
    with pytest.raises(
        CommandError, match=rf"--max-lag: '{re.escape(value)}' is not a number of seconds"
    ):
        call_command("jobs", "health", "--max-lag", value)


def test_an_empty_node_name_is_a_usage_error_that_names_the_kubernetes_trap() -> None:
    with pytest.raises(CommandError, match=r"node name is empty.*--node \"\$POD_NAME\""):
        call_command("jobs", "health", "--node", "")


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    result = manage_py(tmp_path, subprocess_env(tmp_path), "jobs", "health", "--max-lag", "-1")

    assert result.returncode == 2
    assert "argument --max-lag: '-1' is not a number of seconds >= 0" in result.stderr


# -- the database ----------------------------------------------------------------------------


def test_a_database_that_refuses_connections_is_unhealthy(tmp_path: Path) -> None:
    url = f"postgres://postgres@127.0.0.1:{free_port()}/nothing"

    result = manage_py(tmp_path, subprocess_env(tmp_path, url), "jobs", "health")

    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stderr == ""  # no traceback
    first, summary = result.stdout.splitlines()
    assert first.startswith("failed  database: 'default' (postgresql) did not answer: ")
    assert "refused" in first
    assert first.endswith("Is it running, and reachable with the settings of DATABASES['default']?")
    assert summary == "unhealthy: 1 of 1 checks failed (database)"

    result = manage_py(tmp_path, subprocess_env(tmp_path, url), "jobs", "health", "--json")
    assert result.returncode == 1
    data = json.loads(result.stdout)
    assert data["ok"] is False
    assert [(c["name"], c["ok"]) for c in data["checks"]] == [("database", False)]


def test_a_sqlite_file_that_cannot_be_opened_is_unhealthy(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/no-such-directory/jobs.sqlite3"

    result = manage_py(tmp_path, subprocess_env(tmp_path, url), "jobs", "health", "--node", "w")

    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stderr == ""
    assert result.stdout.splitlines() == [
        "failed  database: 'default' (sqlite) did not answer: unable to open database file. "
        "Is it running, and reachable with the settings of DATABASES['default']?",
        "unhealthy: 1 of 1 checks failed (database)",
    ]


def test_a_database_without_the_tables_says_to_migrate(tmp_path: Path) -> None:
    sqlite3.connect(tmp_path / "empty.sqlite3").close()
    url = f"sqlite:///{tmp_path}/empty.sqlite3"

    result = manage_py(tmp_path, subprocess_env(tmp_path, url), "jobs", "health")

    assert result.returncode == 1
    assert result.stderr == ""
    assert (
        "failed  database: 'default' (sqlite) answered, but durable_jobs' tables could not be "
        "read: no such table: durable_jobs_node. Has `manage.py migrate` been run?"
    ) in result.stdout


def test_a_database_error_during_the_checks_is_reported_not_raised(tmp_path: Path) -> None:
    path = tmp_path / "partial.sqlite3"
    env = subprocess_env(tmp_path, f"sqlite:///{path}")
    assert manage_py(tmp_path, env, "migrate", "--noinput").returncode == 0
    with sqlite3.connect(path) as db:  # the node table is there, the queue table gone
        db.execute("DROP TABLE durable_jobs_queue")

    result = manage_py(tmp_path, env, "jobs", "health", "--max-lag", "60")

    assert result.returncode == 1
    assert result.stderr == ""
    assert result.stdout.splitlines() == [
        "failed  database: 'default' (sqlite) failed during the checks: no such table: "
        "durable_jobs_queue",
        "unhealthy: 1 of 1 checks failed (database)",
    ]


# -- the web endpoint the deployment guide shows ----------------------------------------------


@pytest.mark.django_db
def test_the_documented_health_view_answers_200_or_503() -> None:
    (block,) = [
        b for b in code_blocks(DOCS / "deployment" / "index.rst") if b.name == "health-view"
    ]
    namespace: dict[str, Any] = {}
    exec(compile(block.code, block.where, "exec"), namespace)
    view = namespace["jobs_health"]
    request = RequestFactory().get("/health/jobs")

    response = view(request)
    assert response.status_code == 503
    assert json.loads(response.content)["ok"] is False

    node("worker-1")
    response = view(request)
    assert response.status_code == 200
    assert json.loads(response.content)["ok"] is True


def test_the_probe_runs_no_system_checks(tmp_path: Path) -> None:
    # A project whose checks fail (an invalid setting) is still probed: the checks belong
    # to `manage.py check` at deploy time, and some of them query the database first.
    env = subprocess_env(tmp_path)
    env["DURABLE_JOBS_TEST_BAD_MIDDLEWARE"] = "1"
    assert "durable_jobs.E020" in manage_py(tmp_path, env, "check").stderr

    result = manage_py(tmp_path, env, "jobs", "health")

    assert "SystemCheckError" not in result.stderr, result.stderr
    assert result.stdout.splitlines()[0].startswith("ok      database"), result.stdout
