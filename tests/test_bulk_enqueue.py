"""``enqueue_many`` at size: order, ids, keys and values survive the bulk path (on
PostgreSQL, COPY from 50 rows on: keyless rows straight into the job table, keyed ones
through a staging table), inside the project's transactions and under concurrency."""

from __future__ import annotations

import random
import threading
from collections import Counter

import pytest
from django.db import connections, transaction
from django.db.models.signals import post_init

import durable_jobs
from durable_jobs.db import postgresql_copy
from durable_jobs.models import Job
from durable_jobs.states import State
from tests.testapp import jobs

pytestmark = pytest.mark.django_db(transaction=True)

#: Enough rows for PostgreSQL's COPY path.
MANY = 3 * postgresql_copy.COPY_FROM

AWKWARD = [
    "tab\there",
    "new\nline",
    "back\\slash \\N",
    "quotes ' \" and a comma,",
    "accents é and emoji 😀",
    "",
    "\\.",
]


def test_many_keyless_jobs_keep_their_order_ids_and_values() -> None:
    payloads = [
        {
            "value": {
                "text": AWKWARD[i % len(AWKWARD)],
                "n": i,
                "nested": [{"a": None}, [1.5, True]],
            }
        }
        for i in range(MANY)
    ]
    made = durable_jobs.enqueue_many(jobs.any_arguments.prepare(**p) for p in payloads)
    ids = [job.pk for job in made]
    assert ids == sorted(ids)
    assert len(set(ids)) == MANY
    stored = dict(Job.objects.values_list("pk", "payload"))
    assert [stored[pk] for pk in ids] == payloads
    rows = Job.objects.filter(pk__in=ids)
    assert rows.filter(state=State.QUEUED, meta={}, result__isnull=True).count() == MANY
    assert rows.filter(task__isnull=True, idempotency_key__isnull=True).count() == MANY


def test_bulk_jobs_are_the_rows_a_single_enqueue_makes() -> None:
    """The bulk path builds its rows with the checks and defaults worked out once per
    run of jobs; each row must still be what ``.delay()`` writes, field for field, with
    a ``meta`` of its own."""
    options = jobs.add.using(queue="bulk", priority=3, max_retries=2, meta={"by": "bulk"})
    single = options.delay(a=-1)
    made = durable_jobs.enqueue_many(options.prepare(a=i) for i in range(MANY))
    made[0].meta["touched"] = True  # one job's meta is not another's
    assert made[1].meta == {"by": "bulk"}
    skip = {"id", "payload", "created_at", "updated_at", "available_at"}

    def fields(job: Job) -> dict[str, object]:
        return {
            f.attname: getattr(job, f.attname)
            for f in Job._meta.concrete_fields
            if f.attname not in skip
        }

    stored = {job.pk: job for job in Job.objects.all()}
    for job in made:
        assert fields(job) == {**fields(single), "meta": job.meta}
        assert fields(stored[job.pk]) == fields(stored[single.pk])
        assert not job._state.adding


def test_bulk_jobs_are_built_by_the_models_constructor_for_init_receivers() -> None:
    seen: list[Job] = []

    def record(sender: type[Job], instance: Job, **kwargs: object) -> None:
        seen.append(instance)

    post_init.connect(record, sender=Job)
    try:
        made = durable_jobs.enqueue_many(jobs.add.prepare(a=i) for i in range(MANY))
    finally:
        post_init.disconnect(record, sender=Job)
    assert {id(job) for job in made} <= {id(job) for job in seen}
    assert [job.payload for job in made] == [{"a": i} for i in range(MANY)]


def test_many_keyed_jobs_skip_taken_and_repeated_keys() -> None:
    taken = jobs.add.using(idempotency_key="key-7").delay(a=-1)
    prepared = []
    for i in range(MANY):
        prepared.append(jobs.add.using(idempotency_key=f"key-{i % (MANY // 2)}").prepare(a=i))
        prepared.append(jobs.add.prepare(a=1000 + i))  # keyless, in between
    made = durable_jobs.enqueue_many(prepared)
    assert len(made) == len(prepared)
    by_key: dict[str, int] = {}
    for job, p in zip(made, prepared, strict=True):
        key = p.options.idempotency_key
        if key is None:
            assert job.payload == p.payload
            continue
        by_key.setdefault(key, job.pk)
        assert job.pk == by_key[key]  # a repeated key gets the first one's job
    assert by_key["key-7"] == taken.pk
    assert Job.objects.filter(idempotency_key__isnull=False).count() == MANY // 2
    assert Job.objects.filter(idempotency_key__isnull=True).count() == MANY
    # The first of each key won, in list order.
    assert Job.objects.get(idempotency_key="key-3").payload == {"a": 3}


def test_bulk_enqueues_follow_the_projects_transaction() -> None:
    with transaction.atomic():
        first = durable_jobs.enqueue_many(
            jobs.add.using(idempotency_key=f"t-{i}").prepare(a=i) for i in range(MANY)
        )
        again = durable_jobs.enqueue_many(
            jobs.add.using(idempotency_key=f"t-{i}").prepare(a=i) for i in range(MANY, 2 * MANY)
        )
        overlap = durable_jobs.enqueue_many(
            jobs.add.using(idempotency_key=f"t-{i}").prepare(a=-i) for i in range(MANY)
        )
    assert [j.pk for j in overlap] == [j.pk for j in first]
    assert Job.objects.count() == 2 * MANY
    assert {j.pk for j in again}.isdisjoint(j.pk for j in first)

    def enqueue_then_fail() -> None:
        with transaction.atomic():
            durable_jobs.enqueue_many(jobs.add.prepare(a=i) for i in range(MANY))
            durable_jobs.enqueue_many(
                jobs.add.using(idempotency_key=f"r-{i}").prepare(a=i) for i in range(MANY)
            )
            raise ZeroDivisionError

    with pytest.raises(ZeroDivisionError):
        enqueue_then_fail()
    assert Job.objects.count() == 2 * MANY  # rolled back: never existed
    after = durable_jobs.enqueue_many(
        jobs.add.using(idempotency_key=f"r-{i}").prepare(a=i) for i in range(MANY)
    )
    assert len({j.pk for j in after}) == MANY


def test_concurrent_bulk_enqueues_of_shared_keys_create_each_key_once() -> None:
    """Four threads enqueue 100 keyed jobs each over 150 shared keys, in different
    orders, at once: each key gets one job, and every call returns that job for it."""
    keys = [f"shared-{n}" for n in range(150)]
    start = threading.Barrier(4)
    results: list[list[tuple[str | None, int]]] = []
    errors: list[BaseException] = []

    def enqueue(seed: int) -> None:
        try:
            mine = random.Random(seed).sample(keys, 100)
            start.wait(30)
            made = durable_jobs.enqueue_many(
                jobs.add.using(idempotency_key=k).prepare(a=seed) for k in mine
            )
            results.append([(job.idempotency_key, job.pk) for job in made])
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=enqueue, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    stored = dict(Job.objects.values_list("idempotency_key", "pk"))
    assert Counter(Job.objects.values_list("idempotency_key", flat=True)).most_common(1)[0][1] == 1
    for made in results:
        assert all(stored[key] == pk for key, pk in made if key is not None)
