"""The ceiling: pgbench claiming and acknowledging jobs on a minimal table, and a minimal
queue run by pgbench.

The table and the claim are ``benchmarks/run.py``'s raw SQL counterpart
(``RawCeiling``): the shape of durable_jobs' claim, by priority then FIFO through a
partial index. pgbench runs, with one client per "worker":

- the claim with the acknowledgement in the same statement, 1, 10 (the batch a worker
  at concurrency 10 claims) and 100 jobs per statement, on a queue filled beforehand;
- *the pgbench queue*: a minimal durable queue, each script run inserting 10 jobs,
  claiming 10 (``FOR UPDATE SKIP LOCKED``, leased under a token) and acknowledging
  them, three statements that each commit.

No Python and no process start-up are in the way: this is what PostgreSQL on this
machine allows, to read every system's drain against, and the queue is what a
durable queue costs it. The CPU time of the pgbench process and of PostgreSQL's
processes is measured over each pgbench run (``benchmarks/cpu.py``).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import cpu, harness
from benchmarks.peers.base import BASE_TIMEOUT, Adapter
from benchmarks.run import RawCeiling

TPS = re.compile(r"^tps = ([0-9.]+)", re.MULTILINE)
TABLE = RawCeiling.TABLE


@dataclass(frozen=True)
class Variant:
    """One pgbench run: what its script does, and how many jobs it works through."""

    key: str
    label: str
    per_statement: int
    #: Its jobs are this many times the drains' N: more for the fast ceilings, so that
    #: they run for a second or more. The queue works through N, as a drain does: each
    #: claim walks the index entries its predecessors left behind (nothing vacuums
    #: during a run), so its cost per job grows with the jobs done and is only
    #: comparable with a drain's over the same number.
    scale: int
    #: The queue (insert, claim, acknowledge) rather than the claim-and-ack statement.
    queue: bool = False


VARIANTS = (
    Variant("claim_1", "pgbench ceiling, 1 job per statement", 1, 1),
    Variant("claim_10", "pgbench ceiling, 10 jobs per statement", 10, 5),
    Variant("claim_100", "pgbench ceiling, 100 jobs per statement", 100, 20),
    Variant("queue_10", "pgbench queue, 10 jobs per statement", 10, 1, queue=True),
)
#: The queue's script: three statements, each its own transaction (pgbench runs them in
#: autocommit). The lease token is random, and distinct between clients (pgbench's
#: ``client_id`` runs from 0 to the number of clients - 1).
QUEUE_SCRIPT = f"""
\\set token random(1, 1000000000) * 1000 + :client_id
INSERT INTO {TABLE} (queue, state, payload)
    SELECT 'default', 'queued', jsonb_build_object('n', n) FROM generate_series(1, 10) AS n;
