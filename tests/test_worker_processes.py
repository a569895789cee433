"""Real ``runworker`` processes, real signals: draining, kill -9, graceful and hard stops, options.

Every test starts ``python -m django runworker`` subprocesses on the test database
(through the ``worker_processes`` fixture, which SIGKILLs leftovers by pid), so the
data they need must be committed: hence ``transaction=True``. Every wait is bounded.
"""

from __future__ import annotations

import datetime
import signal
import socket
import subprocess
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import pytest
from django.db import transaction
from django.db.models import Count
from django.utils import timezone

from durable_jobs.models import Attempt, Job, Node, Outcome
from durable_jobs.states import State
from tests.conftest import WorkerProcesses, logs_of, wait_until
from tests.testapp import jobs
from tests.testapp.models import SideEffect

pytestmark = [
    pytest.mark.subprocess,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(150),
]

#: Exit status of a worker that got a second signal (``os._exit(128 + SIGTERM)``).
SECOND_SIGNAL_EXIT = 128 + signal.SIGTERM
#: Generous bound for a worker process to start (Django setup) on a loaded machine.
START_TIMEOUT = 30.0


# -- helpers --------------------------------------------------------------------------------


def wait_exit(workers: WorkerProcesses, proc: subprocess.Popen[bytes], timeout: float) -> int:
    """The exit code of ``proc``; fail (the fixture then kills it) if it runs past ``timeout``."""
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(
            f"worker pid {proc.pid} did not exit within {timeout}s\n{logs_of(workers, [proc])}"
        ) from None


def node_of(workers: WorkerProcesses, proc: subprocess.Popen[bytes]) -> Node:
    """The Node row the worker process registered (waits for it)."""
    return wait_until(
        lambda: Node.objects.filter(pid=proc.pid).first(),
        workers,
        timeout=START_TIMEOUT,
        alive=[proc],
        what=f"the Node row of pid {proc.pid}",
    )


def started_markers(marker_dir: Path, *, attempt: int, pid: int) -> list[Path]:
    """Files ``tests.sleepy`` touches when its handler starts: ``started-<job>-<attempt>-<pid>``."""
    return sorted(marker_dir.glob(f"started-*-{attempt}-{pid}"))


def states(ids: Iterable[int] | None = None) -> Counter[str]:
    qs = Job.objects.all() if ids is None else Job.objects.filter(pk__in=list(ids))
    return Counter(qs.values_list("state", flat=True))


def history(job_id: int) -> list[tuple[int, str, str]]:
    """(number, outcome, node) of each attempt of a job, in order."""
    return list(
        Attempt.objects.filter(job_id=job_id)
        .order_by("id")
        .values_list("number", "outcome", "node")
    )


def side_effects_per_job() -> dict[int, int]:
    rows = SideEffect.objects.values("job_id").annotate(n=Count("id"))
    return {row["job_id"]: row["n"] for row in rows}


# -- 1. many workers, many jobs -----------------------------------------------------------------


@pytest.mark.timeout(300)
def test_four_workers_drain_2000_jobs_each_exactly_once(worker_processes: WorkerProcesses) -> None:
    procs = [worker_processes.start("--queues", "default:4") for _ in range(4)]
    names = {node_of(worker_processes, p).name for p in procs}
    assert len(names) == 4

    with transaction.atomic():
        ids = [jobs.record.delay(label=f"job-{i}").pk for i in range(2000)]

    wait_until(
        lambda: Job.objects.filter(state=State.COMPLETED).count() == 2000,
        worker_processes,
        timeout=180,
        alive=procs,
        what="all 2000 jobs completed",
        interval=0.2,
    )
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    codes = [wait_exit(worker_processes, proc, 20) for proc in procs]
    assert codes == [0, 0, 0, 0], logs_of(worker_processes, procs)

    assert states() == {State.COMPLETED: 2000}
    # Exactly one handler run per job, across all processes.
    per_job = side_effects_per_job()
    assert set(per_job) == set(ids)
    assert set(per_job.values()) == {1}
    assert SideEffect.objects.count() == 2000
    # Nothing is left leased or holding a lease.
    assert not Job.objects.filter(state=State.LEASED).exists()
    assert not Job.objects.filter(leased_by__isnull=False).exists()
    assert not Job.objects.filter(lease_expires_at__isnull=False).exists()
    assert set(Job.objects.values_list("attempts", flat=True)) == {1}
    # One completed attempt per job, recorded by the workers that ran them.
    assert Attempt.objects.count() == 2000
    assert set(Attempt.objects.values_list("outcome", flat=True)) == {Outcome.COMPLETED}
    used = set(Attempt.objects.values_list("node", flat=True).distinct())
    assert used <= names
    assert len(used) >= 2, f"only {used} ran jobs"
    # Clean stops remove the Node rows.
    assert not Node.objects.filter(pid__in=[p.pid for p in procs]).exists()


