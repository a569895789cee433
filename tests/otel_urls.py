"""The URLconf of tests/test_opentelemetry_traces.py: views that enqueue jobs."""

from django.urls import path

from tests.testapp import traced

urlpatterns = [
    path("enqueue/", traced.enqueue),
    path("aenqueue/", traced.aenqueue),
]
