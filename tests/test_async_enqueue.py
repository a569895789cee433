"""Async enqueue for ``@job``: ``adelay()``, ``using(...).adelay()``, ``aenqueue`` and
``aenqueue_many``, from a real async view served through Django's ASGI handler, then
run by a real worker."""

from __future__ import annotations

import asyncio

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient

from durable_jobs import EnqueueError, aenqueue, aenqueue_many
from durable_jobs.backends.compat import TaskResultStatus
from durable_jobs.models import Job
from durable_jobs.states import State
from durable_jobs.worker import Worker
from tests.testapp import jobs, tasks

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("async_connections_closed"),
]


def test_an_async_view_enqueues_jobs_a_worker_runs() -> None:
    response = asyncio.run(AsyncClient().get("/async/enqueue/"))
    assert response.status_code == 200
    ids, task_id = response.json()["jobs"], response.json()["task"]
    assert len(ids) == 5
    assert Job.objects.get(pk=ids[1]).priority == 5
    Worker({"default": 2}, burst=True).run()
    done = dict(Job.objects.filter(pk__in=ids).values_list("pk", "result"))
    assert [done[i] for i in ids] == [3, 4, 6, 8, 5]
    assert set(Job.objects.filter(pk__in=ids).values_list("state", flat=True)) == {State.COMPLETED}
    result = tasks.add.get_result(task_id)
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 12


def test_delay_in_an_async_view_is_what_adelay_replaces() -> None:
    response = asyncio.run(AsyncClient().get("/async/delay/"))
    assert response.json() == {"error": "SynchronousOnlyOperation"}
    assert not Job.objects.exists()


def test_async_enqueue_refuses_bad_input_as_delay_does() -> None:
    with pytest.raises(EnqueueError, match="positional arguments"):
        asyncio.run(jobs.add.adelay(1, 2))
    with pytest.raises(EnqueueError, match="unexpected keyword"):
        asyncio.run(jobs.add.adelay(a=1, c=1))
    with pytest.raises(EnqueueError, match="prepared jobs"):
        asyncio.run(aenqueue_many([{"a": 1}]))  # type: ignore[list-item]
    with pytest.raises(LookupError, match=r"tests\.nope"):
        asyncio.run(aenqueue("tests.nope", {}))
    assert not Job.objects.exists()


def test_adelay_joins_the_transaction_of_the_thread_it_runs_on() -> None:
    """``thread_sensitive``: adelay() runs on the thread of the caller's other
    ``sync_to_async`` database work, so inside an atomic block opened there it is rolled
    back with it."""
    from django.db import transaction

    class Rollback(Exception):
        pass

    async def enqueue_then_roll_back() -> None:
        atomic = transaction.atomic()
        await sync_to_async(atomic.__enter__, thread_sensitive=True)()
        try:
            await jobs.add.adelay(a=1)
            assert await sync_to_async(Job.objects.count, thread_sensitive=True)() == 1
        finally:
            await sync_to_async(atomic.__exit__, thread_sensitive=True)(Rollback, Rollback(), None)

    asyncio.run(enqueue_then_roll_back())
    assert not Job.objects.exists()
