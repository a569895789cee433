"""durable_jobs side by side with its peers: the pieces of ``benchmarks/compare.py``.

- ``base``: what compare.py sees of a system, the :class:`~benchmarks.peers.base.Adapter`
  interface (setup, enqueue_one_per_tx, enqueue_bulk, drain, latency, teardown);
- one adapter module per system: ``durable_jobs`` (PostgreSQL and SQLite),
  ``procrastinate``, ``django_tasks_db``, ``django_q2``, ``celery_redis``, ``pgbench``;
- ``<system>_project/``: each system's small project and its *driver*, which runs in
  the system's own virtualenv (``driver`` holds what the drivers share);
- ``venvs``: the pinned virtualenvs under ``benchmarks/.venvs/``;
- ``report``: the targets and their ratios, the Markdown, the chart.

Importing this package imports nothing: the drivers load it under every system's
virtualenv, where only the standard library can be counted on.
"""
