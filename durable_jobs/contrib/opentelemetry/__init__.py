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
