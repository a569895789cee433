"""pytest fixtures for projects that use durable_jobs (registered via the ``pytest11`` entry point).

Fixtures:

``durable_jobs``
    The :mod:`durable_jobs.testing` helpers, with database access enabled::

        def test_receipt(durable_jobs):
            place_order()
            durable_jobs.assert_enqueued(send_receipt, order_id=42)
            assert durable_jobs.drain()["completed"] == 1

``durable_worker``
    A factory that starts a real :class:`~durable_jobs.worker.Worker` in a thread and
    stops it after the test. Needs committed data: use it with
    ``@pytest.mark.django_db(transaction=True)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest


@pytest.fixture
def durable_jobs(db: Any) -> Any:
    from durable_jobs import testing

    return testing


@pytest.fixture
def durable_worker() -> Iterator[Callable[..., Any]]:
    from durable_jobs.worker import Worker

    started: list[tuple[Any, Any]] = []

    def start(queues: Any = None, **options: Any) -> Worker:
        options.setdefault("shutdown_grace", 5)
        worker = Worker(queues, **options)
        thread = worker.start()
        started.append((worker, thread))
        return worker

    yield start
    for worker, thread in started:
        worker.stop()
        thread.join(timeout=30)
