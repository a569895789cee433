"""The transition table is the only way to write a state."""

from __future__ import annotations

import pytest

from durable_jobs.models import Job
from durable_jobs.states import (
    ALLOWED_SOURCES,
    CLAIMABLE,
    FINAL,
    UNFINISHED,
    State,
    can_move,
    transition,
)
from tests.testapp import jobs

pytestmark = pytest.mark.django_db


def test_the_six_states_are_frozen() -> None:
    assert [s.value for s in State] == [
        "queued",
        "leased",
        "completed",
        "retrying",
        "dead",
        "cancelled",
    ]


def test_the_table_matches_the_design() -> None:
    assert {State.QUEUED, State.RETRYING} == CLAIMABLE
    assert {State.COMPLETED, State.DEAD, State.CANCELLED} == FINAL
    assert set(UNFINISHED) | FINAL == set(State)
    assert not set(UNFINISHED) & FINAL
    assert can_move("leased", "completed")
    assert can_move("retrying", "dead")
    assert can_move("dead", "queued")
    assert can_move("cancelled", "queued")
    assert not can_move("completed", "queued")
    assert not can_move("queued", "completed")
    assert not can_move("dead", "leased")
    assert all(not can_move("completed", target) for target in ALLOWED_SOURCES)


def test_transition_refuses_moves_the_table_does_not_allow() -> None:
    job = jobs.add.delay(a=1)
    assert transition(Job.objects.filter(pk=job.pk), State.COMPLETED) == 0
    assert Job.objects.get(pk=job.pk).state == State.QUEUED
    assert transition(Job.objects.filter(pk=job.pk), State.CANCELLED) == 1
    assert Job.objects.get(pk=job.pk).state == State.CANCELLED


def test_the_database_rejects_unknown_states() -> None:
    from django.db import IntegrityError, transaction

    job = jobs.add.delay(a=1)
    with pytest.raises(IntegrityError), transaction.atomic():
        Job.objects.filter(pk=job.pk).update(state="running")
