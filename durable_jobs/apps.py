from django.apps import AppConfig
from django.db.backends.signals import connection_created
from django.utils.module_loading import autodiscover_modules


class DurableJobsConfig(AppConfig):
    name = "durable_jobs"
    verbose_name = "Durable jobs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from durable_jobs import checks  # noqa: F401  (registers the system checks)
        from durable_jobs.db.lookups import InConstants
        from durable_jobs.db.sqlite import configure_connection
        from durable_jobs.models import Attempt
        from durable_jobs.schedules.outcomes import record_job_outcome
        from durable_jobs.signals import job_finished

        # The overview reaches the partial index over failed attempts through it.
        Attempt._meta.get_field("outcome").register_lookup(InConstants)
        connection_created.connect(configure_connection, dispatch_uid="durable_jobs.sqlite")
        job_finished.connect(record_job_outcome, dispatch_uid="durable_jobs.schedule_outcome")
        # Handlers register themselves when each installed app's jobs.py is imported.
        autodiscover_modules("jobs")
