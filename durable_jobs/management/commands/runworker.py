"""``manage.py runworker``: parse options, then hand over to :class:`durable_jobs.worker.Worker`,
or, with ``--processes N`` (N > 1), to :class:`durable_jobs.worker.supervisor.Supervisor`,
whose N child processes each run :func:`run_worker`."""

from __future__ import annotations

import argparse
import errno
import logging
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import OperationalError, ProgrammingError

from durable_jobs import validate
from durable_jobs.exceptions import ImproperlyConfiguredQueue
from durable_jobs.limits import MAX_SECONDS
from durable_jobs.worker import Worker
from durable_jobs.worker.config import Timing, parse_queue_spec
from durable_jobs.worker.node import NodeNameTaken
from durable_jobs.worker.supervisor import Supervisor, available_cpus

if TYPE_CHECKING:
    from durable_jobs.contrib.prometheus.server import MetricsServer


def positive_float(value: str) -> float:
    number = float(value)
    if validate.seconds_problem(number):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a number of seconds > 0 and at most {MAX_SECONDS:g}"
        )
    return number


def grace_seconds(value: str) -> float:
    number = float(value)
    if validate.seconds_problem(number, zero=True):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a number of seconds >= 0 and at most {MAX_SECONDS:g}"
        )
    return number


def positive_int(value: str) -> int:
    number = int(value)
    if number <= 0:
        raise ValueError(value)
    return number


def process_count(value: str) -> int:
    """``--processes``: a whole number >= 1, or ``auto`` (the CPUs this process may use)."""
    if value.strip().lower() == "auto":
        return available_cpus()
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a number of worker processes: give a whole number >= 1, or "
            "auto for one per CPU this process may use"
        )
    return number


def port_number(value: str) -> int:
    if not value.isdigit() or int(value) > 65535:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a port number from 1 to 65535 (or 0 for a free one)"
        )
    return int(value)


