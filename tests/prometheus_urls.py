"""The test URLconf with the Prometheus view routed (tests/test_prometheus.py)."""

from django.urls import path

from durable_jobs.contrib.prometheus.views import metrics
from tests.urls import urlpatterns as base

urlpatterns = [*base, path("metrics/", metrics)]