WITH claimed AS (
    SELECT id FROM {TABLE}
    WHERE queue = 'default' AND state = 'queued' AND available_at <= now()
    ORDER BY priority DESC, available_at, id
    LIMIT 10
    FOR UPDATE SKIP LOCKED
)
UPDATE {TABLE} SET state = 'leased', lease = :token
FROM claimed WHERE {TABLE}.id = claimed.id;
UPDATE {TABLE} SET state = 'done', finished_at = now()
WHERE state = 'leased' AND lease = :token;
"""


class Pgbench(Adapter):
    key = "pgbench"
    label = "pgbench ceiling"
    workers_note = (
        "`pgbench -n -M prepared` with 1 or 2 clients (`-c`, `-j`) and a fixed number "
        "of transactions (`-t`): the claim-and-ack ceiling one statement each, the queue "
        "three (insert 10, claim 10, acknowledge them), each committing"
    )
    bulk_note = "n/a"
    finish_note = "jobs acknowledged ÷ pgbench's run time from its `tps` (without connection time)"

    def setup(self) -> dict[str, Any]:
        binary = shutil.which("pgbench")
        if binary is None:
            self.set_up = False
            return {"error": "pgbench not found on PATH"}
        harness.create_postgres_database(self.database_options(), replace=False)
        self.created_database = True
        output = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, check=True
        ).stdout
        version = re.search(r"\d+(\.\d+)+", output)
        self.facts = {"versions": {"pgbench": version.group(0) if version else output.strip()}}
        self.set_up = True
        return {"facts": self.facts}

    def enqueue_one_per_tx(self, count: int) -> dict[str, Any]:
        return {"not_supported": "a ceiling for the drain only"}

    def enqueue_bulk(self, count: int) -> dict[str, Any]:
        return {"not_supported": "a ceiling for the drain only"}

    def latency(self, samples: int) -> dict[str, Any]:
        return {"not_supported": "a ceiling for the drain only"}

    def teardown(self) -> None:
        if self.created_database:
            harness.drop_postgres_database(self.database_options())
            self.created_database = False

    def drain(self, jobs: int, workers: int) -> dict[str, Any]:
        """Every variant with ``workers`` clients, under ``variants``; ``rate`` is the
        claim-and-ack at one job per statement."""
        if not self.set_up:
            return {"error": "pgbench is not set up"}
        try:
            variants = {variant.key: self._run(variant, jobs, workers) for variant in VARIANTS}
        except (RuntimeError, subprocess.SubprocessError, OSError) as exc:
            harness.log(f"[pgbench] drain failed: {exc}")
            return {"error": str(exc)}
        single = variants["claim_1"]
        return {
            "workers": workers,
            "jobs": single["jobs"],
            "rate": single["rate"],
            "variants": variants,
        }

    def _run(self, variant: Variant, jobs: int, clients: int) -> dict[str, Any]:
        """Run pgbench until each client has run its share of ``jobs`` times the variant's
        scale; jobs/s from the rows it acknowledged, and the CPU time it cost per 1,000."""
        size = variant.per_statement
        transactions = max(1, jobs * variant.scale // (clients * size))
        raw = RawCeiling(self.database_options(), self.dbname)  # creates the table afresh
        try:
            if variant.queue:
                script = self._prepare_queue(raw)
            else:
                # A statement's worth more per client, so that none runs short near the end.
                script = self._prepare_claim(raw, size, (transactions + 1) * clients * size)
            output, used = self._pgbench(script, clients, transactions)
            done = raw.conn.execute(
                f"SELECT count(*) FROM {TABLE} WHERE state = 'done'"
            ).fetchone()[0]
        finally:
            raw.close()
        match = TPS.search(output)
        if match is None:
            raise RuntimeError(f"no tps in pgbench's output: {output[-500:]}")
        if not done:
            raise RuntimeError(f"pgbench acknowledged no job: {output[-500:]}")
        seconds = clients * transactions / float(match.group(1))
        worker_cpu, db_cpu = used["worker_cpu_s"], used["db_cpu_s"]
        return {
            "label": variant.label,
            "per_statement": size,
            "jobs": done,
            "rate": done / seconds,
            "seconds": seconds,
            "worker_cpu_s": worker_cpu,
            "db_cpu_s": db_cpu,
            "worker_cpu_per_1000": None if worker_cpu is None else worker_cpu / done * 1000,
            "db_cpu_per_1000": None if db_cpu is None else db_cpu / done * 1000,
        }

    @staticmethod
    def _prepare_claim(raw: RawCeiling, size: int, jobs: int) -> str:
        """Fill the table with ``jobs`` jobs; the claim-and-ack script."""
        raw.conn.execute(
            f"INSERT INTO {TABLE} (queue, state, payload) "
            "SELECT 'default', 'queued', jsonb_build_object('n', n) "
            "FROM generate_series(1, %s) AS n",
            (jobs,),
        )
        raw.analyze()
        statement = raw.CLAIM_AND_ACK if size == 1 else raw.claim_and_ack_many(size)
        return " ".join(statement.split()) + ";\n"

    @staticmethod
    def _prepare_queue(raw: RawCeiling) -> str:
        """The lease column, and the small partial index the acknowledgement finds the
        leased jobs through; the queue's script."""
        raw.conn.execute(f"ALTER TABLE {TABLE} ADD COLUMN lease bigint")
        raw.conn.execute(f"CREATE INDEX ON {TABLE} (lease) WHERE state = 'leased'")
        raw.analyze()
        return QUEUE_SCRIPT.lstrip()

    def _pgbench(
        self, script: str, clients: int, transactions: int
    ) -> tuple[str, dict[str, float | None]]:
        """pgbench's output, and the CPU seconds of the pgbench process (``worker_cpu_s``)
        and of PostgreSQL's processes (``db_cpu_s``) while it ran."""
        options = self.database_options()
        pids: list[int] = []
        meter = cpu.DrainMeter(cpu.tree(lambda: pids), cpu.server("postgres"))
        with tempfile.TemporaryDirectory(prefix="peers_pgbench_") as scratch:
            path = Path(scratch) / "script.sql"
            path.write_text(script)
            command = [
                "pgbench",
                "-n",  # no vacuum of pgbench's own tables: there are none
                "-M",
                "prepared",
                "-c",
                str(clients),
                "-j",
                str(clients),
                "-t",
                str(transactions),
                "-f",
                str(path),
                *_libpq_arguments(options),
            ]
            with meter:
                process = subprocess.Popen(
                    command,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    text=True,
                    start_new_session=True,  # its own process group, ended by pid below
                )
                pids.append(process.pid)
                started = time.monotonic()
                try:
                    timeout = min(BASE_TIMEOUT * 5, max(10.0, self.context.remaining()))
                    output, _ = process.communicate(timeout=timeout)
                except subprocess.TimeoutExpired:
                    raise RuntimeError(
                        f"pgbench took longer than {time.monotonic() - started:.0f}s"
                    ) from None
                finally:
                    harness.kill_group(process)  # type: ignore[arg-type]
        if process.returncode != 0:
            raise RuntimeError(f"pgbench exited with {process.returncode}: {output[-500:]}")
        return output, meter.whole()


def _libpq_arguments(options: argparse.Namespace) -> list[str]:
    return [
        "-h",
        options.pg_host,
        "-p",
        str(options.pg_port),
        "-U",
        options.pg_user,
        options.pg_dbname,
    ]