# -- 2. kill -9 -------------------------------------------------------------------------------


def test_jobs_of_a_killed_worker_are_rescued_and_completed_by_another(
    worker_processes: WorkerProcesses, tmp_path: Path
) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    ids = [jobs.sleepy.delay(seconds=3, marker_dir=str(markers)).pk for _ in range(2)]

    # Lease 2 s: the heartbeat renews it every min(HEARTBEAT_SECONDS, 2/3) s while alive.
    doomed = worker_processes.start("--queues", "default:2", "--lease-seconds", "2")
    doomed_node = node_of(worker_processes, doomed)
    wait_until(
        lambda: len(started_markers(markers, attempt=1, pid=doomed.pid)) == 2,
        worker_processes,
        timeout=START_TIMEOUT,
        alive=[doomed],
        what="both handlers started in the doomed worker",
    )
    held = Job.objects.filter(pk__in=ids, state=State.LEASED, leased_by_id=doomed_node.pk)
    assert held.count() == 2
    # Live leases (give or take a late heartbeat on a busy machine).
    recent = timezone.now() - datetime.timedelta(seconds=1)
    assert all(j.lease_expires_at is not None and j.lease_expires_at > recent for j in held)

    doomed.send_signal(signal.SIGKILL)
    assert wait_exit(worker_processes, doomed, 10) == -signal.SIGKILL
    # No one acknowledged anything: the dead node still holds both leases.
    assert held.count() == 2
    assert not Attempt.objects.exists()

    rescuer = worker_processes.start("--queues", "default:2", "--lease-seconds", "2")
    rescuer_node = node_of(worker_processes, rescuer)
    wait_until(
        lambda: Attempt.objects.filter(job_id__in=ids, outcome=Outcome.LOST).count() == 2,
        worker_processes,
        timeout=30,
        alive=[rescuer],
        what="both expired leases rescued",
    )
    # The lost attempt counts as a failure: the jobs wait out their retry backoff.
    for job in Job.objects.filter(pk__in=ids):
        assert job.state == State.RETRYING, job
        assert job.attempts == 1
        assert job.leased_by_id is None
        assert job.lease_expires_at is None
        assert job.available_at > timezone.now()
    # Let the backoff (15 s or more by default) pass at once; state is left to the worker.
    Job.objects.filter(pk__in=ids, state=State.RETRYING).update(available_at=timezone.now())

    wait_until(
        lambda: states(ids) == {State.COMPLETED: 2},
        worker_processes,
        timeout=30,
        alive=[rescuer],
        what="both rescued jobs completed",
        interval=0.2,
    )
    for job_id in ids:
        job = Job.objects.get(pk=job_id)
        assert job.attempts == 2
        assert history(job_id) == [
            (1, Outcome.LOST, doomed_node.name),
            (2, Outcome.COMPLETED, rescuer_node.name),
        ]
        lost = Attempt.objects.get(job_id=job_id, outcome=Outcome.LOST)
        assert lost.error_class.endswith("LeaseExpired")
        assert (markers / f"started-{job_id}-2-{rescuer.pid}").exists()
    # Nothing lost, nothing doubled: the killed run never finished, the retry did, once.
    assert list(SideEffect.objects.order_by("job_id").values_list("job_id", "attempt")) == [
        (job_id, 2) for job_id in sorted(ids)
    ]

    rescuer.send_signal(signal.SIGTERM)
    assert wait_exit(worker_processes, rescuer, 15) == 0
    assert not Job.objects.filter(state=State.LEASED).exists()


