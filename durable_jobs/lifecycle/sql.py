"""The state machine in SQL: what a claim and an outcome write, rendered from the states.

Every engine's claim and outcome statements set these columns, so a rule such as
"a unique job frees its key on leaving the states it is unique in" is written here
once (in SQL, and as an ORM expression for :func:`~durable_jobs.lifecycle.transitions.
transition`), beside :func:`~durable_jobs.lifecycle.states.keeps_unique_key`, which
it spells. State names reach SQL only as literals rendered from :class:`State`, never
from input. Pure text and expressions: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import models
from django.db.models import Case, F, Q, Value, When

from durable_jobs.lifecycle.states import State


def literal(state: State) -> str:
    return f"'{State(state).value}'"


def state_list(states: Iterable[str]) -> str:
    """States as SQL literals, in a fixed order. Written into the text rather than bound,
    so that the planner can match the claim index's predicate."""
    return ", ".join(literal(State(s)) for s in sorted(states))


def key_after(target: State | str, job: str, *, concat: str = "||") -> str:
    """SQL of the idempotency key a job keeps on moving to ``target``: a :class:`State`,
    or the SQL of a column holding one. ``job`` qualifies the job's columns (``"job."``);
    ``concat`` is the database's text concatenation: ``||``, or ``CONCAT`` on MySQL,
    where ``||`` means OR.

    :func:`~durable_jobs.lifecycle.states.keeps_unique_key` in SQL; a key not kept
    becomes NULL.
    """
    if isinstance(target, State):
        if target == State.QUEUED:
            return f"{job}idempotency_key"
        return (
            f"CASE WHEN {job}unique_states = '' OR {job}unique_states LIKE "
            f"'%%,{target.value},%%'\n        THEN {job}idempotency_key ELSE NULL END"
        )
    pattern = (
        f"CONCAT('%%,', {target}, ',%%')" if concat == "CONCAT" else f"'%%,' || {target} || ',%%'"
    )
    return (
        f"CASE WHEN {target} = {literal(State.QUEUED)} OR {job}unique_states = ''\n"
        f"        OR {job}unique_states LIKE {pattern} "
        f"THEN {job}idempotency_key END"
    )


def key_after_expression(target: State) -> Any:
    """:func:`key_after` as an ORM expression, or None where the key is always kept."""
    if target == State.QUEUED:
        return None
    return Case(
        When(
            Q(unique_states="") | Q(unique_states__contains=f",{target.value},"),
            then=F("idempotency_key"),
        ),
        default=Value(None),
        output_field=models.CharField(),
    )


def lease_fence(job_ids: Iterable[int], lease_token: Any) -> Q:
    """The jobs among ``job_ids`` still leased under ``lease_token``: the condition every
    write on behalf of a lease (outcome, renewal, progress) is guarded by."""
    return Q(pk__in=list(job_ids), state=State.LEASED, lease_token=lease_token)


def lease_set(job: str) -> str:
    """The columns a claim sets; ``job`` qualifies the job's columns (``"job."`` or ``""``).

    Binds ``target`` (:data:`LEASED`), ``now``, ``lease_expires_at``, ``lease_token`` and
    ``node_id``.
    """
    return f"""
    state = %(target)s,
    attempts = {job}attempts + 1,
    attempted_at = %(now)s,
    updated_at = %(now)s,
    lease_expires_at = %(lease_expires_at)s,
    lease_token = %(lease_token)s,
    leased_by_id = %(node_id)s,
    idempotency_key = {key_after(State.LEASED, job)}
"""


#: The state a claim writes (bound as ``%(target)s``, see :func:`lease_set`).
LEASED = State.LEASED.value
#: The state an outcome's job must still be in (its lease's): every outcome row carries it.
OUTCOME_SOURCE = State.LEASED.value


def settle_set(*, assigned: str = "", concat: str = "||") -> str:
    """The columns an outcome sets on the job ``job`` from its batch row ``o``.

    A given-back attempt (``o.gives_back``) does not count; a job completed while it
    reported progress ends at 100; the key follows :func:`key_after`. ``assigned``
    qualifies the columns set (``"job."`` in MySQL's multi-table UPDATE, where a bare
    name is ambiguous); ``concat`` as for :func:`key_after`. No assignment reads a
    column set before it, so MySQL's left-to-right assignments mean the same.
    """
    a = assigned
    return f"""
    {a}state = o.target,
    {a}updated_at = o.updated_at,
    {a}finished_at = o.finished_at,
    {a}available_at = COALESCE(o.available_at, job.available_at),
    {a}attempts = job.attempts - o.gives_back,
    {a}lease_expires_at = NULL,
    {a}leased_by_id = NULL,
    {a}result = CASE WHEN o.sets_result THEN o.result ELSE job.result END,
    {a}last_error = COALESCE(o.last_error, job.last_error),
    {a}progress = CASE WHEN o.target = {literal(State.COMPLETED)} AND job.progress IS NOT NULL
        THEN 100 ELSE job.progress END,
    {a}idempotency_key = {key_after("o.target", "job.", concat=concat)}
"""
