"""An async view that enqueues every async way, for tests/test_async_enqueue.py."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse

import durable_jobs
from tests.testapp import jobs, tasks


async def enqueue_async(request: HttpRequest) -> JsonResponse:
    one = await jobs.add.adelay(a=1, b=2)
    configured = await jobs.add.using(priority=5).adelay(a=2, b=2)
    by_name = await durable_jobs.aenqueue("tests.add", {"a": 3, "b": 3})
    many = await durable_jobs.aenqueue_many([jobs.add.prepare(a=4, b=4), jobs.add.prepare(a=5)])
    result = await tasks.add.aenqueue(6, 6)
    ids = [one.pk, configured.pk, by_name.pk, *(j.pk for j in many)]
    return JsonResponse({"jobs": ids, "task": result.id})


async def delay_in_async_view(request: HttpRequest) -> JsonResponse:
    try:
        jobs.add.delay(a=1)
    except Exception as exc:  # SynchronousOnlyOperation: what adelay() is for
        return JsonResponse({"error": type(exc).__name__})
    return JsonResponse({"error": None})
