"""``runworker --processes N``: a supervisor and its worker processes, real signals throughout.

Every test starts ``python -m django runworker --processes ...`` subprocesses on the test
database (the ``worker_processes`` fixture SIGKILLs each supervisor's children, then the
supervisor, by pid), so the data they need must be committed: hence
``transaction=True``. A child is recognised by its ``Node`` row, whose pid must be a
child process of the supervisor. Every wait is bounded.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection, transaction
from django.db.models import Count
from django.utils import timezone

from durable_jobs.management.commands.runworker import process_count
from durable_jobs.models import Attempt, Job, Node, Outcome
from durable_jobs.states import State
from durable_jobs.worker.supervisor import available_cpus
from tests.conftest import WorkerProcesses, child_pids, logs_of, pid_running, wait_until
from tests.testapp import jobs
from tests.testapp.models import SideEffect

pytestmark = [
    pytest.mark.subprocess,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(150),
]

#: Generous bound for a supervisor and its children to start (Django setup, twice).
START_TIMEOUT = 45.0


# -- helpers --------------------------------------------------------------------------------


def parent_pid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def children_nodes(
    workers: WorkerProcesses, supervisor: subprocess.Popen[bytes], count: int
) -> list[Node]:
    """Wait until ``count`` worker processes of ``supervisor`` have registered; their rows."""

    def registered() -> list[Node] | None:
        rows = [n for n in Node.objects.order_by("name") if parent_pid(n.pid) == supervisor.pid]
        return rows if len(rows) == count else None

    return wait_until(
        registered,
        workers,
        timeout=START_TIMEOUT,
        alive=[supervisor],
        what=f"{count} worker processes of supervisor {supervisor.pid} registered",
        interval=0.1,
    )


def wait_exit(workers: WorkerProcesses, proc: subprocess.Popen[bytes], timeout: float) -> int:
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(
            f"supervisor pid {proc.pid} did not exit within {timeout}s\n{logs_of(workers, [proc])}"
        ) from None


def started_markers(marker_dir: Path, *, pid: int, attempt: int = 1) -> list[Path]:
    """Files ``tests.sleepy`` touches as its handler starts: ``started-<job>-<attempt>-<pid>``."""
    return sorted(marker_dir.glob(f"started-*-{attempt}-{pid}"))


def side_effects_per_job() -> dict[int, int]:
    rows = SideEffect.objects.values("job_id").annotate(n=Count("id"))
    return {row["job_id"]: row["n"] for row in rows}


def states(ids: list[int]) -> Counter[str]:
    return Counter(Job.objects.filter(pk__in=ids).values_list("state", flat=True))


def start_sleepers(
    workers: WorkerProcesses, markers: Path, *args: str, jobs_count: int = 4
) -> tuple[subprocess.Popen[bytes], list[Node], list[int]]:
    """A 2-process supervisor whose children are each running 2 long ``sleepy`` jobs."""
    ids = [jobs.sleepy.delay(seconds=60, marker_dir=str(markers)).pk for _ in range(jobs_count)]
    supervisor = workers.start("--processes", "2", "--queues", "default:2", *args)
    nodes = children_nodes(workers, supervisor, 2)
    wait_until(
        lambda: all(len(started_markers(markers, pid=n.pid)) == 2 for n in nodes),
        workers,
        timeout=START_TIMEOUT,
        alive=[supervisor],
        what="each worker process runs two jobs",
    )
    assert Job.objects.filter(pk__in=ids, state=State.LEASED).count() == jobs_count
    return supervisor, nodes, ids


def assert_handed_back(ids: list[int], nodes: list[Node]) -> None:
    """Every job is back in ``queued``, available now, with one ``interrupted`` attempt."""
    names = {n.name for n in nodes}
    now = timezone.now()
    for job in Job.objects.filter(pk__in=ids):
        assert job.state == State.QUEUED, job
        assert job.leased_by_id is None, job
        assert job.lease_expires_at is None, job
        assert job.attempts == 0, job
        assert job.available_at <= now, job
        history = list(Attempt.objects.filter(job_id=job.pk).values_list("outcome", "node"))
        assert [outcome for outcome, _ in history] == [Outcome.INTERRUPTED], history
        assert history[0][1] in names
    assert not SideEffect.objects.exists()


def socket_inodes(pid: int) -> set[str]:
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


def database_handles(pid: int) -> list[str]:
    """What of the test database ``pid`` holds open: files (SQLite) or TCP sockets to the
    server's port (PostgreSQL, MariaDB), read from /proc."""
    settings = connection.settings_dict
    if connection.vendor == "sqlite":
        database = os.path.realpath(settings["NAME"])
        found = []
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if target.startswith(database):  # the file, its -wal and -shm
                found.append(target)
        return found
    port = int(settings["PORT"] or {"postgresql": 5432, "mysql": 3306}[connection.vendor])
    inodes = socket_inodes(pid)
    found = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            if remote_port == port and fields[9] in inodes:
                found.append(f"{table} {fields[2]} inode {fields[9]}")
    return found


