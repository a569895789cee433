"""The inline worker: real ``manage.py runserver`` processes, real HTTP, real signals.

Each server runs on the test database with tests/runserver_settings.py (``DEBUG`` and
``INLINE_WORKER`` from the environment), on a free port, in a process group of its own
so that Control-C reaches the autoreloader and its child together, as from a terminal.
Jobs are enqueued by POSTing to a view of the server; no other worker runs. Every wait
is bounded, and ends on something the server or the database shows.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from django.test import override_settings

from durable_jobs.dev import inline
from durable_jobs.models import Attempt, Job, Node, Outcome
from durable_jobs.states import State
from durable_jobs.worker import Worker
from tests.conftest import ROOT, WorkerProcesses, wait_for
from tests.testapp import jobs

Test = TypeVar("Test", bound=Callable[..., None])

BANNER = "durable_jobs: inline worker on ("
TURN_OFF = 'set DURABLE_JOBS["INLINE_WORKER"] = False to turn it off.'
#: A module the server imports, so the autoreloader watches it.
WATCHED = ROOT / "tests" / "runserver_urls.py"
#: What ``django-admin startproject`` writes, in short.
MANAGE_PY = (
    "import sys\n"
    "from django.core.management import execute_from_command_line\n\n"
    "execute_from_command_line(sys.argv)\n"
)
#: Generous bound for a server process to start (Django setup, system checks) when loaded.
START_TIMEOUT = 60.0
#: Worker threads the inline worker adds to the serving process (always these two).
WORKER_THREADS = {"durable-jobs-inline", "durable-jobs-worker"}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Server:
    """``runserver`` on a free port, its output in a file, in a process group of its own."""

    def __init__(
        self,
        tmp_path: Path,
        *args: str,
        inline: str = "none",
        debug: str = "true",
        schedule: bool = False,
        database: Path | None = None,
    ) -> None:
        self.port = free_port()
        self.log = tmp_path / f"runserver-{self.port}.log"
        env = WorkerProcesses(tmp_path).env()
        env["DJANGO_SETTINGS_MODULE"] = "tests.runserver_settings"
        env["DURABLE_JOBS_TEST_INLINE_WORKER"] = inline
        env["DURABLE_JOBS_TEST_DEBUG"] = debug
        env["PYTHONUNBUFFERED"] = "1"
        if schedule:
            env["DURABLE_JOBS_TEST_SCHEDULE"] = "true"
        if database is not None:  # another database than the test database
            env["DATABASE_URL"] = f"sqlite:///{database}"
            del env["DURABLE_JOBS_TEST_DB_NAME"]
        env.pop("RUN_MAIN", None)
        if "--manage-py" in args:  # python manage.py runserver, rather than python -m django
            manage = tmp_path / "manage.py"
            manage.write_text(MANAGE_PY)
            program = [str(manage)]
            args = tuple(a for a in args if a != "--manage-py")
        else:
            program = ["-m", "django"]
        with self.log.open("wb") as output:
            self.proc = subprocess.Popen(
                [sys.executable, *program, "runserver", f"127.0.0.1:{self.port}", *args],
                cwd=ROOT,
                env=env,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def request(self, path: str, data: dict[str, Any] | None = None) -> dict[str, Any]:
        body = None if data is None else urllib.parse.urlencode(data).encode()
        url = f"http://127.0.0.1:{self.port}{path}"
        with urllib.request.urlopen(url, data=body, timeout=30) as response:
            return json.load(response)

    def process(self) -> dict[str, Any]:
        """The serving process's pid and thread names, once it answers (waits for it)."""
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"runserver exited {self.proc.returncode}:\n{self.output()}")
            try:
                return self.request("/process/")
            except (urllib.error.URLError, ConnectionError):
                if time.monotonic() > deadline:
                    raise AssertionError(f"runserver did not answer:\n{self.output()}") from None
                time.sleep(0.1)

    def enqueue(self, **data: Any) -> Job:
        return Job.objects.get(pk=self.request("/enqueue/", data)["job"])

    def control_c(self) -> int:
        """SIGINT to the process group, as Control-C in a terminal; the exit status."""
        os.killpg(self.proc.pid, signal.SIGINT)
        return self.wait_exit()

    def wait_exit(self) -> int:
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"runserver did not exit:\n{self.output()}") from None

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[list[Server]]:
    """Started servers; whatever is still running at the end is killed."""
    started: list[Server] = []
    try:
        yield started
    finally:
        for server in started:
            server.kill()


