"""The metrics view for the web process: the database gauges and this process's counters.

Route it in the project's URLconf::

    from durable_jobs.contrib.prometheus.views import metrics

    urlpatterns = [..., path("metrics/", metrics)]

It answers active staff users only, anyone else gets 403 (a scraper reads a refusal
better than a redirect to a login page), unless ``DURABLE_JOBS["METRICS_PUBLIC"]`` is
true. To guard it some other way (a bearer token, a network rule), route a view of your
own that returns :func:`metrics_response`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator

from django.http import HttpRequest, HttpResponse, HttpResponseForbidden
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.core import Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from durable_jobs.conf import get_settings
from durable_jobs.contrib.prometheus import metrics as counters  # noqa: F401
from durable_jobs.contrib.prometheus.collector import DatabaseCollector

# Importing the counters connects them to durable_jobs' signals: the URLconf that routes
# this view does so before the web process serves its first request.


class Chain:
    """Several collectors exposed as one."""

    def __init__(self, collectors: Iterable[Collector]) -> None:
        self.collectors = list(collectors)

    def collect(self) -> Iterator[Metric]:
        for collector in self.collectors:
            yield from collector.collect()


def process_collector() -> Collector:
    """This process's counters, or under prometheus_client's multiprocess mode (a
    ``PROMETHEUS_MULTIPROC_DIR``, as gunicorn with several workers needs) those of every
    process writing to that directory, summed."""
    # prometheus_client copies the older lower-case name into this one when imported.
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        registry = CollectorRegistry()
        MultiProcessCollector(registry)
        return registry
    return REGISTRY


def metrics_response(request: HttpRequest) -> HttpResponse:
    """The database gauges of
    :class:`~durable_jobs.contrib.prometheus.collector.DatabaseCollector` and the
    counters of :func:`process_collector`, in the format the request's ``Accept`` asks for
    (OpenMetrics for Prometheus itself, else the text format), as prometheus_client's
    own servers answer. No access check: that is the caller's."""
    encode, content_type = choose_encoder(request.headers.get("Accept", ""))
    body = encode(Chain([process_collector(), DatabaseCollector()]))
    return HttpResponse(body, content_type=content_type)


def may_read(request: HttpRequest) -> bool:
    if get_settings().metrics_public:
        return True
    user = getattr(request, "user", None)
    return bool(user is not None and user.is_active and user.is_staff)


@never_cache
@require_safe
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus metrics for staff users, or for anyone with ``METRICS_PUBLIC``."""
    if not may_read(request):
        return HttpResponseForbidden(
            "Metrics are for staff users. For a scraper, set "
            'DURABLE_JOBS["METRICS_PUBLIC"] = True where only it reaches this URL, or route '
            "a view of your own that checks its credentials and returns metrics_response().",
            content_type="text/plain; charset=utf-8",
        )
    return metrics_response(request)
