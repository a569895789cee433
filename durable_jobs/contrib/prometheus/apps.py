"""Optional: ``"durable_jobs.contrib.prometheus"`` in ``INSTALLED_APPS`` counts from start-up."""

from django.apps import AppConfig


class PrometheusConfig(AppConfig):
    """Connects the counters when Django starts, in every process of the project.

    Needed only where nothing else imports :mod:`durable_jobs.contrib.prometheus.metrics`
    before the first job is enqueued: the metrics view and ``runworker --metrics-port``
    do import it.
    """

    name = "durable_jobs.contrib.prometheus"
    label = "durable_jobs_prometheus"
    verbose_name = "Durable jobs: Prometheus metrics"

    def ready(self) -> None:
        from durable_jobs.contrib.prometheus import metrics  # noqa: F401  (connects them)
