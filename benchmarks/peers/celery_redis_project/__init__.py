"""Celery's side of the comparison: its app and tasks on Redis, and its driver."""
