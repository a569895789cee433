"""Pruning finished jobs and forgotten nodes."""

from __future__ import annotations

import datetime

import pytest
from django.utils import timezone

from durable_jobs.maintenance.pruner import prune
from durable_jobs.models import Attempt, Job, Node
from durable_jobs.states import State
from durable_jobs.testing import drain
from tests.testapp import jobs

pytestmark = pytest.mark.django_db


def test_prune_deletes_old_finished_jobs_with_their_attempts_only() -> None:
    old_done = jobs.add.delay(a=1)
    old_dead = jobs.discarder.delay()
    recent = jobs.add.delay(a=2)
    drain()
    waiting = jobs.add.using(run_in=datetime.timedelta(days=30)).delay(a=3)
    ten_days_ago = timezone.now() - datetime.timedelta(days=10)
    Job.objects.filter(pk__in=[old_done.pk, old_dead.pk]).update(finished_at=ten_days_ago)
    Job.objects.filter(pk=waiting.pk).update(created_at=ten_days_ago)
    Node.objects.create(name="gone", pid=1, last_heartbeat_at=ten_days_ago)
    live = Node.objects.create(name="live", pid=2)

    assert prune(days=7) == 2

    assert set(Job.objects.values_list("pk", flat=True)) == {recent.pk, waiting.pk}
    assert not Attempt.objects.filter(job_id__in=[old_done.pk, old_dead.pk]).exists()
    assert Job.objects.get(pk=waiting.pk).state == State.QUEUED
    assert list(Node.objects.all()) == [live]


def test_prune_sends_delete_signals_when_the_project_listens() -> None:
    """Pruning deletes rows with plain DELETEs, unless a receiver wants each job: then
    Django's collector deletes them, sending the signals."""
    from django.db.models.signals import post_delete

    from durable_jobs.models import JobRequest

    first, second = jobs.add.delay(a=1), jobs.add.delay(a=2)
    drain()
    JobRequest.objects.create(job=first, user="1", name="tests.add", key="k", fingerprint="f")
    Job.objects.update(finished_at=timezone.now() - datetime.timedelta(days=10))
    deleted: list[int] = []

    def record(sender, instance, **kwargs) -> None:
        deleted.append(instance.pk)

    post_delete.connect(record, sender=Job)
    try:
        assert prune(days=7) == 2
    finally:
        post_delete.disconnect(record, sender=Job)
    assert sorted(deleted) == sorted([first.pk, second.pk])
    assert not Job.objects.exists()
    assert not Attempt.objects.exists()
    assert not JobRequest.objects.exists()


def test_prune_deletes_a_jobs_requests_with_it() -> None:
    from durable_jobs.models import JobRequest

    job = jobs.add.delay(a=1)
    drain()
    JobRequest.objects.create(job=job, user="1", name="tests.add", key="k", fingerprint="f")
    Job.objects.update(finished_at=timezone.now() - datetime.timedelta(days=10))
    assert prune(days=7) == 1
    assert not JobRequest.objects.exists()
    assert not Attempt.objects.exists()
