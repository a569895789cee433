"""One rule, three spellings: a unique job's key, in Python, in SQL and as an ORM expression."""

from __future__ import annotations

import itertools

import pytest
from django.db import connection

from durable_jobs.lifecycle import sql
from durable_jobs.lifecycle.states import State, keeps_unique_key
from durable_jobs.models import Job
from tests.testapp import jobs

pytestmark = pytest.mark.django_db

#: What a job stores as its unique states: an explicit key (every state), or some of them.
UNIQUE_STATES = ["", ",queued,", ",queued,leased,", ",queued,leased,retrying,", ",queued,dead,"]


@pytest.mark.parametrize(("target", "unique_states"), list(itertools.product(State, UNIQUE_STATES)))
def test_the_database_frees_a_key_exactly_when_the_rule_says(
    target: State, unique_states: str
) -> None:
    job = jobs.add.using(idempotency_key=f"k:{target}:{unique_states}").delay(a=1)
    Job.objects.filter(pk=job.pk).update(unique_states=unique_states)
    table = connection.ops.quote_name(Job._meta.db_table)
    kept = keeps_unique_key(target, unique_states)
    expected = job.idempotency_key if kept else None
    with connection.cursor() as cursor:
        # The claim's spelling: the target written into the text.
        cursor.execute(
            f"SELECT {sql.key_after(target, 'job.')} FROM {table} AS job WHERE id = %s", [job.pk]
        )
        assert cursor.fetchone()[0] == expected
        # The outcome write's spelling: the target read from a column of the batch row
        # (MySQL's || means OR: its engine concatenates with CONCAT).
        concat = "CONCAT" if connection.vendor == "mysql" else "||"
        cursor.execute(
            f"SELECT {sql.key_after('o.target', 'job.', concat=concat)} FROM {table} AS job, "
            "(SELECT %s AS target) AS o WHERE job.id = %s",
            [target.value, job.pk],
        )
        assert cursor.fetchone()[0] == expected
    # The operators' spelling, as transition() writes it.
    expression = sql.key_after_expression(target)
    if expression is None:
        assert kept
    else:
        row = Job.objects.filter(pk=job.pk).annotate(after=expression).get()
        assert row.after == expected