class Command(BaseCommand):
    help = (
        "Run a worker that claims and runs durable jobs. The first SIGTERM/SIGINT stops "
        "claiming and waits for running jobs; a second exits at once."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--queues",
            default=None,
            help="Queues to serve as name[:concurrency[:rate]],... (default: every queue in "
            'DURABLE_JOBS["QUEUES"]). Example: default,emails:5,webhooks:3:30/1m (the rate '
            "is global: at most 30 starts per sliding minute across every node)",
        )
        parser.add_argument(
            "--concurrency",
            type=positive_int,
            default=None,
            help="Concurrency for queues given without :N.",
        )
        parser.add_argument(
            "--burst",
            action="store_true",
            help="Process the jobs available now, then exit 0.",
        )
        parser.add_argument(
            "--max-jobs", type=positive_int, default=None, help="Exit 0 after running N jobs."
        )
        parser.add_argument(
            "--lease-seconds",
            type=positive_float,
            default=None,
            help="Lease length for claimed jobs.",
        )
        parser.add_argument(
            "--shutdown-grace",
            type=grace_seconds,
            default=None,
            help="Seconds a stopping worker waits for running jobs before handing them back.",
        )
        parser.add_argument(
            "--poll-interval", type=positive_float, default=None, help="Seconds between polls."
        )
        parser.add_argument("--name", default=None, help="Node name (default: a synthetic one).")
        parser.add_argument(
            "--no-scheduler",
            action="store_true",
            help="Do not run the schedule heartbeat in this worker.",
        )
        parser.add_argument(
            "--metrics-port",
            type=port_number,
            default=None,
            help="Serve this process's Prometheus metrics at http://HOST:PORT/metrics "
            '(needs pip install "django-durable-jobs[prometheus]"; 0 picks a free port).',
        )
        parser.add_argument(
            "--processes",
            type=process_count,
            default=1,
            metavar="N|auto",
            help="Run N worker processes under one supervisor, which restarts any that dies "
            "(auto: one per CPU this process may use; default 1: this process is the worker). "
            "--name X names them X-1 ... X-N; --metrics-port P serves child i on P+i-1.",
        )
        parser.add_argument(
            "--metrics-host",
            default=None,
            help="The address the metrics server binds (default: 127.0.0.1; 0.0.0.0 for every "
            "interface).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        code = _supervise(options) if options["processes"] > 1 else run_worker(options)
        if code:
            sys.exit(code)


#: The options a supervised child receives (each child runs :func:`run_worker` on them).
WORKER_OPTIONS = (
    "queues",
    "concurrency",
    "burst",
    "max_jobs",
    "lease_seconds",
    "shutdown_grace",
    "poll_interval",
    "name",
    "no_scheduler",
    "metrics_port",
    "metrics_host",
    "verbosity",
)


def run_worker(
    options: dict[str, Any], *, supervised: Callable[[Worker], None] | None = None
) -> int:
    """Run one worker on ``runworker``'s options; its exit code.

    ``supervised``: in a child of ``--processes``, the child's control, given the worker
    instead of the signal handlers (see :mod:`durable_jobs.worker.supervised`).
    """
    try:
        queues, rates = parse_queue_spec(options["queues"], options["concurrency"])
    except ImproperlyConfiguredQueue as exc:
        raise CommandError(str(exc)) from None
    if options["shutdown_grace"] is not None and options["shutdown_grace"] < 0:
        raise CommandError("--shutdown-grace must be >= 0 seconds")
    _ensure_log_output(options["verbosity"])
    worker = Worker(
        queues,
        burst=options["burst"],
        max_jobs=options["max_jobs"],
        lease_seconds=options["lease_seconds"],
        shutdown_grace=options["shutdown_grace"],
        poll_interval=options["poll_interval"],
        name=options["name"],
        scheduler=not options["no_scheduler"],
        rates=rates,
    )
    if supervised is None:
        worker.install_signal_handlers()
    else:
        supervised(worker)
    # Bound before the worker starts: no attempt goes uncounted, and a taken port
    # fails here rather than leaving a worker nobody can scrape.
    metrics = _metrics_server(options["metrics_port"], options["metrics_host"])
    try:
        return worker.run()
    except NodeNameTaken as exc:
        raise CommandError(str(exc)) from None
    except (OperationalError, ProgrammingError) as exc:
        # Only reachable while starting: once running, the worker rides out database
        # errors itself.
        raise CommandError(
            f"The worker could not start: {exc}. Is the database reachable, and has "
            "`manage.py migrate` been run for durable_jobs?"
        ) from None
    finally:
        if metrics is not None:
            metrics.close()


def _supervise(options: dict[str, Any]) -> int:
    """``--processes N``: check what every child would refuse, then supervise N children."""
    count = options["processes"]
    try:
        parse_queue_spec(options["queues"], options["concurrency"])
    except ImproperlyConfiguredQueue as exc:
        raise CommandError(str(exc)) from None
    port, host = options["metrics_port"], options["metrics_host"]
    if port is None and host is not None:
        raise CommandError("--metrics-host needs --metrics-port")
    if port and port + count - 1 > 65535:
        raise CommandError(
            f"--metrics-port {port} with --processes {count}: the children serve ports "
            f"{port} to {port + count - 1}, past 65535; choose a lower port"
        )
    _ensure_log_output(options["verbosity"])
    children = []
    for index in range(1, count + 1):
        child = {key: options[key] for key in WORKER_OPTIONS}
        if options["name"]:
            child["name"] = f"{options['name']}-{index}"
        if port:  # 0: each child picks a free port of its own
            child["metrics_port"] = port + index - 1
        children.append(child)
    supervisor = Supervisor(
        children,
        runner=f"{__name__}.run_worker",
        grace=Timing.resolve(shutdown_grace=options["shutdown_grace"]).shutdown_grace,
        finishes=bool(options["burst"] or options["max_jobs"]),
    )
    return supervisor.run()


def _metrics_server(port: int | None, host: str | None) -> MetricsServer | None:
    """Start ``--metrics-port``'s server; None when the option is not given."""
    if port is None:
        if host is not None:
            raise CommandError("--metrics-host needs --metrics-port")
        return None
    host = "127.0.0.1" if host is None else host
    try:
        # Imported only when asked for: without the option, prometheus_client never is.
        from durable_jobs.contrib.prometheus.server import MetricsServer
    except ImproperlyConfigured as exc:
        raise CommandError(f"--metrics-port: {exc}") from None
    try:
        server = MetricsServer(port, host)
    except OSError as exc:
        problem = (
            "the address is already in use; choose another port"
            if exc.errno == errno.EADDRINUSE
            else f"{exc.strerror or exc}"
        )
        raise CommandError(
            f"--metrics-port {port}: cannot serve metrics on {host}:{port}: {problem}"
        ) from None
    logging.getLogger("durable_jobs.worker").info("serving metrics at %s", server.url)
    return server


def _ensure_log_output(verbosity: int) -> None:
    """Show the worker's lifecycle lines when the project configured no handler for them."""
    package_logger = logging.getLogger("durable_jobs")
    if package_logger.handlers or logging.getLogger().handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    package_logger.addHandler(handler)
    package_logger.setLevel(logging.DEBUG if verbosity >= 2 else logging.INFO)