# -- 3. graceful stop -------------------------------------------------------------------------


def test_sigterm_hands_unfinished_jobs_back_after_the_grace_period(
    worker_processes: WorkerProcesses, tmp_path: Path
) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    ids = [jobs.sleepy.delay(seconds=60, marker_dir=str(markers)).pk for _ in range(2)]
    proc = worker_processes.start("--queues", "default:2", "--shutdown-grace", "1")
    node = node_of(worker_processes, proc)
    wait_until(
        lambda: len(started_markers(markers, attempt=1, pid=proc.pid)) == 2,
        worker_processes,
        timeout=START_TIMEOUT,
        alive=[proc],
        what="both handlers started",
    )
    assert Job.objects.filter(pk__in=ids, state=State.LEASED, leased_by_id=node.pk).count() == 2

    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code = wait_exit(worker_processes, proc, 1 + 10)
    elapsed = time.monotonic() - sent
    assert code == 0, logs_of(worker_processes, [proc])
    assert elapsed >= 1.0, f"exited after {elapsed:.2f}s, before the 1 s grace period"

    now = timezone.now()
    for job in Job.objects.filter(pk__in=ids):
        # Straight back to queued, available now, the attempt given back.
        assert job.state == State.QUEUED, job
        assert job.attempts == 0
        assert job.leased_by_id is None
        assert job.lease_expires_at is None
        assert job.available_at <= now
        assert history(job.pk) == [(1, Outcome.INTERRUPTED, node.name)]
        interrupted = Attempt.objects.get(job_id=job.pk)
        assert interrupted.error_class.endswith("WorkerStopped")
    assert not SideEffect.objects.exists()
    assert not Node.objects.filter(pk=node.pk).exists()


def test_sigterm_lets_short_jobs_finish_and_claims_nothing_more(
    worker_processes: WorkerProcesses, tmp_path: Path
) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    running = [jobs.sleepy.delay(seconds=2, marker_dir=str(markers)).pk for _ in range(2)]
    waiting = jobs.sleepy.delay(seconds=2, marker_dir=str(markers)).pk
    proc = worker_processes.start("--queues", "default:2", "--shutdown-grace", "10")
    node = node_of(worker_processes, proc)
    wait_until(
        lambda: len(started_markers(markers, attempt=1, pid=proc.pid)) == 2,
        worker_processes,
        timeout=START_TIMEOUT,
        alive=[proc],
        what="both handlers started",
    )
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code = wait_exit(worker_processes, proc, 10 + 10)
    elapsed = time.monotonic() - sent
    assert code == 0, logs_of(worker_processes, [proc])
    # It waited for the jobs, not for the whole grace period.
    assert elapsed < 10, f"took {elapsed:.2f}s to stop"

    for job_id in running:
        job = Job.objects.get(pk=job_id)
        assert job.state == State.COMPLETED, job
        assert job.attempts == 1
        assert history(job_id) == [(1, Outcome.COMPLETED, node.name)]
    assert side_effects_per_job() == dict.fromkeys(running, 1)
    # A stopping worker claims nothing new.
    job = Job.objects.get(pk=waiting)
    assert (job.state, job.attempts) == (State.QUEUED, 0)
    assert not Attempt.objects.filter(job_id=waiting).exists()
    assert not Node.objects.filter(pk=node.pk).exists()


# -- 4. second signal -------------------------------------------------------------------------


def test_a_second_signal_exits_at_once(worker_processes: WorkerProcesses, tmp_path: Path) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    job_id = jobs.sleepy.delay(seconds=60, marker_dir=str(markers)).pk
    proc = worker_processes.start("--queues", "default:1", "--shutdown-grace", "60")
    node = node_of(worker_processes, proc)
    wait_until(
        lambda: started_markers(markers, attempt=1, pid=proc.pid),
        worker_processes,
        timeout=START_TIMEOUT,
        alive=[proc],
        what="the handler started",
    )

    proc.send_signal(signal.SIGTERM)
    # The first signal is handled: the node is marked stopping and waits for its job.
    wait_until(
        lambda: Node.objects.filter(pk=node.pk, stopping=True).exists(),
        worker_processes,
        timeout=10,
        alive=[proc],
        what="the node marked stopping",
    )
    time.sleep(0.3)
    assert proc.poll() is None, "the first signal should wait for the running job"

    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code = wait_exit(worker_processes, proc, 5)
    elapsed = time.monotonic() - sent
    assert code == SECOND_SIGNAL_EXIT, logs_of(worker_processes, [proc])
    assert elapsed < 5
    # Nothing was acknowledged: the lease is left to expire and be rescued.
    job = Job.objects.get(pk=job_id)
    assert (job.state, job.leased_by_id) == (State.LEASED, node.pk)
    assert not Attempt.objects.exists()