# -- 1. drain -------------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_two_processes_drain_2000_jobs_each_exactly_once(
    worker_processes: WorkerProcesses,
) -> None:
    supervisor = worker_processes.start(
        "--processes", "2", "--queues", "default:4", "--name", "drain"
    )
    nodes = children_nodes(worker_processes, supervisor, 2)
    assert [n.name for n in nodes] == ["drain-1", "drain-2"]
    assert supervisor.pid not in {n.pid for n in nodes}

    with transaction.atomic():
        ids = [jobs.record.delay(label=f"job-{i}").pk for i in range(2000)]
    wait_until(
        lambda: Job.objects.filter(state=State.COMPLETED).count() == 2000,
        worker_processes,
        timeout=240,
        alive=[supervisor],
        what="all 2000 jobs completed",
        interval=0.2,
    )
    supervisor.send_signal(signal.SIGTERM)
    assert wait_exit(worker_processes, supervisor, 30) == 0, logs_of(worker_processes, [supervisor])

    per_job = side_effects_per_job()
    assert set(per_job) == set(ids)
    assert set(per_job.values()) == {1}
    assert set(Job.objects.values_list("attempts", flat=True)) == {1}
    assert Attempt.objects.count() == 2000
    assert set(Attempt.objects.values_list("outcome", flat=True)) == {Outcome.COMPLETED}
    used = set(Attempt.objects.values_list("node", flat=True).distinct())
    assert used == {"drain-1", "drain-2"}, used
    assert not Node.objects.exists()


# -- 2. kill -9 of a child --------------------------------------------------------------------


def test_a_killed_child_is_restarted_and_its_jobs_are_rescued(
    worker_processes: WorkerProcesses, tmp_path: Path
) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    with transaction.atomic():
        ids = [jobs.sleepy.delay(seconds=0.3, marker_dir=str(markers)).pk for _ in range(40)]
    supervisor = worker_processes.start(
        "--processes", "2", "--queues", "default:2", "--lease-seconds", "2", "--name", "crash"
    )
    nodes = children_nodes(worker_processes, supervisor, 2)
    doomed = nodes[1]
    wait_until(
        lambda: started_markers(markers, pid=doomed.pid),
        worker_processes,
        timeout=START_TIMEOUT,
        alive=[supervisor],
        what="the doomed child runs a job",
        interval=0.01,
    )
    os.kill(doomed.pid, signal.SIGKILL)

    # The supervisor says what happened, names the signal, and starts a new process that
    # takes the same node name.
    line = f"worker process 2 (pid {doomed.pid}) was killed by SIGKILL; restarting it in 1s"
    wait_until(
        lambda: line in worker_processes.log(supervisor),
        worker_processes,
        timeout=10,
        alive=[supervisor],
        what="the restart line",
    )
    replacement = wait_until(
        lambda: Node.objects.filter(name="crash-2").exclude(pid=doomed.pid).first(),
        worker_processes,
        timeout=START_TIMEOUT,
        alive=[supervisor],
        what="the restarted child's Node row",
    )
    assert parent_pid(replacement.pid) == supervisor.pid
    assert not pid_running(doomed.pid)

    def all_completed() -> bool:
        # A rescued (lost) attempt is retried after a backoff of 15 s or more: let it
        # pass at once; the state itself is left to the workers.
        Job.objects.filter(pk__in=ids, state=State.RETRYING).update(available_at=timezone.now())
        return states(ids) == {State.COMPLETED: len(ids)}

    wait_until(
        all_completed,
        worker_processes,
        timeout=60,
        alive=[supervisor],
        what="every job completed",
        interval=0.2,
    )
    # The killed child's jobs were rescued once their leases expired: lost attempts under
    # its renamed row, no other job has one.
    lost = Attempt.objects.filter(job_id__in=ids, outcome=Outcome.LOST)
    assert lost.exists()
    assert set(lost.values_list("node", flat=True)) == {f"crash-2~{doomed.pid}"}
    held = set(lost.values_list("job_id", flat=True))
    assert held <= {int(p.name.split("-")[1]) for p in started_markers(markers, pid=doomed.pid)}
    # Nothing lost; a second run only for the jobs the killed child held.
    per_job = side_effects_per_job()
    assert set(per_job) == set(ids)
    assert {pk for pk, n in per_job.items() if n > 1} <= held
    assert max(per_job.values()) <= 2

    supervisor.send_signal(signal.SIGTERM)
    assert wait_exit(worker_processes, supervisor, 30) == 0
    assert not Job.objects.filter(state=State.LEASED).exists()


