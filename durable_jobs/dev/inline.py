"""The inline worker: a worker inside ``manage.py runserver``, for development.

With ``DURABLE_JOBS["INLINE_WORKER"]`` on (``None``, the default, follows ``DEBUG``), the
process that serves requests also runs a :class:`~durable_jobs.worker.Worker` on every
configured queue, scheduler included, so that development needs no second terminal.

Which process that is, is decided in ``AppConfig.ready()`` from the command line, the
way Django decides it: the subcommand is ``sys.argv[1]``, and the autoreloader runs the
server in a child process it marks with ``RUN_MAIN=true`` (the child watches the files
and exits with status 3 on a change; the parent only starts it again). The options are
read with the parser of whichever ``runserver`` command wins (Django's, ``staticfiles``',
Daphne's), so ``--noreload`` is understood as that command understands it and
``runserver --help`` starts nothing. Any other command, a test run, gunicorn, uWSGI or
Daphne's own server never match.

The worker starts once the app registry is ready, and stops at interpreter exit. That
happens however the server process ends, except by ``os._exit``: Control-C, ``SIGTERM``
(with ``--noreload`` too, where a handler like the autoreloader's is installed for it),
or a reload. The stop
is :meth:`~durable_jobs.worker.Worker.stop_now`, with no grace period: the autoreloader
gives its child a quarter of a second after Control-C before it kills it, so running jobs
are handed back to ``queued`` at once (an ``interrupted`` attempt, not counted), and the
next child, or any worker, runs them again. That takes milliseconds, during which a
second Control-C or ``SIGTERM`` is ignored. A server that dies without exiting (killed,
or runserver's ``os._exit(1)`` when its port is taken) leaves its jobs to the rescue
after their lease expires, like any crashed worker.
"""

from __future__ import annotations

import atexit
import contextlib
import io
import os
import signal
import sys
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, TextIO

from django.apps import apps
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from durable_jobs.conf import get_settings
from durable_jobs.exceptions import DurableJobsError

if TYPE_CHECKING:
    from durable_jobs.worker.worker import Worker

#: How long the exiting server waits for its worker to hand jobs back and delete its node.
STOP_SECONDS = 10.0
TURN_OFF = 'set DURABLE_JOBS["INLINE_WORKER"] = False to turn it off'

_started: InlineWorker | None = None


def serving_process(
    argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> bool:
    """Whether this process is the one ``manage.py runserver`` serves requests from: the
    autoreloader's child, or with ``--noreload`` the only process."""
    argv = sys.argv if argv is None else argv
    environ = os.environ if environ is None else environ
    if len(argv) < 2 or argv[1] != "runserver":
        return False
    from django.utils.autoreload import DJANGO_AUTORELOAD_ENV

    options = _runserver_options(argv)
    if options is None:  # --help, --version, or arguments the command refuses
        return False
    return environ.get(DJANGO_AUTORELOAD_ENV) == "true" or not options.get("use_reloader", True)


def enabled() -> bool:
    """``INLINE_WORKER``, or ``DEBUG`` when it is None."""
    setting = get_settings().inline_worker
    return bool(settings.DEBUG) if setting is None else setting


def start_if_serving() -> InlineWorker | None:
    """From ``AppConfig.ready()``: in the runserver process, with the setting on, print the
    line that says so and start the worker once the apps are ready (at most once)."""
    global _started
    if _started is not None or not serving_process():
        return None
    # Imported here, as in the functions below: every process calls this function, and
    # only runserver's needs the worker package.
    from durable_jobs.worker.config import parse_queues

    try:
        if not enabled():
            return None
        queues = parse_queues(None)
    except (ImproperlyConfigured, DurableJobsError) as exc:
        # manage.py check (run by runserver) reports the setting with its ID.
        _say(f"durable_jobs: inline worker off: {exc}", sys.stderr)
        return None
    _started = InlineWorker(queues)
    _say(f"durable_jobs: inline worker on ({_describe(queues)}); {TURN_OFF}.", sys.stdout)
    _started.start()
    return _started


class InlineWorker:
    """A worker on a thread of the server process, stopped at once when the process exits."""

    def __init__(self, queues: Mapping[str, int]) -> None:
        self.queues = dict(queues)
        self.worker: Worker | None = None
        self._lock = threading.Lock()
        self._exiting = False
        self._thread = threading.Thread(target=self._run, name="durable-jobs-inline", daemon=True)

    def start(self) -> None:
        atexit.register(self._at_exit)
        _exit_cleanly_on_sigterm()
        self._thread.start()

    def stop(self, timeout: float = STOP_SECONDS) -> None:
        """Hand running jobs back and wait (up to ``timeout``) for the worker to end."""
        with self._lock:
            self._exiting = True
            worker = self.worker
        if worker is not None:
            worker.stop_now()
            self._thread.join(timeout)

    def _at_exit(self) -> None:
        # A second Control-C or SIGTERM (some tools send two at once) would raise in the
        # main thread, here, and cut the hand-back short, leaving jobs leased; worse, an
        # interrupted Thread.join may take the thread for ended (CPython 3.11). The
        # hand-back takes milliseconds: let it end, as the process is exiting anyway.
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN)
        self.stop()

    def _run(self) -> None:
        from durable_jobs.worker.worker import Worker

        # Not before every app's ready() has run: Django warns about queries made during
        # app initialization, and handlers register themselves in it.
        apps.ready_event.wait()
        with self._lock:
            if self._exiting:
                return
            try:
                worker = self.worker = Worker(self.queues)
            except (ImproperlyConfigured, DurableJobsError, ValueError) as exc:
                _say(f"durable_jobs: the inline worker could not start: {exc}", sys.stderr)
                return
        try:
            worker.start().join()
        except Exception as exc:
            _say(
                f"durable_jobs: the inline worker could not start: {exc}. Is the database "
                "reachable, and has `manage.py migrate` been run for durable_jobs? Restart "
                "runserver once it is; the server runs on without the worker meanwhile.",
                sys.stderr,
            )


def _runserver_options(argv: Sequence[str]) -> dict[str, object] | None:
    """The options the installed ``runserver`` command parses from ``argv``, or None if it
    would print its help or version, or refuse them, rather than serve."""
    from django.core.management import CommandError, get_commands, load_command_class

    try:
        command = load_command_class(get_commands()["runserver"], "runserver")
        parser = command.create_parser(os.path.basename(argv[0]), "runserver")
        # --help and --version print and exit; so may an abbreviation of either.
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            options = parser.parse_args(list(argv[2:]))
    except (CommandError, SystemExit, KeyError, ImportError):
        return None
    return vars(options)


def _exit_cleanly_on_sigterm() -> None:
    """Make ``SIGTERM`` exit through the interpreter's exit (and so :meth:`InlineWorker.stop`)
    rather than kill the process outright, as the autoreloader already does in its child.
    Only where nothing else handles it: ``runserver --noreload``, in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(0))


def _describe(queues: Mapping[str, int]) -> str:
    return "queues " + ", ".join(f"{q}:{c}" for q, c in queues.items()) + "; scheduler on"


def _say(line: str, stream: TextIO) -> None:
    print(line, file=stream, flush=True)