def until(predicate: Any, server: Server, what: str, timeout: float = 60.0) -> Any:
    """Poll ``predicate``; fail with the server's output on timeout or if it exited."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if server.proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"not {what}; runserver output:\n{server.output()}")
        time.sleep(0.05)


def attempts(job: Job) -> list[tuple[int, str, str]]:
    return list(
        Attempt.objects.filter(job=job).order_by("id").values_list("number", "outcome", "node")
    )


def leased_long_job(server: Server, marker_dir: Path) -> Job:
    """A job that runs for minutes, once the server's worker has started it."""
    marker_dir.mkdir(exist_ok=True)
    job = server.enqueue(seconds=300, marker_dir=str(marker_dir))
    until(lambda: list(marker_dir.glob(f"started-{job.pk}-*")), server, "started")
    job.refresh_from_db()
    assert job.state == State.LEASED
    return job


def assert_handed_back(job: Job, *nodes: Node) -> None:
    """``job`` is back in ``queued``, after an interrupted attempt on each of ``nodes``
    (not counted: each is attempt 1)."""
    job.refresh_from_db()
    assert (job.state, job.leased_by_id, job.lease_expires_at) == (State.QUEUED, None, None)
    assert job.attempts == 0
    assert attempts(job) == [(1, Outcome.INTERRUPTED, node.name) for node in nodes]


def starts_processes(test: Test) -> Test:
    """The marks of a test that starts servers or commands (its data must be committed)."""
    for mark in (pytest.mark.subprocess, pytest.mark.django_db(transaction=True)):
        test = mark(test)
    return pytest.mark.timeout(180)(test)


# -- the server runs jobs, and hands them back when it stops ----------------------------------


@pytest.mark.parametrize("program", ["--manage-py", "-m django"])
@starts_processes
def test_the_autoreloaded_child_runs_jobs_and_hands_back_on_control_c(
    servers: list[Server], tmp_path: Path, program: str
) -> None:
    # INLINE_WORKER None, DEBUG True: on. With a schedule, which its heartbeat enqueues.
    extra = (program,) if program == "--manage-py" else ()
    server = Server(tmp_path, *extra, schedule=True)
    servers.append(server)
    serving = server.process()
    # The child serves, and runs the worker; the reloader parent runs neither.
    assert serving["pid"] != server.proc.pid
    assert set(serving["threads"]) >= WORKER_THREADS
    # The server may answer before its inline worker has registered.
    node = until(lambda: Node.objects.filter(pid=serving["pid"]).first(), server, "registered")
    assert not Node.objects.filter(pid=server.proc.pid).exists()

    quick = server.enqueue()
    until(lambda: Job.objects.get(pk=quick.pk).state == State.COMPLETED, server, "completed")
    assert Job.objects.get(pk=quick.pk).result == 5
    assert attempts(quick) == [(1, Outcome.COMPLETED, node.name)]
    until(
        lambda: Job.objects.filter(
            idempotency_key__startswith="schedule:inline-add:", state=State.COMPLETED
        ).exists(),
        server,
        "a scheduled job completed",
    )

    long = leased_long_job(server, tmp_path / "markers")
    assert server.control_c() == 0
    assert_handed_back(long, node)
    assert not Job.objects.filter(state=State.LEASED).exists()
    assert not Node.objects.exists()
    output = server.output()
    assert output.count(BANNER) == 1, output
    banner = next(line for line in output.splitlines() if line.startswith(BANNER))
    assert banner == (
        "durable_jobs: inline worker on (queues default:4, emails:2, webhooks:3; scheduler on); "
        + TURN_OFF
    )


@starts_processes
def test_a_reload_hands_back_and_the_new_child_runs_the_job_again(
    servers: list[Server], tmp_path: Path
) -> None:
    server = Server(tmp_path, inline="true")
    servers.append(server)
    first = server.process()
    first_node = until(lambda: Node.objects.filter(pid=first["pid"]).first(), server, "registered")
    long = leased_long_job(server, tmp_path / "markers")

    def new_child() -> Node | None:
        # A change is only seen against the reloader's last look at the file (every
        # second), so touch it until a new child registers its node.
        WATCHED.touch()
        return Node.objects.exclude(pid=first["pid"]).first()

    second_node = until(new_child, server, "reloaded")
    second = server.process()
    assert second["pid"] == second_node.pid != first["pid"]
    assert not Node.objects.filter(pk=first_node.pk).exists()
    # Handed back by the old child at its exit, at once; started again by the new one.
    assert attempts(long) == [(1, Outcome.INTERRUPTED, first_node.name)]
    until(
        lambda: Job.objects.filter(pk=long.pk, leased_by=second_node).exists(),
        server,
        "leased by the new child",
    )
    assert server.output().count(BANNER) == 2

    assert server.control_c() == 0
    assert_handed_back(long, first_node, second_node)
    assert not Node.objects.exists()