# -- 3. SIGTERM to the supervisor -------------------------------------------------------------


def test_sigterm_stops_every_child_gracefully_and_exits_0(
    worker_processes: WorkerProcesses, tmp_path: Path
) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    supervisor, nodes, ids = start_sleepers(worker_processes, markers, "--shutdown-grace", "2")
    sent = time.monotonic()
    supervisor.send_signal(signal.SIGTERM)
    code = wait_exit(worker_processes, supervisor, 2 + 15)
    elapsed = time.monotonic() - sent
    assert code == 0, logs_of(worker_processes, [supervisor])
    assert elapsed >= 2.0, f"exited after {elapsed:.2f}s, before the 2 s grace period"

    assert_handed_back(ids, nodes)
    assert not Job.objects.filter(state=State.LEASED).exists()
    assert not any(pid_running(n.pid) for n in nodes)
    assert not Node.objects.exists()


def test_sigint_to_the_whole_process_group_is_one_graceful_stop(
    worker_processes: WorkerProcesses, tmp_path: Path
) -> None:
    """A terminal's Ctrl-C: SIGINT reaches the supervisor and each child at once. Taken as
    a second signal, a child would exit with 130 and leave its jobs leased."""
    markers = tmp_path / "markers"
    markers.mkdir()
    supervisor, nodes, ids = start_sleepers(worker_processes, markers, "--shutdown-grace", "1")
    for pid in [supervisor.pid, *(n.pid for n in nodes)]:
        os.kill(pid, signal.SIGINT)
    assert wait_exit(worker_processes, supervisor, 1 + 15) == 0
    log = worker_processes.log(supervisor)
    for node in nodes:
        assert f"(pid {node.pid}) exited with status 0" in log, log[-4000:]
    assert_handed_back(ids, nodes)
    assert not Node.objects.exists()


# -- 4. SIGKILL of the supervisor -------------------------------------------------------------


def test_children_of_a_killed_supervisor_hand_their_jobs_back_and_exit(
    worker_processes: WorkerProcesses, tmp_path: Path
) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    supervisor, nodes, ids = start_sleepers(worker_processes, markers, "--shutdown-grace", "1")
    supervisor.send_signal(signal.SIGKILL)
    supervisor.wait(timeout=10)

    wait_until(
        lambda: not any(pid_running(n.pid) for n in nodes),
        worker_processes,
        timeout=1 + 10,
        what="the orphaned children exited",
    )
    assert_handed_back(ids, nodes)
    log = worker_processes.log(supervisor)
    assert log.count(f"the supervisor (pid {supervisor.pid}) is gone") == 2, log[-4000:]
    assert not Node.objects.exists()


# -- 5. a second signal ---------------------------------------------------------------------


