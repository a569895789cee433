from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING

from django.apps import AppConfig
from django.core.exceptions import ImproperlyConfigured
from django.db.backends.signals import connection_created
from django.utils.module_loading import autodiscover_modules
from django.utils.translation import gettext_lazy as _

if TYPE_CHECKING:
    from durable_jobs.hooks import FinishHook
    from durable_jobs.models import Attempt, Job


class DurableJobsConfig(AppConfig):
    name = "durable_jobs"
    verbose_name = _("Durable jobs")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from durable_jobs import checks  # noqa: F401  (registers the system checks)
        from durable_jobs.db.lookups import InConstants
        from durable_jobs.db.sqlite import configure_connection
        from durable_jobs.hooks import add_finish_hook
        from durable_jobs.models import Attempt
        from durable_jobs.resolve import tasks_framework_installed
        from durable_jobs.schedules.outcomes import record_job_outcome

        # The overview reaches the partial index over failed attempts through it.
        Attempt._meta.get_field("outcome").register_lookup(InConstants)
        connection_created.connect(configure_connection, dispatch_uid="durable_jobs.sqlite")
        add_finish_hook(record_job_outcome)
        if tasks_framework_installed():
            # Django's task_finished, when a task's job ends (durable_jobs.backends).
            add_finish_hook(send_task_finished)
        # Handlers register themselves when each installed app's jobs.py is imported.
        autodiscover_modules("jobs")
        self.install_tracing()
        self.start_inline_worker()

    def install_tracing(self) -> None:
        """Trace enqueues and attempts when ``DURABLE_JOBS["OPENTELEMETRY"]`` is True
        (durable_jobs.contrib.opentelemetry); otherwise nothing is imported or added."""
        from durable_jobs.conf import get_settings

        try:
            enabled = get_settings().opentelemetry
        except ImproperlyConfigured as exc:
            # manage.py check reports it (E021); say it too where no check runs (a WSGI server).
            logging.getLogger("durable_jobs").warning("OpenTelemetry tracing is off: %s", exc)
            return
        if enabled:
            from durable_jobs.contrib import opentelemetry

            opentelemetry.install()

    def start_inline_worker(self) -> None:
        """In ``manage.py runserver``'s server process, a worker (``INLINE_WORKER``)."""
        from durable_jobs.dev.inline import start_if_serving

        start_if_serving()


def send_task_finished(job: Job, attempt: Attempt, error: BaseException | None) -> None:
    """The finish hook for tasks' jobs. The Tasks framework is imported when a task's job
    first ends, not at start-up: a process that runs no task never pays for the import
    (some 0.02-0.05 s of a worker's start with the django-tasks backport)."""
    if job.task_backend is None:
        return
    hook = _task_finished_hook()
    if hook is not None:
        hook(job, attempt, error)


@functools.cache
def _task_finished_hook() -> FinishHook | None:
    try:
        from durable_jobs.backends.task_finished import send_task_finished as hook
    except ImproperlyConfigured:
        # A Tasks framework whose names durable_jobs does not know (a django-tasks
        # release it was not built for): only projects that use its backend need it,
        # and they see the error when the backend is built.
        return None
    return hook