@pytest.mark.parametrize(
    "stop",
    # Twice: as some tools send it (timeout(1) signals the process and its group).
    [[signal.SIGINT], [signal.SIGTERM], [signal.SIGTERM, signal.SIGTERM]],
    ids=["SIGINT", "SIGTERM", "SIGTERM-twice"],
)
@starts_processes
def test_with_noreload_the_one_process_runs_jobs_and_hands_back_when_stopped(
    servers: list[Server], tmp_path: Path, stop: list[signal.Signals]
) -> None:
    server = Server(tmp_path, "--noreload", inline="true")
    servers.append(server)
    serving = server.process()
    assert serving["pid"] == server.proc.pid
    # The server may answer before its inline worker has registered.
    node = until(lambda: Node.objects.filter(pid=serving["pid"]).first(), server, "registered")
    quick = server.enqueue()
    until(lambda: Job.objects.get(pk=quick.pk).state == State.COMPLETED, server, "completed")

    long = leased_long_job(server, tmp_path / "markers")
    for signum in stop:
        server.proc.send_signal(signum)
    assert server.wait_exit() == 0
    assert_handed_back(long, node)
    assert not Node.objects.exists()
    assert server.output().count(BANNER) == 1


# -- off --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("inline_setting", "debug", "args"),
    [("false", "true", ()), ("none", "false", ("--noreload",))],
    ids=["INLINE_WORKER=False", "DEBUG=False"],
)
@starts_processes
def test_off_nothing_runs_the_jobs_the_server_enqueues(
    servers: list[Server], tmp_path: Path, inline_setting: str, debug: str, args: tuple[str, ...]
) -> None:
    server = Server(tmp_path, *args, inline=inline_setting, debug=debug)
    servers.append(server)
    server.process()
    job = server.enqueue()
    # The server answers after the enqueue, and no worker thread exists in it: nothing
    # there will ever run the job.
    serving = server.process()
    assert not WORKER_THREADS & set(serving["threads"]), serving
    assert server.control_c() == 0
    job.refresh_from_db()
    assert job.state == State.QUEUED
    assert not Attempt.objects.exists()
    assert not Node.objects.exists()
    assert BANNER not in server.output()


# -- bad input --------------------------------------------------------------------------------


@starts_processes
def test_without_its_tables_the_server_says_so_and_serves_on(
    servers: list[Server], tmp_path: Path
) -> None:
    server = Server(tmp_path, "--noreload", inline="true", database=tmp_path / "new.sqlite3")
    servers.append(server)
    until(lambda: "could not start" in server.output(), server, "told")
    assert not WORKER_THREADS & set(server.process()["threads"])
    assert server.control_c() == 0
    output = server.output()
    assert "durable_jobs: the inline worker could not start: no such table" in output, output
    assert "has `manage.py migrate` been run for durable_jobs?" in output


@pytest.mark.parametrize(
    ("durable_jobs", "problem"),
    [({"INLINE_WORKER": "yes"}, "INLINE_WORKER"), ({"QUEUES": {"": {}}}, "Queue name")],
)
def test_bad_settings_turn_it_off_with_the_reason(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    durable_jobs: dict[str, Any],
    problem: str,
) -> None:
    monkeypatch.setattr(sys, "argv", ["manage.py", "runserver", "--noreload"])
    with override_settings(DEBUG=True, DURABLE_JOBS=durable_jobs):
        assert inline.start_if_serving() is None
    printed = capsys.readouterr()
    assert printed.err.startswith("durable_jobs: inline worker off: "), printed
    assert problem in printed.err
    assert not {t.name for t in threading.enumerate()} & WORKER_THREADS


# -- nowhere else -----------------------------------------------------------------------------

SHOW_THREADS = "import threading; print('threads:', sorted(t.name for t in threading.enumerate()))"


