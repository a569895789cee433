"""The claim: order, availability, limits, leases, fencing and races between claimers."""

from __future__ import annotations

import datetime
import threading
from collections import Counter

import pytest
from django.db import connections
from django.utils import timezone

from durable_jobs.lifecycle import outcomes, recording
from durable_jobs.maintenance.rescuer import rescue_expired
from durable_jobs.models import Attempt, Job, Node, Outcome
from durable_jobs.states import State, claim
from durable_jobs.worker.execute import execute
from tests.testapp import jobs

pytestmark = pytest.mark.django_db


def claim_one(queue: str = "default") -> Job | None:
    found = claim(queue=queue, limit=1, node_id=None, lease_seconds=30)
    return found[0] if found else None


def test_higher_priority_first_then_fifo() -> None:
    low = jobs.add.using(priority=-5).delay(a=1)
    first = jobs.add.delay(a=2)
    second = jobs.add.delay(a=3)
    high = jobs.add.using(priority=50).delay(a=4)
    third = jobs.add.delay(a=5)
    order = [claim_one().pk for _ in range(5)]
    assert order == [high.pk, first.pk, second.pk, third.pk, low.pk]
    assert claim_one() is None


def test_a_delayed_job_is_not_claimed_before_it_is_available() -> None:
    job = jobs.add.using(run_in=datetime.timedelta(minutes=10)).delay(a=1)
    assert claim_one() is None
    Job.objects.filter(pk=job.pk).update(
        available_at=timezone.now() - datetime.timedelta(seconds=1)
    )
    assert claim_one().pk == job.pk


def test_claim_takes_only_its_queue_and_at_most_the_limit() -> None:
    for i in range(10):
        jobs.add.delay(a=i)
    jobs.add.using(queue="emails").delay(a=99)
    claimed = claim(queue="default", limit=3, node_id=None, lease_seconds=30)
    assert len(claimed) == 3
    assert {j.queue for j in claimed} == {"default"}
    assert Job.objects.filter(state=State.LEASED).count() == 3


def test_claim_sets_a_lease_with_a_fresh_token() -> None:
    node = Node.objects.create(name="n1", pid=1)
    jobs.add.delay(a=1)
    before = timezone.now()
    (job,) = claim(queue="default", limit=5, node_id=node.pk, lease_seconds=30)
    assert job.state == State.LEASED
    assert job.attempts == 1
    assert job.leased_by_id == node.pk
    assert job.lease_token is not None
    assert job.lease_expires_at >= before + datetime.timedelta(seconds=30)
    assert job.attempted_at >= before


def test_an_acknowledgement_from_a_lost_lease_is_rejected_and_changes_nothing() -> None:
    job = jobs.add.delay(a=1)
    stale = claim_one()
    # The lease expires (the worker hung); another node rescues and re-claims the job.
    Job.objects.filter(pk=job.pk).update(
        lease_expires_at=timezone.now() - datetime.timedelta(seconds=1)
    )
    assert rescue_expired() == 1
    Job.objects.filter(pk=job.pk).update(available_at=timezone.now())
    current = claim_one()
    assert current.pk == job.pk
    assert current.lease_token != stale.lease_token

    late = outcomes.decide(execute(stale), node="hung-node")
    assert recording.write_now([late]) == [False]

    job.refresh_from_db()
    assert job.state == State.LEASED
    assert job.lease_token == current.lease_token
    assert job.result is None
    assert [a.outcome for a in Attempt.objects.filter(job=job)] == [Outcome.LOST]

    assert recording.write_now([outcomes.decide(execute(current), node="good-node")]) == [True]
    job.refresh_from_db()
    assert (job.state, job.result) == (State.COMPLETED, 1)


def test_rescue_records_the_lost_attempt_and_retries_or_kills() -> None:
    retried = jobs.add.delay(a=1)
    exhausted = jobs.add.using(max_retries=0).delay(a=2)
    node = Node.objects.create(name="dead-node", pid=1)
    claim(queue="default", limit=2, node_id=node.pk, lease_seconds=30)
    Job.objects.update(lease_expires_at=timezone.now() - datetime.timedelta(seconds=1))
    assert rescue_expired(node="rescuer") == 2
    retried.refresh_from_db()
    exhausted.refresh_from_db()
    assert retried.state == State.RETRYING
    assert exhausted.state == State.DEAD
    for job in (retried, exhausted):
        (attempt,) = Attempt.objects.filter(job=job)
        assert attempt.outcome == Outcome.LOST
        assert attempt.node == "dead-node"
        assert attempt.error_class == "durable_jobs.exceptions.LeaseExpired"
    assert rescue_expired() == 0


def test_unexpired_leases_are_not_rescued() -> None:
    jobs.add.delay(a=1)
    claim_one()
    assert rescue_expired() == 0
    assert Job.objects.get().state == State.LEASED


@pytest.mark.django_db(transaction=True)
def test_concurrent_claimers_never_claim_a_job_twice() -> None:
    total, threads = 300, 6
    for i in range(total):
        jobs.add.delay(a=i)
    claimed: Counter[int] = Counter()
    lock = threading.Lock()
    barrier = threading.Barrier(threads)
    errors: list[BaseException] = []

    def claimer() -> None:
        try:
            barrier.wait()
            while True:
                batch = claim(queue="default", limit=7, node_id=None, lease_seconds=30)
                if not batch:
                    return
                with lock:
                    claimed.update(j.pk for j in batch)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    pool = [threading.Thread(target=claimer) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert errors == []
    assert len(claimed) == total
    assert max(claimed.values()) == 1
    assert Job.objects.filter(state=State.LEASED).count() == total


def test_a_batch_of_outcomes_is_written_together_each_guarded_by_its_lease() -> None:
    first = jobs.add.delay(a=1)
    second = jobs.add.delay(a=2)
    claimed = {j.pk: j for j in claim(queue="default", limit=2, node_id=None, lease_seconds=30)}
    stale = claimed[second.pk]
    Job.objects.filter(pk=second.pk).update(lease_token="00000000-0000-0000-0000-0000000000ff")
    batch = [
        outcomes.decide(execute(claimed[first.pk]), node="n"),
        outcomes.decide(execute(stale), node="n"),
    ]
    assert recording.write_now(batch) == [True, False]
    assert Job.objects.get(pk=first.pk).state == State.COMPLETED
    assert Job.objects.get(pk=second.pk).state == State.LEASED  # not this worker's any more
    assert list(Attempt.objects.values_list("job_id", flat=True)) == [first.pk]
