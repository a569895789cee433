"""``Worker.stop_now``: running jobs handed back at once, whatever the grace period."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.db.models import Model

from durable_jobs.models import Attempt, Node, Outcome
from durable_jobs.states import State
from durable_jobs.worker import Worker
from tests.conftest import wait_for
from tests.testapp import jobs


def attempts(job: Model) -> list[tuple[int, str, str]]:
    return list(
        Attempt.objects.filter(job=job).order_by("id").values_list("number", "outcome", "node")
    )


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("after_stop", [False, True], ids=["alone", "during-the-grace"])
def test_stop_now_hands_running_jobs_back_without_a_grace_period(
    tmp_path: Path, after_stop: bool
) -> None:
    # A grace period far longer than the test may run: only stop_now ends the worker.
    worker = Worker({"default": 2}, shutdown_grace=3600)
    thread = worker.start()
    job = jobs.sleepy.delay(seconds=300, marker_dir=str(tmp_path))
    wait_for(lambda: list(tmp_path.glob(f"started-{job.pk}-*")))
    if after_stop:
        worker.stop()
        wait_for(lambda: Node.objects.filter(pk=worker.node.pk, stopping=True).exists())
    worker.stop_now()
    thread.join(timeout=60)
    assert not thread.is_alive()
    job.refresh_from_db()
    assert (job.state, job.leased_by_id) == (State.QUEUED, None)
    assert attempts(job) == [(1, Outcome.INTERRUPTED, worker.node.name)]
    assert not Node.objects.exists()
