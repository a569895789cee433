"""``manage.py demo``: enqueue a mix of jobs, run a real worker until they finish, show the outcome.

1. Sync the durable schedules declared in settings and run the weekly one now.
2. Enqueue quick jobs, one that fails twice before it succeeds, one that always
   fails (and ends ``dead``), one delayed by a second, a Django ``@task``
   (through Django's own ``.enqueue()``), and a batch of price rows on a
   rate-limited queue whose callback runs once when all rows are final.
3. Start ``manage.py runworker`` as a separate process, exactly as you would in
   production, and relay its log lines. The worker also runs the scheduler
   heartbeat, which enqueues the 1-second ``price-snapshot`` schedule.
4. Poll the database until every job is final (completed, dead or cancelled) and
   the heartbeat has enqueued a scheduled job.
5. Stop the worker with SIGTERM (a graceful stop) and print each job's attempts
   and each schedule's state.

Pending migrations are applied first (``manage.py migrate``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta
from typing import Any

from catalog.jobs import import_price_row, price_import_finished
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from durable_jobs import Batch, Scheduler
from durable_jobs.models import Attempt, Job, Schedule
from durable_jobs.schedules.sync import sync_schedules
from shop.jobs import charge_card, release_reservation, send_receipt, sync_inventory
from shop.tasks import email_order_summary

FINAL_STATES = ("completed", "dead", "cancelled")
WORKER_QUEUES = "default,emails,imports,partners"
#: Occurrences of the 1-second schedule the demo waits to see processed.
SCHEDULED_RUNS = 1
STOP_TIMEOUT = 30.0


class Command(BaseCommand):
    help = "Enqueue demo jobs, run a real worker until they are all final, and print a report."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--timeout",
            type=float,
            default=60.0,
            help="Seconds to wait for every job to finish (default: 60).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        self.migrate()
        started = Job.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
        ids = self.start_schedules() + self.enqueue_jobs()
        worker = self.start_worker()
        try:
            problem = self.wait_until_final(ids, worker, options["timeout"], started)
        finally:
            code = self.stop_worker(worker)
        self.print_report(ids + self.scheduled_since(started, exclude=ids))
        self.print_task_result()
        self.print_schedules()
        if problem:
            raise CommandError(problem)
        if code != 0:
            raise CommandError(f"The worker exited with status {code} instead of 0.")
        self.stdout.write(self.style.SUCCESS("\nEvery demo job reached a final state."))

    def migrate(self) -> None:
        # Here rather than a `migrate` command before: one Django start less on a first run.
        executor = MigrationExecutor(connection)
        if executor.migration_plan(executor.loader.graph.leaf_nodes()):
            self.stdout.write("Applying migrations (manage.py migrate) ...")
            call_command("migrate", interactive=False, verbosity=0)

    def start_schedules(self) -> list[int]:
        result = sync_schedules()
        self.stdout.write(
            f"Schedules synced from settings: created {result.created or '-'}, "
            f"updated {result.updated or '-'}."
        )
        for schedule in Schedule.objects.order_by("pk"):
            self.stdout.write(
                f"  {schedule.pk}: {schedule.expression} ({schedule.timezone}), "
                f"next run {schedule.next_run_at:%Y-%m-%d %H:%M:%S} UTC"
            )
        # The weekly schedule would wait until Sunday; run one occurrence now.
        job = Scheduler().run("ott-release-refresh")
        self.stdout.write(f"Ran the weekly schedule now: job {job.pk}.\n")
        return [job.pk]

    def scheduled_since(self, started: int, exclude: list[int]) -> list[int]:
        jobs = Job.objects.filter(pk__gt=started, name="catalog.price_snapshot").exclude(
            pk__in=exclude
        )
        return list(jobs.order_by("pk").values_list("pk", flat=True))

    def enqueue_jobs(self) -> list[int]:
        jobs = [send_receipt.delay(order_id=order_id) for order_id in range(1001, 1006)]
        jobs.append(charge_card.delay(order_id=1001, amount_cents=4999))
        jobs.append(sync_inventory.delay(sku="MUG-RED-XL"))
        jobs.append(release_reservation.using(run_in=timedelta(seconds=1)).delay(order_id=1002))
        self.stdout.write(
            f"Enqueued {len(jobs)} jobs: 5 x send_receipt, charge_card (fails twice, then "
            "succeeds), sync_inventory (always fails), release_reservation (runs in 1 s)."
        )
        # Django's own API: a TaskResult, whose id is the durable job's.
        self.task_result = email_order_summary.enqueue(order_id=1001, lines=3)
        self.stdout.write(
            f"Enqueued Django task {email_order_summary.module_path} with .enqueue(): "
            f"result {self.task_result.id}, {self.task_result.status}."
        )
        jobs.append(Job.objects.get(pk=int(self.task_result.id)))
        feed = {"MUG-RED": 1299, "MUG-BLUE": 1299, "TEE-S": 2450, "TEE-M": 2450, "CAP": 0}
        rows = [import_price_row.prepare(sku=sku, cents=cents) for sku, cents in feed.items()]
        batch = Batch(
            "partner price feed", on_complete=price_import_finished.prepare(feed="partner-a")
        ).enqueue(rows)
        self.stdout.write(
            f"Enqueued batch {batch.pk}: {batch.total} price rows on the rate-limited "
            "'partners' queue (4 starts/s; the CAP row fails), with a callback when all "
            "are final.\n"
        )
        self.batch_id = batch.pk
        row_ids = list(Job.objects.filter(batch=batch).values_list("pk", flat=True))
        return [j.pk for j in jobs] + row_ids

    def start_worker(self) -> subprocess.Popen[str]:
        command = [sys.executable, "manage.py", "runworker", "--queues", WORKER_QUEUES]
        self.stdout.write(f"Starting a worker: {' '.join(command[1:])}\n")
        worker = subprocess.Popen(
            command,
            cwd=settings.BASE_DIR,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            # Its own process group: Ctrl-C here must not also signal the worker, which
            # this command stops itself (a second signal would make it exit at once).
            process_group=0,
        )
        threading.Thread(target=self.relay, args=(worker,), daemon=True).start()
        return worker

    def relay(self, worker: subprocess.Popen[str]) -> None:
        assert worker.stdout is not None
        for line in worker.stdout:
            self.stdout.write(f"  worker | {line.rstrip()}")

    def wait_until_final(
        self, ids: list[int], worker: subprocess.Popen[str], timeout: float, started: int
    ) -> str:
        """Poll until every job is final and the heartbeat has enqueued a scheduled job;
        return an explanation if that did not happen."""
        deadline = time.monotonic() + timeout
        while True:
            waiting = Job.objects.filter(pk__in=ids).exclude(state__in=FINAL_STATES)
            pending = list(waiting.order_by("pk").values_list("pk", "state"))
            scheduled = Job.objects.filter(
                pk__in=self.scheduled_since(started, exclude=ids), state="completed"
            ).count()
            callback = (
                Job.objects.filter(name="catalog.price_import_finished", pk__gt=started)
                .values_list("pk", "state")
                .first()
            )
            if callback is not None and callback[0] not in ids:
                ids.append(callback[0])  # report it, and wait for it like the others
                continue
            if not pending and scheduled >= SCHEDULED_RUNS and callback is not None:
                return ""
            summary = ", ".join(f"#{pk} ({state})" for pk, state in pending) or (
                f"{scheduled} of {SCHEDULED_RUNS} scheduled price-snapshot jobs completed"
            )
            if worker.poll() is not None:
                return f"The worker exited early (status {worker.returncode}); waiting: {summary}."
            if time.monotonic() > deadline:
                return (
                    f"Timed out after {timeout:g} s with jobs still unfinished: {summary}. "
                    "The worker's log above shows what it was doing."
                )
            time.sleep(0.25)

    def stop_worker(self, worker: subprocess.Popen[str]) -> int:
        if worker.poll() is None:
            self.stdout.write("\nStopping the worker with SIGTERM (graceful shutdown) ...")
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.stderr.write(f"The worker did not stop within {STOP_TIMEOUT:g} s; killing it.")
                worker.kill()
                worker.wait()
        time.sleep(0.1)  # let the relay thread print the worker's last lines
        self.stdout.write(f"The worker exited with status {worker.returncode}.")
        return worker.returncode

    def print_report(self, ids: list[int]) -> None:
        jobs = Job.objects.filter(pk__in=ids).order_by("pk").prefetch_related("attempt_set")
        headers = ("JOB", "HANDLER", "STATE", "ATTEMPTS", "OUTCOME OF EACH ATTEMPT")
        rows = [
            (
                str(job.pk),
                job.name,
                job.state,
                str(job.attempts),
                [describe(a) for a in job.attempt_set.all()] or ["(never ran)"],
            )
            for job in jobs
        ]
        widths = [max(len(headers[i]), *(len(row[i]) for row in rows)) for i in range(4)]
        styles = {"completed": self.style.SUCCESS, "dead": self.style.ERROR}

        def line(cells: tuple[str, ...], state: str = "") -> str:
            padded = [cell.ljust(width) for cell, width in zip(cells, widths, strict=False)]
            if state in styles:
                padded[2] = styles[state](padded[2])
            return "  ".join([*padded, *cells[4:]]).rstrip()

        self.stdout.write("")
        self.stdout.write(line(headers))
        for job_id, name, state, attempts, outcomes in rows:
            self.stdout.write(line((job_id, name, state, attempts, outcomes[0]), state))
            for outcome in outcomes[1:]:
                self.stdout.write(line(("", "", "", "", outcome)))

    def print_task_result(self) -> None:
        result = self.task_result
        result.refresh()
        self.stdout.write(
            f"\nDjango task result {result.id}: {result.status}, return value "
            f"{result.return_value if result.status == 'SUCCESSFUL' else '-'}, "
            f"worker {', '.join(result.worker_ids) or '-'}."
        )

    def print_schedules(self) -> None:
        self.stdout.write("")
        rows = [("SCHEDULE", "EXPRESSION", "TIMEZONE", "RUNS", "LAST STATUS", "NEXT RUN (UTC)")]
        for s in Schedule.objects.order_by("pk"):
            next_run = f"{s.next_run_at:%Y-%m-%d %H:%M:%S}" if s.next_run_at else "-"
            rows.append(
                (s.pk, s.expression, s.timezone, str(s.run_count), s.last_status or "-", next_run)
            )
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
        for row in rows:
            self.stdout.write(
                "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)).rstrip()
            )


def describe(attempt: Attempt) -> str:
    """``#2 failed: ConnectionError: payment gateway timed out`` (first line, shortened)."""
    text = f"#{attempt.number} {attempt.outcome}"
    if attempt.error_message:
        error = attempt.error_message.splitlines()[0]
        text += f": {error[:77] + '...' if len(error) > 80 else error}"
    return text
