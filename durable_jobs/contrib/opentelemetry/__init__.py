"""OpenTelemetry tracing of enqueues and attempts (the ``opentelemetry`` extra).

With ``DURABLE_JOBS["OPENTELEMETRY"] = True``, :class:`durable_jobs.apps.DurableJobsConfig`
calls :func:`install` when Django starts: every enqueue opens a PRODUCER span
``durable_jobs enqueue <handler>`` and stores its trace context in ``Job.meta["otel"]``,
and every attempt runs in a CONSUMER span ``durable_jobs run <handler>`` whose parent is
that enqueue span, so the request that enqueued a job and the job's runs are one trace.

Only ``opentelemetry-api`` is needed. Spans go wherever the process's tracer provider
sends them: configure the SDK and an exporter in each process (web and worker) as the
how-to describes; without one, the spans are the API's no-op spans and nothing is
stored in ``meta``. Unless installed, nothing here runs at all.
"""

from __future__ import annotations

from opentelemetry import trace

from durable_jobs import __version__, hooks
from durable_jobs.contrib.opentelemetry import semconv
from durable_jobs.contrib.opentelemetry.attempts import AttemptTracing
from durable_jobs.contrib.opentelemetry.enqueue import EnqueueTracing

__all__ = ["install", "installed", "uninstall"]

_installed: tuple[EnqueueTracing, AttemptTracing] | None = None


def install(tracer_provider: trace.TracerProvider | None = None) -> None:
    """Trace enqueues and attempts in this process, replacing an earlier :func:`install`.

    ``tracer_provider`` defaults to the global one (``trace.set_tracer_provider``), looked
    up at each span, so it may be set after Django has started.
    """
    global _installed
    uninstall()
    tracer = trace.get_tracer(semconv.SCOPE, __version__, tracer_provider=tracer_provider)
    enqueue, attempts = EnqueueTracing(tracer), AttemptTracing(tracer)
    hooks.add_enqueue_hook(enqueue)
    hooks.add_middleware(attempts)
    _installed = enqueue, attempts


def uninstall() -> None:
    """Stop tracing: remove the enqueue hook and the middleware (if installed)."""
    global _installed
    if _installed is None:
        return
    enqueue, attempts = _installed
    hooks.remove_enqueue_hook(enqueue)
    hooks.remove_middleware(attempts)
    _installed = None


def installed() -> bool:
    """Whether :func:`install` is in force."""
    return _installed is not None
