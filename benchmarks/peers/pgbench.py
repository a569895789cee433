"""The ceiling: pgbench claiming and acknowledging jobs on a minimal table.

The table and the claim are ``benchmarks/run.py``'s raw SQL counterpart
(``RawCeiling``): the shape of durable_jobs' claim, by priority then FIFO through a
partial index, with the acknowledgement in the same statement. pgbench runs it with
one client per "worker", one job per statement and then 100 jobs per statement, on
a queue filled beforehand. No Python and no process start-up are in the way: this is
what PostgreSQL on this machine allows, to read every system's drain against.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks import harness
from benchmarks.peers.base import BASE_TIMEOUT, Adapter
from benchmarks.run import RawCeiling

#: Jobs per statement of the batch variant.
BATCH = 100
#: The batch variant's queue is this many times the drains' N, so that it runs for a
#: few seconds too.
BATCH_SCALE = 20
TPS = re.compile(r"^tps = ([0-9.]+)", re.MULTILINE)


class Pgbench(Adapter):
    key = "pgbench"
    label = "pgbench ceiling"
    workers_note = (
        "`pgbench -n -M prepared` with 1 or 2 clients (`-c`, `-j`) and a fixed number "
        "of transactions (`-t`), one statement each"
    )
    bulk_note = "n/a"
    finish_note = "pgbench's `tps` (without connection time) times the jobs per statement"

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
        """Both variants with ``workers`` clients: ``rate`` one job per statement,
        ``batch_rate`` BATCH jobs per statement."""
        if not self.set_up:
            return {"error": "pgbench is not set up"}
        try:
            single = self._run(jobs, workers, 1)
            batch = self._run(jobs * BATCH_SCALE, workers, BATCH)
        except (RuntimeError, subprocess.SubprocessError, OSError) as exc:
            harness.log(f"[pgbench] drain failed: {exc}")
            return {"error": str(exc)}
        return {
            "workers": workers,
            "jobs": single["jobs"],
            "rate": single["rate"],
            "batch_jobs": batch["jobs"],
            "batch_rate": batch["rate"],
            "batch_size": BATCH,
        }

    def _run(self, jobs: int, clients: int, per_statement: int) -> dict[str, Any]:
        """Fill the table with ``jobs`` jobs (and a statement's worth more per client, so
        that no statement runs short near the end), then run pgbench until each client
        has run its share of statements; jobs/s from the rows it acknowledged."""
        options = self.database_options()
        transactions = max(1, jobs // (clients * per_statement))
        raw = RawCeiling(options, self.dbname)  # creates the table afresh
        try:
            raw.conn.execute(
                f"INSERT INTO {raw.TABLE} (queue, state, payload) "
                "SELECT 'default', 'queued', jsonb_build_object('n', n) "
                "FROM generate_series(1, %s) AS n",
                (transactions * clients * per_statement + clients * per_statement,),
            )
            raw.analyze()
            statement = (
                raw.CLAIM_AND_ACK if per_statement == 1 else raw.claim_and_ack_many(per_statement)
            )
            output = self._pgbench(statement, clients, transactions)
            done = raw.conn.execute(
                f"SELECT count(*) FROM {raw.TABLE} WHERE state = 'done'"
            ).fetchone()[0]
        finally:
            raw.close()
        match = TPS.search(output)
        if match is None:
            raise RuntimeError(f"no tps in pgbench's output: {output[-500:]}")
        tps = float(match.group(1))
        seconds = clients * transactions / tps
        return {"jobs": done, "rate": done / seconds, "seconds": seconds}

    def _pgbench(self, statement: str, clients: int, transactions: int) -> str:
        options = self.database_options()
        with tempfile.TemporaryDirectory(prefix="peers_pgbench_") as scratch:
            script = Path(scratch) / "claim.sql"
            script.write_text(" ".join(statement.split()) + ";\n")
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
                str(script),
                *_libpq_arguments(options),
            ]
            process = subprocess.Popen(
                command,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                text=True,
                start_new_session=True,  # its own process group, ended by pid below
            )
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
        return output


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