@pytest.mark.parametrize(
    "command",
    [
        ["check"],
        ["shell", "-c", SHOW_THREADS],
        ["runworker", "--burst"],
        ["help", "runserver"],
        ["runserver", "--help"],
        ["runserver", "--noreload", "--hel"],  # an abbreviation argparse takes for --help
    ],
    ids=lambda command: " ".join(command[:2]),
)
@starts_processes
def test_other_commands_never_start_it(tmp_path: Path, command: list[str]) -> None:
    env = WorkerProcesses(tmp_path).env()
    env.update(
        DJANGO_SETTINGS_MODULE="tests.runserver_settings",
        DURABLE_JOBS_TEST_INLINE_WORKER="true",
        DURABLE_JOBS_TEST_DEBUG="true",
    )
    done = subprocess.run(
        [sys.executable, "-m", "django", *command],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert BANNER not in done.stdout + done.stderr
    if command[0] == "shell":
        threads = next(line for line in done.stdout.splitlines() if line.startswith("threads:"))
        assert "durable-jobs" not in threads


def test_not_in_the_test_process() -> None:
    assert not inline.serving_process()
    assert not {t.name for t in threading.enumerate()} & WORKER_THREADS


@pytest.mark.parametrize(
    ("argv", "environ", "serving"),
    [
        (["manage.py", "runserver"], {}, False),  # the autoreloader's parent
        (["manage.py", "runserver"], {"RUN_MAIN": "true"}, True),  # its child
        (["manage.py", "runserver", "0:8001"], {"RUN_MAIN": "true"}, True),
        (["/venv/lib/django/__main__.py", "runserver"], {"RUN_MAIN": "true"}, True),
        (["manage.py", "runserver", "--noreload"], {}, True),
        (["manage.py", "runserver", "0:8001", "--norel"], {}, True),  # argparse's abbreviation
        (["manage.py", "runserver", "--nostatic", "--noreload"], {}, True),  # staticfiles'
        (["manage.py", "runserver", "--help"], {"RUN_MAIN": "true"}, False),
        (["manage.py", "runserver", "--noreload", "--version"], {}, False),
        (["manage.py", "runserver", "--noreload", "--no-such-option"], {}, False),  # refused
        (["manage.py", "runserver", "--ipv6=1", "--noreload"], {}, False),  # refused
        (["manage.py", "help", "runserver"], {"RUN_MAIN": "true"}, False),
        (["manage.py", "shell"], {"RUN_MAIN": "true"}, False),
        (["manage.py", "runworker"], {}, False),
        (["manage.py"], {}, False),
        (["gunicorn", "mysite.wsgi"], {}, False),
        (["daphne", "mysite.asgi:application"], {}, False),
        (["uwsgi"], {}, False),
    ],
)
def test_the_serving_process_is_read_from_the_command_line(
    argv: list[str], environ: dict[str, str], serving: bool
) -> None:
    assert inline.serving_process(argv, environ) is serving


@pytest.mark.parametrize(
    ("setting", "debug", "expected"),
    [(None, True, True), (None, False, False), (True, False, True), (False, True, False)],
)
def test_the_setting_follows_debug_unless_given(
    setting: bool | None, debug: bool, expected: bool
) -> None:
    with override_settings(DEBUG=debug, DURABLE_JOBS={"INLINE_WORKER": setting}):
        assert inline.enabled() is expected


# -- Worker.stop_now ---------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("after_stop", [False, True], ids=["alone", "during-the-grace"])
def test_stop_now_hands_running_jobs_back_without_a_grace_period(
    tmp_path: Path, after_stop: bool
) -> None:
    # A grace period far longer than the test may run: only stop_now ends the worker.
    worker = Worker({"default": 2}, shutdown_grace=3600)
    thread = worker.start()
    job = jobs.sleepy.delay(seconds=300, marker_dir=str(tmp_path))
    wait_for(lambda: list(tmp_path.glob(f"started-{job.pk}-*")))
    if after_stop:
        worker.stop()
        wait_for(lambda: Node.objects.filter(pk=worker.node.pk, stopping=True).exists())
    worker.stop_now()
    thread.join(timeout=60)
    assert not thread.is_alive()
    job.refresh_from_db()
    assert (job.state, job.leased_by_id) == (State.QUEUED, None)
    assert attempts(job) == [(1, Outcome.INTERRUPTED, worker.node.name)]
    assert not Node.objects.exists()
