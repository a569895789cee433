"""Backends that let other frameworks' APIs run on durable_jobs.

:mod:`durable_jobs.backends.tasks` is public: the backend for Django's Tasks framework.
The other modules here are internal.
"""
