"""The project's tasks, addressed by their module path."""

from __future__ import annotations

import time

from django_tasks import task


@task()
def noop(n: int = 0) -> None:
    """Does nothing."""


@task()
def probe(n: int = 0) -> float:
    """Returns the time it started; django-tasks-db stores it as the result."""
    return time.time()