def test_a_second_signal_stops_the_children_at_once(
    worker_processes: WorkerProcesses, tmp_path: Path
) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    supervisor, nodes, ids = start_sleepers(worker_processes, markers, "--shutdown-grace", "60")
    supervisor.send_signal(signal.SIGTERM)
    # Both children are in their grace period (they mark their node stopping).
    wait_until(
        lambda: Node.objects.filter(stopping=True).count() == 2,
        worker_processes,
        timeout=15,
        alive=[supervisor],
        what="both children stopping",
    )
    sent = time.monotonic()
    supervisor.send_signal(signal.SIGTERM)
    code = wait_exit(worker_processes, supervisor, 15)
    elapsed = time.monotonic() - sent
    assert code == 128 + signal.SIGTERM, logs_of(worker_processes, [supervisor])
    assert elapsed < 15, elapsed  # far from the 60 s grace period
    assert_handed_back(ids, nodes)
    assert not any(pid_running(n.pid) for n in nodes)
    assert not Node.objects.exists()


# -- 6. no connection in the supervisor --------------------------------------------------------


def test_the_supervisor_holds_no_database_connection_and_no_node(
    worker_processes: WorkerProcesses,
) -> None:
    if not Path("/proc/self/fd").is_dir():
        pytest.skip("reads /proc (Linux)")
    supervisor = worker_processes.start("--processes", "2", "--queues", "default:2")
    nodes = children_nodes(worker_processes, supervisor, 2)
    jobs.noop.delay()  # the children keep their connections busy meanwhile
    wait_until(
        lambda: Job.objects.filter(state=State.COMPLETED).exists(),
        worker_processes,
        timeout=30,
        alive=[supervisor],
        what="a job completed",
    )
    # The check sees a worker's connection (so an empty answer below means something).
    assert all(database_handles(n.pid) for n in nodes), [database_handles(n.pid) for n in nodes]
    assert database_handles(supervisor.pid) == []
    assert not Node.objects.filter(pid=supervisor.pid).exists()
    assert Node.objects.count() == 2
    assert set(child_pids(supervisor.pid)) >= {n.pid for n in nodes}

    supervisor.send_signal(signal.SIGTERM)
    assert wait_exit(worker_processes, supervisor, 30) == 0


# -- 7. options -----------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["0", "-2", "abc", "1.5", ""])
def test_processes_must_be_a_whole_number_or_auto(value: str) -> None:
    with pytest.raises(CommandError, match="is not a number of worker processes"):
        call_command("runworker", "--processes", value)


def test_processes_auto_is_the_cpus_this_process_may_use() -> None:
    expected = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert process_count("auto") == available_cpus() == expected
    assert process_count("AUTO") == expected
    assert process_count("3") == 3


def test_metrics_ports_must_fit_every_child() -> None:
    with pytest.raises(CommandError, match="past 65535"):
        call_command("runworker", "--processes", "2", "--metrics-port", "65535")
    with pytest.raises(CommandError, match="--metrics-host needs --metrics-port"):
        call_command("runworker", "--processes", "2", "--metrics-host", "0.0.0.0")


def test_burst_children_finish_and_the_supervisor_exits_0(
    worker_processes: WorkerProcesses,
) -> None:
    with transaction.atomic():
        ids = [jobs.record.delay(label=str(i)).pk for i in range(50)]
    supervisor = worker_processes.start("--processes", "2", "--burst", "--name", "burst")
    assert wait_exit(worker_processes, supervisor, START_TIMEOUT) == 0
    log = worker_processes.log(supervisor)
    for index in (1, 2):
        assert re.search(rf"worker process {index} \(pid \d+\) finished its work", log), log
    assert "restarting" not in log
    assert states(ids) == {State.COMPLETED: 50}
    assert not Node.objects.exists()


def test_one_process_is_the_worker_itself(worker_processes: WorkerProcesses) -> None:
    jobs.noop.delay()
    proc = worker_processes.start("--processes", "1", "--queues", "default:1")
    node = wait_until(
        lambda: Node.objects.first(),
        worker_processes,
        timeout=START_TIMEOUT,
        alive=[proc],
        what="the worker's Node row",
    )
    assert node.pid == proc.pid  # no supervisor in between
    proc.send_signal(signal.SIGTERM)
    assert wait_exit(worker_processes, proc, 20) == 0