# -- 5. command options -----------------------------------------------------------------------


def test_max_jobs_exits_0_after_that_many_jobs(worker_processes: WorkerProcesses) -> None:
    ids = [jobs.record.delay(label=str(i)).pk for i in range(8)]
    proc = worker_processes.start("--queues", "default:2", "--max-jobs", "5")
    assert wait_exit(worker_processes, proc, 30) == 0, logs_of(worker_processes, [proc])
    assert states() == {State.COMPLETED: 5, State.QUEUED: 3}
    # The first five in claim order (same priority: FIFO).
    completed = Job.objects.filter(state=State.COMPLETED).values_list("pk", flat=True)
    assert set(completed) == set(ids[:5])
    assert side_effects_per_job() == dict.fromkeys(ids[:5], 1)
    assert not Node.objects.exists()


def test_burst_exits_0_once_nothing_is_available(worker_processes: WorkerProcesses) -> None:
    ids = [jobs.record.delay(label=str(i)).pk for i in range(6)]
    later = jobs.record.using(run_in=datetime.timedelta(hours=1)).delay(label="later")
    proc = worker_processes.start("--burst")
    assert wait_exit(worker_processes, proc, 30) == 0, logs_of(worker_processes, [proc])
    assert states(ids) == {State.COMPLETED: 6}
    later.refresh_from_db()
    assert (later.state, later.attempts) == (State.QUEUED, 0)
    assert side_effects_per_job() == dict.fromkeys(ids, 1)
    assert not Node.objects.exists()


def test_queues_option_limits_the_worker_to_those_queues(worker_processes: WorkerProcesses) -> None:
    default_ids = [jobs.record.delay(label="default").pk for _ in range(3)]
    email_ids = [jobs.record.using(queue="emails").delay(label="email").pk for _ in range(3)]
    proc = worker_processes.start("--queues", "emails", "--burst")
    assert wait_exit(worker_processes, proc, 30) == 0, logs_of(worker_processes, [proc])
    assert states(email_ids) == {State.COMPLETED: 3}
    assert states(default_ids) == {State.QUEUED: 3}
    assert not Attempt.objects.filter(job_id__in=default_ids).exists()
    assert side_effects_per_job() == dict.fromkeys(email_ids, 1)


def test_a_bad_queues_option_fails_with_a_clear_message(worker_processes: WorkerProcesses) -> None:
    job_id = jobs.record.delay().pk
    proc = worker_processes.start("--queues", "default:x")
    code = wait_exit(worker_processes, proc, 30)
    output = worker_processes.log(proc)
    assert code != 0, output
    assert "default:x" in output
    assert "concurrency" in output
    assert "Traceback" not in output
    assert not Node.objects.exists()
    assert states([job_id]) == {State.QUEUED: 1}


# -- 6. the Node row ----------------------------------------------------------------------------


def test_the_node_row_lives_as_long_as_the_worker(worker_processes: WorkerProcesses) -> None:
    proc = worker_processes.start("--queues", "default:3,emails:1")
    node = node_of(worker_processes, proc)
    assert node.pid == proc.pid
    assert node.name
    assert node.name not in {socket.gethostname(), socket.getfqdn()}
    assert node.queues == {"default": 3, "emails": 1}
    assert node.concurrency == 4
    assert not node.stopping

    proc.send_signal(signal.SIGTERM)
    assert wait_exit(worker_processes, proc, 15) == 0, logs_of(worker_processes, [proc])
    assert not Node.objects.filter(pk=node.pk).exists()
    assert not Node.objects.filter(pid=proc.pid).exists()
