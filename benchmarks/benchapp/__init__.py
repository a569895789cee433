"""The benchmark's job handlers, found by durable_jobs' autodiscovery of ``jobs.py``."""
