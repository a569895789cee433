"""Prometheus metrics for durable_jobs, built on ``prometheus_client``.

Install with ``pip install "django-durable-jobs[prometheus]"``. Two sources of metrics:

- :mod:`.collector`: what the database says, read on each scrape with the overview's
  bounded queries (jobs per queue and state, queue lag, live and stale nodes). Served by
  the web view (:func:`.views.metrics`), so that it is reported once, not by every worker.
- :mod:`.metrics`: what this process did (attempts it finished, their durations, jobs it
  enqueued), counted from durable_jobs' signals on prometheus_client's default registry.
  Each worker serves its own at ``runworker --metrics-port PORT``.

Importing any module of this package without ``prometheus_client`` installed raises
:class:`django.core.exceptions.ImproperlyConfigured` naming the extra to install.
"""

from django.core.exceptions import ImproperlyConfigured

#: What to install when prometheus_client is missing.
INSTALL = 'pip install "django-durable-jobs[prometheus]"'

try:
    import prometheus_client  # noqa: F401
except ImportError as exc:
    raise ImproperlyConfigured(
        f"durable_jobs.contrib.prometheus needs the prometheus_client package ({exc}). "
        f"Install it with: {INSTALL}"
    ) from exc
