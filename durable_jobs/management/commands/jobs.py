"""``manage.py jobs``: inspect jobs and act on them from a terminal or a script.

Every read has ``--json`` (the keys of :func:`durable_jobs.serializers.job_to_dict`);
every write goes through the state machine (:mod:`durable_jobs.actions`).
"""

from __future__ import annotations

import datetime
import json
import sys
from collections.abc import Callable
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import OperationalError, ProgrammingError
from django.db.models import QuerySet
from django.utils import timezone

from durable_jobs import actions, health, overview, serializers
from durable_jobs.flow import queues as flow_queues
from durable_jobs.flow.why import explain
from durable_jobs.lifecycle.states import State
from durable_jobs.maintenance.pruner import prune
from durable_jobs.management.arguments import (
    days_value,
    id_value,
    limit_value,
    max_lag_value,
    node_value,
    queue_value,
    since_value,
    state_value,
    text_value,
)
from durable_jobs.management.output import emit_json, printable_output, table
from durable_jobs.management.progress import ProgressBar
from durable_jobs.models import Batch, Job


class Command(BaseCommand):
    help = (
        "Inspect durable jobs, queues and batches; retry, cancel, discard, delete or prune "
        "jobs; pause and resume queues."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", metavar="ACTION")

        def filters(p: CommandParser) -> None:
            p.add_argument("--state", type=state_value, action="append", help="Repeatable.")
            p.add_argument("--queue", type=text_value)
            p.add_argument("--name", type=text_value, help="The handler's registered name.")
            p.add_argument(
                "--since", type=since_value, help="Created since: 30m, 2h, 7d or an aware ISO time."
            )
            p.add_argument("--batch", type=id_value, help="Jobs of this batch (an id).")

        stats = sub.add_parser("stats", help="Counts per queue and state, lag, nodes.")
        stats.add_argument("--json", action="store_true")
        listing = sub.add_parser("list", help="Jobs, newest first (the default).")
        filters(listing)
        listing.add_argument("--limit", type=limit_value, default=50)
        listing.add_argument("--json", action="store_true")
        show = sub.add_parser("show", help="One job with every attempt.")
        show.add_argument("id", type=id_value)
        show.add_argument("--json", action="store_true")
        errors = sub.add_parser("errors", help="Failures grouped by error, newest first.")
        errors.add_argument("--since", type=since_value, default=None, help="Default: 24h.")
        errors.add_argument("--limit", type=limit_value, default=20)
        errors.add_argument("--json", action="store_true")
        for action, text in (
            ("run", "Start delayed or retrying jobs now, without waiting for their time."),
            ("retry", "Put dead, cancelled or retrying jobs back in the queue, now."),
            ("cancel", "Cancel waiting or running jobs."),
            ("discard", "Move waiting jobs to dead."),
            ("delete", "Delete jobs and their attempts."),
        ):
            write = sub.add_parser(action, help=text)
            write.add_argument("ids", type=id_value, nargs="*")
            write.add_argument("--all", action="store_true", help="Every job the filters match.")
            filters(write)
            write.add_argument("--yes", action="store_true", help="Do not ask for confirmation.")
        prune_parser = sub.add_parser("prune", help="Delete finished jobs older than N days.")
        prune_parser.add_argument("--days", type=days_value, default=None)
        why = sub.add_parser("why", help="Why a waiting job has not started.")
        why.add_argument("id", type=id_value)
        why.add_argument("--json", action="store_true")
        queues = sub.add_parser("queues", help="Queues: paused or not, limits, counts.")
        queues.add_argument("--json", action="store_true")
        for action, text in (
            ("pause", "Stop new starts from a queue on every node; running jobs finish."),
            ("resume", "Let a paused queue start jobs again."),
        ):
            control = sub.add_parser(action, help=text)
            control.add_argument("queue", type=queue_value, nargs="?")
            control.add_argument("--all", action="store_true", help="Every known queue.")
        batches = sub.add_parser("batches", help="Batches with their progress, newest first.")
        batches.add_argument("--open", action="store_true", help="Only unfinished batches.")
        batches.add_argument("--limit", type=limit_value, default=50)
        batches.add_argument("--json", action="store_true")
        check = sub.add_parser(
            "health",
            help="Exit 0 if the database answers, a worker is live and no queue lags; else 1.",
        )
        check.add_argument(
            "--max-lag",
            type=max_lag_value,
            metavar="SECONDS",
            help="Also fail if a running queue's oldest available job waited longer.",
        )
        check.add_argument(
            "--node", type=node_value, metavar="NAME", help="This node must be live (not any)."
        )
        check.add_argument("--json", action="store_true", help='One object: {"ok", "checks"}.')

    def execute(self, *args: Any, **options: Any) -> Any:
        if options.get("action") == "health":
            # A probe reports the database itself: the system checks would reach it first
            # (Django 6.1's JSONField check queries it) and fail with a traceback.
            options["skip_checks"] = True
        return super().execute(*args, **options)

    def handle(self, *args: Any, **options: Any) -> None:
        self.stdout = printable_output(self.stdout)
        action = options.get("action") or "list"
        if action == "list":
            options = {"state": None, "queue": None, "name": None, "since": None,
                       "batch": None, "limit": 50, "json": False, **options}  # fmt: skip
        try:
            getattr(self, f"do_{action}")(options)
        except (OperationalError, ProgrammingError) as exc:
            raise CommandError(
                f"Database error: {exc}. Has `manage.py migrate` been run for durable_jobs?"
            ) from None

    # -- reads ------------------------------------------------------------------------------

    def do_stats(self, options: dict[str, Any]) -> None:
        data = overview.overview()
        if options.get("json"):
            return emit_json(self.stdout, data)
        states = [s.value for s in State]
        rows = [
            [q["name"], "paused" if q["paused"] else "running",
             *(f"{q[s]}+" if s in q["capped"] else str(q[s]) for s in states),
             "-" if q["lag_seconds"] is None else f"{q['lag_seconds']:g}s"]
            for q in data["queues"]
        ]  # fmt: skip
        headers = ["QUEUE", "STATUS", *(s.upper() for s in states), "LAG"]
        table(self.stdout, headers, rows)
        throughput, failures = data["throughput"], data["failure_rate"]
        rate = "-" if failures["rate"] is None else f"{100 * failures['rate']:.1f}%"
        nodes = data["nodes"]
        self.stdout.write(
            f"\nFinished counts cover the last 24 hours. Last hour: {throughput['total']} "
            f"completed (peak {throughput['peak']}/min), {failures['failed']} failed "
            f"attempts, failure rate {rate}.\n"
            f"Nodes: {len(nodes['live'])} live, {len(nodes['stale'])} stale."
        )
        history = data["history"]
        since = f" (only the newest, since {history['since']})" if history["capped"] else ""
        self.stdout.write(f"\nAttempts per handler, last 24 hours{since}:")
        rows = [[h["name"], str(h["attempts"]), str(h["failed"]), f"{h['p50_ms']:g}ms",
                 f"{h['p95_ms']:g}ms"] for h in history["handlers"]]  # fmt: skip
        table(self.stdout, ["HANDLER", "ATTEMPTS", "FAILED", "P50", "P95"], rows)

    def do_health(self, options: dict[str, Any]) -> None:
        report = health.run_checks(node=options["node"], max_lag=options["max_lag"])
        if options["json"]:
            emit_json(self.stdout, report.as_dict())
        else:
            for check in report.checks:
                self.stdout.write(
                    check.line(), self.style.SUCCESS if check.ok else self.style.ERROR
                )
            self.stdout.write(report.summary())
        if not report.ok:
            sys.exit(1)

    def do_list(self, options: dict[str, Any]) -> None:
        jobs = self.matching(options).select_related("leased_by").order_by("-pk")
        jobs = jobs[: max(options["limit"], 0)]
        if options.get("json"):
            return emit_json(self.stdout, [serializers.job_to_dict(j) for j in jobs])
        rows = [
            [str(j.pk), j.name, j.queue, j.state, f"{j.attempts}/{j.max_retries + 1}",
             f"{j.created_at:%Y-%m-%d %H:%M:%S}", (j.last_error.splitlines() or [""])[0][:60]]
            for j in jobs
        ]  # fmt: skip
        table(
            self.stdout,
            ["ID", "NAME", "QUEUE", "STATE", "ATTEMPTS", "CREATED (UTC)", "LAST ERROR"],
            rows,
        )

    def do_show(self, options: dict[str, Any]) -> None:
        job = Job.objects.select_related("leased_by").filter(pk=options["id"]).first()
        if job is None:
            raise CommandError(f"No job with id {options['id']}.")
        data = serializers.job_to_dict(job, attempts=True)
        if options.get("json"):
            return emit_json(self.stdout, data)
        attempts = data.pop("attempts_detail")
        width = max(len(k) for k in data)
        for key, value in data.items():
            shown = json.dumps(value) if isinstance(value, dict | list) else value
            text = "" if shown is None else str(shown)
            # Continuation lines (a cause chain) stay in the value column.
            text = text.replace("\n", "\n" + " " * (width + 2))
            self.stdout.write(f"{key.ljust(width)}  {text}")
        for attempt in attempts:
            self.stdout.write(
                f"\nattempt {attempt['number']}: {attempt['outcome']} on {attempt['node'] or '-'}"
                f" at {attempt['started_at']} ({attempt['duration_ms']} ms)"
            )
            for part in ("error_message", "traceback", "log"):
                if attempt[part]:
                    self.stdout.write(attempt[part].rstrip())

    def do_errors(self, options: dict[str, Any]) -> None:
        since = options["since"] or timezone.now() - datetime.timedelta(days=1)
        found = overview.error_groups(since, options["limit"])
        if options.get("json"):
            return emit_json(self.stdout, found)
        rows = [[str(g["count"]), g["last_seen"][:19], g["error_class"], g["root_cause"][:70],
                 str(g["example_job"])] for g in found["groups"]]  # fmt: skip
        table(self.stdout, ["COUNT", "LAST SEEN", "ERROR", "ROOT CAUSE", "EXAMPLE JOB"], rows)
        if found["capped"]:
            self.stdout.write(
                f"\nMore failures than are read at once: counted since {found['since'][:19]}."
            )

    def do_why(self, options: dict[str, Any]) -> None:
        job = Job.objects.select_related("leased_by").filter(pk=options["id"]).first()
        if job is None:
            raise CommandError(f"No job with id {options['id']}.")
        reasons = explain(job)
        if options.get("json"):
            data = {"id": job.pk, "state": job.state, "reasons": [r.as_dict() for r in reasons]}
            return emit_json(self.stdout, data)
        self.stdout.write(f"Job {job.pk} ({job.name}, queue {job.queue}, {job.state}):")
        for reason in reasons:
            self.stdout.write(f"- {reason.message}")

    def do_queues(self, options: dict[str, Any]) -> None:
        data = serializers.queues()
        if options.get("json"):
            return emit_json(self.stdout, data)
        rows = [[q["name"], "paused" if q["paused"] else "running", q["rate"] or "-",
                 str(q["global_concurrency"] or "-"), str(q["waiting"]), str(q["leased"]),
                 str(q["live_nodes"])] for q in data]  # fmt: skip
        table(
            self.stdout,
            ["QUEUE", "STATUS", "RATE", "GLOBAL CONCURRENCY", "WAITING", "LEASED", "NODES"],
            rows,
        )

    def do_batches(self, options: dict[str, Any]) -> None:
        rows_qs = Batch.objects.order_by("-pk")
        if options["open"]:
            rows_qs = rows_qs.filter(finished_at__isnull=True)
        data = [serializers.batch_to_dict(b) for b in rows_qs[: max(options["limit"], 0)]]
        if options.get("json"):
            return emit_json(self.stdout, data)
        rows = [[str(b["id"]), b["name"], f"{b['done']}/{b['total']}", b["status"],
                 ", ".join(f"{k} {v}" for k, v in b["counts"].items()),
                 str(b["callback_job_id"] or "-")] for b in data]  # fmt: skip
        table(self.stdout, ["ID", "NAME", "DONE", "STATUS", "COUNTS", "CALLBACK JOB"], rows)

    # -- writes -----------------------------------------------------------------------------

    def do_pause(self, options: dict[str, Any]) -> None:
        self.control(options, "pause")

    def do_resume(self, options: dict[str, Any]) -> None:
        self.control(options, "resume")

    def control(self, options: dict[str, Any], verb: str) -> None:
        if options["all"] == bool(options["queue"]):
            raise CommandError(f"Give one queue, or --all: `jobs {verb} webhooks`.")
        if options["all"]:
            names = flow_queues.pause_all() if verb == "pause" else flow_queues.resume_all()
            done = "paused" if verb == "pause" else "resumed"
            self.stdout.write(f"{done}: {', '.join(names) if names else 'nothing to change'}.")
            return
        name = options["queue"]
        if verb == "pause":
            changed = flow_queues.pause(name)
            self.stdout.write(
                f"Queue {name!r} paused: no new starts on any node; running jobs finish."
                if changed
                else f"Queue {name!r} was already paused."
            )
        else:
            changed = flow_queues.resume(name)
            self.stdout.write(
                f"Queue {name!r} resumed." if changed else f"Queue {name!r} was not paused."
            )

    def do_run(self, options: dict[str, Any]) -> None:
        self.act(options, "run", actions.run_jobs, "not waiting for a later time")

    def do_retry(self, options: dict[str, Any]) -> None:
        self.act(options, "retry", actions.retry_jobs, "not dead, cancelled or retrying")

    def do_cancel(self, options: dict[str, Any]) -> None:
        self.act(options, "cancel", actions.cancel_jobs, "already finished")

    def do_discard(self, options: dict[str, Any]) -> None:
        self.act(options, "discard", actions.discard_jobs, "running or finished")

    def do_delete(self, options: dict[str, Any]) -> None:
        self.act(options, "delete", actions.delete_jobs, "running: cancel them first")

    def do_prune(self, options: dict[str, Any]) -> None:
        bar = ProgressBar(self.stderr, "pruned", None)
        while deleted := prune(days=options["days"]):
            bar.advance(deleted)
        bar.close()
        self.stdout.write(f"Pruned {bar.done} finished jobs.")

    def act(
        self,
        options: dict[str, Any],
        verb: str,
        action: Callable[[QuerySet[Job], actions.Progress], tuple[int, int]],
        why: str,
    ) -> None:
        has_filter = any(options.get(k) for k in ("state", "queue", "name", "since", "batch"))
        if options["all"] == bool(options["ids"]):
            raise CommandError(f"Give job ids, or --all with filters: `jobs {verb} 12 13`.")
        if options["all"] and not has_filter:
            raise CommandError(
                f"`jobs {verb} --all` needs at least one filter (--state, --queue, --name, "
                "--since or --batch), so that it cannot touch every job by accident."
            )
        jobs = (
            self.matching(options) if options["all"] else Job.objects.filter(pk__in=options["ids"])
        )
        count = jobs.count()
        if not options["yes"]:
            if not sys.stdin.isatty():
                raise CommandError(
                    f"Refusing to {verb} {count} jobs without --yes (no terminal to ask)."
                )
            answer = input(f"{verb.capitalize()} {count} jobs? [y/N] ")
            if answer.strip().lower() not in ("y", "yes"):
                raise CommandError("Nothing changed.")
        bar = ProgressBar(self.stderr, verb, count)
        changed, skipped = action(jobs, bar.advance)
        bar.close()
        message = f"{verb}: {changed} changed"
        if skipped:
            message += f", {skipped} skipped ({why})"
        self.stdout.write(message + ".")

    # -- helpers ----------------------------------------------------------------------------

    def matching(self, options: dict[str, Any]) -> QuerySet[Job]:
        return serializers.filtered(
            state=options.get("state"),
            queue=options.get("queue"),
            name=options.get("name"),
            since=options.get("since"),
            batch=options.get("batch"),
        )
