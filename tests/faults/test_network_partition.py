"""A real network partition between one worker and PostgreSQL; fencing tokens keep it safe.

One ``runworker`` runs in its own network namespace and reaches PostgreSQL through a
veth link and a TCP forwarder (see ``tests/faults/netns.py``). It leases slow jobs;
the test takes the link down. Its connections hang (nothing errors: the packets are
dropped), its leases expire, and ordinary workers on the host rescue and finish the
jobs. Meanwhile the partitioned worker's handlers return. When the link comes back,
its stale acknowledgements reach the database and must be refused by the fencing
token: the rows stay exactly as the rescuers left them, and the partitioned worker
logs each refusal (``rejected``).

PostgreSQL only: a SQLite file has no network to cut. Needs root and ``ip`` (Debian
package iproute2) to create the namespace; skipped, saying why, where that fails.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from django.db import connection
from django.utils import timezone

from durable_jobs.models import Attempt, Job, Node, Outcome
from durable_jobs.states import State
from tests.conftest import ROOT, WorkerProcesses, logs_of, wait_until
from tests.faults.conftest import record_figures
from tests.faults.netns import (
    NamespacesUnavailable,
    TcpForwarder,
    VethNamespace,
    create_veth_namespace,
)
from tests.testapp.partition_jobs import partition_slow

pytestmark = [
    pytest.mark.faults,
    pytest.mark.subprocess,
    pytest.mark.django_db(transaction=True),
    pytest.mark.timeout(120),
]

#: Lease of every worker here. Short, so leases expire within seconds of the cut; the
#: heartbeat renews it every second (a third of it) while a worker is reachable.
LEASE_SECONDS = 3
#: The partitioned worker's attempts run this long: still running when the link is cut,
#: finished (their outcomes waiting to be written) well before it comes back.
FIRST_ATTEMPT_SECONDS = 4.0
JOBS = 3
START_TIMEOUT = 30.0


@pytest.fixture
def link(vendor: str) -> Iterator[VethNamespace]:
    if vendor == "sqlite":
        pytest.skip("a network partition needs a networked database; SQLite is a local file")
    try:
        namespace = create_veth_namespace()
    except NamespacesUnavailable as exc:
        pytest.skip(f"cannot create a network namespace: {exc}")
    try:
        yield namespace
    finally:
        # Kills what still runs inside (only this test's worker), deletes namespace and veth.
        namespace.remove()


def start_in_namespace(
    workers: WorkerProcesses, link: VethNamespace, env: dict[str, str], *args: str
) -> subprocess.Popen[bytes]:
    """``runworker args`` inside the namespace; logged and killed like the fixture's own."""
    log = open(workers.tmp_path / f"worker-{len(workers.procs)}.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        link.command(sys.executable, "-m", "django", "runworker", *args),
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    workers.procs.append(proc)
    return proc


def database_url_via(address: tuple[str, int]) -> str:
    """The test database's URL, but at ``address`` (the forwarder) instead of its own host."""
    settings = connection.settings_dict
    credentials = quote(settings["USER"] or "", safe="")
    if settings["PASSWORD"]:
        credentials += ":" + quote(settings["PASSWORD"], safe="")
    host, port = address
    scheme = "mysql" if connection.vendor == "mysql" else "postgres"
    return f"{scheme}://{credentials}@{host}:{port}/{quote(settings['NAME'], safe='')}"


def events(workers: WorkerProcesses, proc: subprocess.Popen[bytes], event: str) -> list[dict]:
    """The worker's JSON log records of lifecycle ``event`` (tests/settings.py's formatter)."""
    found = []
    for line in workers.log(proc).splitlines():
        if not line.startswith("{"):
            continue
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("event") == event:
            found.append(record)
    return found


def markers(directory: Path, stage: str, job_ids: list[int], attempt: int, pid: int) -> list[Path]:
    return [
        path
        for job_id in job_ids
        if (path := directory / f"{stage}-{job_id}-{attempt}-{pid}").exists()
    ]


def snapshot(job_ids: list[int]) -> dict[str, Any]:
    """Everything an acknowledgement could change: the jobs' rows and their attempts."""
    jobs = {job["id"]: job for job in Job.objects.filter(pk__in=job_ids).order_by("pk").values()}
    attempts = list(Attempt.objects.filter(job_id__in=job_ids).order_by("pk").values())
    return {"jobs": jobs, "attempts": attempts}


def stop(workers: WorkerProcesses, procs: list[subprocess.Popen[bytes]]) -> list[int | None]:
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    codes: list[int | None] = []
    for proc in procs:
        try:
            codes.append(proc.wait(timeout=20))
        except subprocess.TimeoutExpired:
            codes.append(None)
    return codes


def test_a_partitioned_workers_late_acks_are_fenced_off_after_rescue(
    worker_processes: WorkerProcesses, link: VethNamespace, tmp_path: Path
) -> None:
    workers = worker_processes
    marker_dir = tmp_path / "markers"
    marker_dir.mkdir()
    host, port = connection.settings_dict["HOST"] or "127.0.0.1", connection.settings_dict["PORT"]
    default_port = 3306 if connection.vendor == "mysql" else 5432
    with TcpForwarder(link.host_ip, (host, int(port or default_port))) as forwarder:
        env = workers.env()
        env["DATABASE_URL"] = database_url_via(forwarder.address)
        lease = str(LEASE_SECONDS)
        partitioned = start_in_namespace(
            workers,
            link,
            env,
            *("--queues", f"default:{JOBS}", "--lease-seconds", lease, "--no-scheduler"),
            *("--name", f"partitioned-{link.name}"),
        )
        node = wait_until(
            lambda: Node.objects.filter(name=f"partitioned-{link.name}").first(),
            workers,
            timeout=START_TIMEOUT,
            alive=[partitioned],
            what="the partitioned worker's Node row",
        )
        # Its connections really go through the namespace's link.
        assert node.pid == partitioned.pid
        assert link.pids() == [partitioned.pid]
        assert forwarder.accepted >= 1

        ids = [
            partition_slow.delay(first_seconds=FIRST_ATTEMPT_SECONDS, marker_dir=str(marker_dir)).pk
            for _ in range(JOBS)
        ]
        wait_until(
            lambda: len(markers(marker_dir, "started", ids, 1, partitioned.pid)) == JOBS,
            workers,
            timeout=START_TIMEOUT,
            alive=[partitioned],
            what="the partitioned worker started every job",
        )
        held = Job.objects.filter(pk__in=ids, state=State.LEASED, leased_by_id=node.pk)
        assert held.count() == JOBS
        tokens = dict(held.values_list("pk", "lease_token"))

        # -- the partition ------------------------------------------------------------------
        link.cut()
        # After the cut: a heartbeat stamped later than this was sent over a dead link.
        cut_at = timezone.now()
        # The handlers were mid-flight when the link went: their outcomes are all to come.
        assert not markers(marker_dir, "finished", ids, 1, partitioned.pid), (
            "a first attempt finished before the cut; the machine is too slow for this test"
        )
        rescuers = [
            workers.start("--queues", f"default:{JOBS}", "--lease-seconds", lease, "--no-scheduler")
            for _ in range(2)
        ]
        wait_until(
            lambda: Job.objects.filter(pk__in=ids, state=State.COMPLETED).count() == JOBS,
            workers,
            timeout=45,
            alive=[partitioned, *rescuers],
            what="the rescuers completed every job while the partition lasts",
            interval=0.1,
        )
        # Meanwhile the partitioned worker's handlers returned: their outcomes wait to be
        # written, behind connections that hang.
        wait_until(
            lambda: len(markers(marker_dir, "finished", ids, 1, partitioned.pid)) == JOBS,
            workers,
            timeout=30,
            alive=[partitioned],
            what="the partitioned worker's handlers returned",
        )
        node.refresh_from_db()
        assert node.last_heartbeat_at is not None
        assert node.last_heartbeat_at < cut_at, "a heartbeat got through the cut link"
        assert not events(workers, partitioned, "rejected")
        assert partitioned.poll() is None, logs_of(workers, [partitioned])
        rescuer_nodes = {
            n.name: n.pid for n in Node.objects.filter(pid__in=[p.pid for p in rescuers])
        }
        before = snapshot(ids)
        for job_id, job in before["jobs"].items():
            assert job["state"] == State.COMPLETED
            assert job["attempts"] == 2
            assert job["leased_by_id"] is None
            assert job["lease_expires_at"] is None
            # The rescuer's retry wrote the result, under a new lease.
            assert job["result"]["attempt"] == 2
            assert job["result"]["pid"] in rescuer_nodes.values()
            assert job["lease_token"] != tokens[job_id]
        for job_id in ids:
            history = [
                (a["number"], a["outcome"], a["node"])
                for a in before["attempts"]
                if a["job_id"] == job_id
            ]
            assert len(history) == 2, history
            # The lost attempt is on record under the partitioned node, then the retry.
            assert history[0] == (1, Outcome.LOST, node.name)
            assert history[1][:2] == (2, Outcome.COMPLETED)
            assert history[1][2] in rescuer_nodes
        lost = Attempt.objects.filter(job_id__in=ids, outcome=Outcome.LOST)
        assert all(a.error_class.endswith("LeaseExpired") for a in lost)

        # -- the link comes back --------------------------------------------------------------
        link.restore()
        restored_at = timezone.now()
        partition_seconds = (restored_at - cut_at).total_seconds()
        rejected = wait_until(
            lambda: (
                found if len(found := events(workers, partitioned, "rejected")) >= JOBS else None
            ),
            workers,
            timeout=45,
            alive=[partitioned],
            what="the partitioned worker's late acknowledgements were rejected",
            interval=0.1,
        )
        # It is healthy again: its heartbeat reaches the database.
        wait_until(
            lambda: Node.objects.filter(pk=node.pk, last_heartbeat_at__gt=restored_at).exists(),
            workers,
            timeout=30,
            alive=[partitioned],
            what="the partitioned worker's heartbeat after the link came back",
        )
        resumed_seconds = (timezone.now() - restored_at).total_seconds()

        # Each late acknowledgement was the completion of the first attempt, and was refused.
        assert sorted(r["job_id"] for r in rejected) == sorted(ids), rejected
        assert {r["outcome"] for r in rejected} == {Outcome.COMPLETED}
        assert {r["node"] for r in rejected} == {node.name}
        assert {r["level"] for r in rejected} == {"WARNING"}
        # ... and changed nothing: not the job rows, not the attempts (no second completion).
        assert snapshot(ids) == before
        assert Attempt.objects.filter(job_id__in=ids, outcome=Outcome.COMPLETED).count() == JOBS
        completed_by_partitioned = [
            r for r in events(workers, partitioned, "completed") if r["job_id"] in ids
        ]
        assert completed_by_partitioned == []
        assert not Job.objects.filter(state=State.LEASED).exists()
        # A real cut: the partitioned worker's statements hung and then went through; it
        # never saw a database error (dropped connections are test_database_restart's case).
        assert "database error" not in workers.log(partitioned), logs_of(workers, [partitioned])

        codes = stop(workers, [partitioned, *rescuers])
        assert codes == [0, 0, 0], logs_of(workers, [partitioned, *rescuers])
        # Its own tally agrees: nothing it ran was recorded, three outcomes were refused.
        stopped = [
            json.loads(line)
            for line in workers.log(partitioned).splitlines()
            if line.startswith("{") and "stopped after" in line
        ]
        assert stopped, logs_of(workers, [partitioned])
        assert (stopped[-1]["outcomes"], stopped[-1]["rejected"]) == ({}, JOBS), stopped[-1]
        assert not Node.objects.exists()
        assert snapshot(ids) == before
        record_figures(
            "network partition",
            jobs_rescued=JOBS,
            late_acks_rejected=len(rejected),
            link_down_seconds=round(partition_seconds, 1),
            heartbeat_back_seconds=round(resumed_seconds, 1),
            rescuers=len(rescuer_nodes),
        )
