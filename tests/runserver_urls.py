"""The URLconf of tests/runserver_settings.py: a view that enqueues, and one that tells
what the serving process runs. The reload test touches this file (a watched module)."""

from __future__ import annotations

import os
import threading

from django.http import HttpRequest, JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from tests.testapp import jobs


@csrf_exempt
@require_POST
def enqueue(request: HttpRequest) -> JsonResponse:
    """``seconds``: a ``tests.sleepy`` job that long (touching ``marker_dir`` when it
    starts); without it, ``tests.add``."""
    if "seconds" in request.POST:
        job = jobs.sleepy.delay(
            seconds=float(request.POST["seconds"]), marker_dir=request.POST.get("marker_dir", "")
        )
    else:
        job = jobs.add.delay(a=2, b=3)
    return JsonResponse({"job": job.pk, "pid": os.getpid()})


def process(request: HttpRequest) -> JsonResponse:
    """The serving process's pid and the names of its threads."""
    return JsonResponse(
        {"pid": os.getpid(), "threads": sorted(t.name for t in threading.enumerate())}
    )


urlpatterns = [path("enqueue/", enqueue), path("process/", process)]
