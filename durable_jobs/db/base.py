"""What every database backend provides, and the parts that are plain SQL everywhere."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from django.db import connections, models, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import signals as model_signals
from django.db.models.base import ModelState
from django.utils import timezone

if TYPE_CHECKING:
    from durable_jobs.models import Job, Queue
    from durable_jobs.states import Settlement

M = TypeVar("M", bound=models.Model)


@dataclasses.dataclass
class Claim:
    """One claim request: what to lease, for whom, and for how long."""

    queue: str
    limit: int
    node_id: int | None
    lease_seconds: float
    sources: tuple[str, ...]
    target: str


#: The columns a claim sets, shared by every vendor's SQL. A unique job's key is freed
#: here when "leased" is not one of the states it is unique in.
LEASE_SET = """
    state = %(target)s,
    attempts = {alias}attempts + 1,
    attempted_at = %(now)s,
    updated_at = %(now)s,
    lease_expires_at = %(lease_expires_at)s,
    lease_token = %(lease_token)s,
    leased_by_id = %(node_id)s,
    idempotency_key = CASE WHEN {alias}unique_states = '' OR {alias}unique_states LIKE {target_like}
        THEN {alias}idempotency_key ELSE NULL END
"""

#: Keyed jobs whose key already has ``concurrency_limit`` leased holders are not picked.
KEY_FILTER = """
    AND (job.concurrency_key IS NULL OR (
        SELECT count(*) FROM {table} AS holder
        WHERE holder.concurrency_key = job.concurrency_key AND holder.state IN ({leased})
    ) < job.concurrency_limit)
"""


#: The columns of an acknowledgement batch (see :meth:`Backend.settle`) with their
#: PostgreSQL types: the job's next state and fields, then its attempt row. A batch is
#: sent as one JSON array of such rows, so the statement's text and its one parameter
#: do not depend on the batch size, and encoding it is one C call (``json.dumps``).
SETTLE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("job_id", "bigint"),
    ("lease_token", "uuid"),
    ("source", "text"),
    ("target", "text"),
    ("updated_at", "timestamptz"),
    ("finished_at", "timestamptz"),
    ("available_at", "timestamptz"),
    ("gives_back", "int"),
    ("sets_result", "boolean"),
    ("result", "jsonb"),
    ("last_error", "text"),
    ("number", "int"),
    ("node", "text"),
    ("started_at", "timestamptz"),
    ("ended_at", "timestamptz"),
    ("duration_us", "bigint"),
    ("outcome", "text"),
    ("error_class", "text"),
    ("error_message", "text"),
    ("traceback", "text"),
    ("log", "text"),
)

#: The attempt columns an acknowledgement inserts, and the batch column each comes from.
ATTEMPT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("job_id", "job_id"),
    ("number", "number"),
    ("node", "node"),
    ("started_at", "started_at"),
    ("finished_at", "ended_at"),
    ("duration", "duration_us"),
    ("outcome", "outcome"),
    ("error_class", "error_class"),
    ("error_message", "error_message"),
    ("traceback", "traceback"),
    ("log", "log"),
)

#: The columns an acknowledgement sets, from the batch row ``o``; shared by every vendor.
#: A given-back attempt does not count; a job completed while reporting progress ends at
#: 100; a unique job's key is freed unless the new state is one it is unique in (a job
#: going back to ``queued`` keeps it, as :func:`durable_jobs.states.transition` does).
SETTLE_SET = """
    state = o.target,
    updated_at = o.updated_at,
    finished_at = o.finished_at,
    available_at = COALESCE(o.available_at, job.available_at),
    attempts = job.attempts - o.gives_back,
    lease_expires_at = NULL,
    leased_by_id = NULL,
    result = CASE WHEN o.sets_result THEN {result} ELSE job.result END,
    last_error = COALESCE(o.last_error, job.last_error),
    progress = CASE WHEN o.target = 'completed' AND job.progress IS NOT NULL
        THEN 100 ELSE job.progress END,
    idempotency_key = CASE WHEN o.target = 'queued' OR job.unique_states = ''
        OR job.unique_states LIKE '%%,' || o.target || ',%%' THEN job.idempotency_key END
"""


@functools.cache
def _insert_fields() -> tuple[Any, ...]:
    """The Job fields an INSERT writes (all but the primary key), in a fixed order."""
    from durable_jobs.models import Job

    return tuple(f for f in Job._meta.concrete_fields if not f.primary_key and f.column)


def loaded(model: type[M], attnames: Sequence[str], values: Sequence[Any], alias: str) -> M:
    """``model.from_db(alias, attnames, values)`` for a full row of field values.

    ``Model.__init__`` does per-field work (descriptors, defaults, signals) that a row just
    read does not need, and a worker builds a Job for every job it claims. Without
    ``pre_init``/``post_init`` receivers for ``model``, the attributes are set directly,
    as ``__init__`` would leave them; with receivers, ``from_db`` runs so that they do.
    """
    if model_signals.pre_init.has_listeners(model) or model_signals.post_init.has_listeners(model):
        return model.from_db(alias, attnames, values)
    instance = model.__new__(model)
    instance.__dict__.update(zip(attnames, values, strict=True))
    state = ModelState()
    state.adding, state.db = False, alias
    instance._state = state
    return instance


def unsaved(model: type[M], **values: Any) -> M:
    """``model(**values)``, for a row about to be inserted, on the same terms as
    :func:`loaded`. Fields not given take their defaults."""
    if model_signals.pre_init.has_listeners(model) or model_signals.post_init.has_listeners(model):
        return model(**values)
    instance = model.__new__(model)
    fields = instance.__dict__
    for field in model._meta.concrete_fields:
        name = field.attname
        fields[name] = values.pop(name) if name in values else field.get_default()
    if values:
        raise TypeError(f"{model.__name__} has no fields {sorted(values)}")
    instance._state = ModelState()
    return instance


@dataclasses.dataclass(frozen=True)
class RowPlan:
    """How to build a Job from a row of one result layout."""

    #: Per Job field, in field order (as ``Model.from_db`` takes them): its row position.
    order: list[int]
    #: ``(field position, converter)`` of the fields that have database converters.
    converters: list[tuple[int, Callable[..., Any]]]
    attnames: tuple[str, ...]


@functools.lru_cache(maxsize=32)
def _row_plan(alias: str, layout: tuple[str, ...]) -> RowPlan:
    """The :class:`RowPlan` of a result's column names (the same for every connection of
    ``alias``)."""
    from durable_jobs.models import Job

    connection = connections[alias]
    position = {name: i for i, name in enumerate(layout)}
    fields = Job._meta.concrete_fields
    converters = []
    for i, field in enumerate(fields):
        found = connection.ops.get_db_converters(field.cached_col)
        found += field.get_db_converters(connection)
        converters += [(i, convert) for convert in found]
    return RowPlan(
        order=[position[str(field.column)] for field in fields],
        converters=converters,
        attnames=tuple(field.attname for field in fields),
    )


class Backend:
    vendor = ""

    def __init__(self, alias: str) -> None:
        self.alias = alias

    @property
    def connection(self) -> BaseDatabaseWrapper:
        return connections[self.alias]

    def run_hot(
        self, sql: str, params: Any, *, prepare: bool = True
    ) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
        """Run one of the statements a worker repeats (claim, settle), prepared where the
        database benefits and ``prepare`` allows; return the names of the result's columns
        and its rows."""
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            return tuple(column[0] for column in cursor.description), cursor.fetchall()

    # -- transactions -------------------------------------------------------------------

    @contextlib.contextmanager
    def write_transaction(self, *, savepoint: bool = True) -> Iterator[None]:
        """A transaction for statements that write; on SQLite it takes the write lock first.

        Inside another transaction it is a savepoint, unless ``savepoint`` is False (a
        statement the caller's transaction succeeds or fails with: the worker's claim and
        settle, which share one transaction per loop pass).
        """
        with transaction.atomic(using=self.alias, savepoint=savepoint):
            yield

    # -- enqueue --------------------------------------------------------------------------

    def insert_job(self, job: Job, *, notify: bool) -> int | None:
        """Insert ``job``; return its id, or None when its idempotency key already exists.

        ``ON CONFLICT DO NOTHING`` makes concurrent enqueues of one key race-free: the
        unique constraint decides, never a read-then-write. ``notify``: announce the job
        when the transaction commits, where the database can (PostgreSQL).
        """
        columns, values = self._insert_values(job)
        with self.connection.cursor() as cursor:
            cursor.execute(self._insert_sql(columns), values)
            row = cursor.fetchone()
        return None if row is None else int(row[0])

    def _insert_sql(self, columns: Sequence[str], rows: int = 1) -> str:
        from durable_jobs.models import Job

        qn = self.connection.ops.quote_name
        placeholders = ", ".join([f"({', '.join(['%s'] * len(columns))})"] * rows)
        return (
            f"INSERT INTO {qn(Job._meta.db_table)} ({', '.join(qn(c) for c in columns)}) "
            f"VALUES {placeholders} ON CONFLICT ({qn('idempotency_key')}) DO NOTHING "
            f"RETURNING {qn('id')}, {qn('idempotency_key')}"
        )

    def insert_jobs(self, jobs: Sequence[Job]) -> list[int | None]:
        """Insert ``jobs`` with multi-row INSERTs; each one's new id, or None where its
        idempotency key was taken (by an existing job, or by an earlier one in the list).

        The returned rows come back in VALUES order (Django's bulk_create relies on the
        same), minus the skipped ones; matching them by key puts each id in its place.
        """
        if not jobs:
            return []
        # Keyed rows go in key order: two bulk inserts that share keys then wait on each
        # other's keys in the same order, instead of deadlocking (PostgreSQL).
        order = sorted(
            range(len(jobs)),
            key=lambda i: (jobs[i].idempotency_key is None, jobs[i].idempotency_key or "", i),
        )
        in_order = [jobs[i] for i in order]
        per_statement = self.rows_per_insert()
        ids: list[int | None] = []
        for start in range(0, len(in_order), per_statement):
            chunk = in_order[start : start + per_statement]
            returned = self.insert_rows(chunk)
            position = 0
            for job in chunk:
                if position < len(returned) and returned[position][1] == job.idempotency_key:
                    ids.append(int(returned[position][0]))
                    position += 1
                else:
                    ids.append(None)
        placed: list[int | None] = [None] * len(jobs)
        for position, index in enumerate(order):
            placed[index] = ids[position]
        return placed

    def rows_per_insert(self) -> int:
        columns = len(_insert_fields())
        return max(1, min(500, self.max_params() // columns))

    def insert_rows(self, jobs: Sequence[Job]) -> list[tuple[Any, ...]]:
        """One multi-row ``INSERT ... ON CONFLICT DO NOTHING`` of ``jobs``: the ``(id, key)``
        of the rows inserted, in ``jobs`` order."""
        columns = [field.column for field in _insert_fields()]
        params: list[Any] = []
        for job in jobs:
            params += self._insert_values(job)[1]
        with self.connection.cursor() as cursor:
            cursor.execute(self._insert_sql(columns, rows=len(jobs)), params)
            return cursor.fetchall()

    def max_params(self) -> int:
        return self.connection.features.max_query_params or 999

    def notify(self, queues: Sequence[str]) -> None:
        """Wake workers of ``queues`` when the current transaction commits (where supported)."""

    def _insert_values(self, job: Job) -> tuple[list[str], list[Any]]:
        connection = self.connection  # looked up once: it is a thread-local access
        fields = _insert_fields()
        columns = [field.column for field in fields]
        values = [
            field.get_db_prep_save(getattr(job, field.attname), connection) for field in fields
        ]
        return columns, values

    # -- claim ------------------------------------------------------------------------------

    def claim(
        self,
        *,
        queue: str,
        limit: int,
        node_id: int | None,
        lease_seconds: float,
        sources: Sequence[str],
        target: str,
        limited: bool = False,
    ) -> list[Job]:
        """Lease up to ``limit`` jobs of ``queue``, best first, honouring concurrency keys.

        Unlimited queues take the fast path: one guarded claim that leases nothing if
        the queue is paused or has limits (a worker with stale knowledge of the queue
        then claims nothing until its next heartbeat tells it so). ``limited`` queues
        lock their ``Queue`` row, count, and claim inside one transaction.
        """
        claim = Claim(queue, limit, node_id, lease_seconds, tuple(sources), target)
        if not limited:
            with self.write_transaction(savepoint=False):
                return self.claim_rows(claim, guarded=True)
        with self.write_transaction(savepoint=False):
            control = self.lock_queue(queue)
            if control is not None:
                if control.paused:
                    return []
                claim.limit = min(claim.limit, self.allowance(control))
                if claim.limit <= 0:
                    return []
            jobs = self.claim_rows(claim, guarded=False)
            if control is not None and control.rate_limit and jobs:
                self.record_starts(control, len(jobs))
            return jobs

    def claim_rows(self, claim: Claim, *, guarded: bool) -> list[Job]:
        raise NotImplementedError

    def fetch_jobs(self, sql: str, params: Any) -> list[Job]:
        """Run ``sql`` and build a Job from each row it returns (all of the job's columns).

        What ``Job.objects.raw()`` does, without its per-row bookkeeping: the columns are
        matched to fields once per column layout, and only the fields that need it (JSON)
        are converted. A claim builds every job it leases, so this is on the hot path.
        """
        from durable_jobs.models import Job

        layout, rows = self.run_hot(sql, params)
        plan = _row_plan(self.alias, layout)
        alias, connection = self.alias, self.connection
        jobs = []
        for row in rows:
            values = [row[i] for i in plan.order]
            for i, convert in plan.converters:
                values[i] = convert(values[i], None, connection)
            jobs.append(loaded(Job, plan.attnames, values, alias))
        return jobs

    def lock_queue(self, name: str) -> Queue | None:
        """The queue's row, locked until the transaction ends (SQLite: the write lock is)."""
        from durable_jobs.models import Queue

        return Queue.objects.using(self.alias).select_for_update().filter(name=name).first()

    def allowance(self, control: Queue) -> int:
        """How many jobs the queue's global limits let start now (its row is locked)."""
        from durable_jobs.flow import rates
        from durable_jobs.models import Job
        from durable_jobs.states import State

        allowed = 1 << 30
        if control.global_concurrency is not None:
            leased = (
                Job.objects.using(self.alias).filter(queue=control.name, state=State.LEASED).count()
            )
            allowed = min(allowed, control.global_concurrency - leased)
        if control.rate_limit and control.rate_period:
            allowed = min(
                allowed,
                rates.remaining(
                    control.rate_window,
                    timezone.now().timestamp(),
                    control.rate_limit,
                    control.rate_period,
                ),
            )
        return allowed

    def record_starts(self, control: Queue, started: int) -> None:
        from durable_jobs.flow import rates
        from durable_jobs.models import Queue

        now = timezone.now()
        assert control.rate_period is not None
        log = rates.window_entries(control.rate_window, now.timestamp(), control.rate_period)
        log.append([now.timestamp(), started])
        Queue.objects.using(self.alias).filter(name=control.name).update(rate_window=log)

    def lock_keys(self, keys: Sequence[str]) -> None:
        """Serialise claimers of the same concurrency keys until the transaction ends."""

    def choose_keyed(self, candidates: Sequence[tuple[int, str, int]]) -> list[int]:
        """Of ``(id, key, limit)`` candidates in claim order, those whose key has a free slot.

        Called inside the claim transaction; the keys are locked first, so the leased
        count each claimer sees includes every other claimer's committed leases.
        """
        from durable_jobs.models import Job
        from durable_jobs.states import State

        keys = sorted({key for _, key, _ in candidates})
        self.lock_keys(keys)
        holders = dict(
            Job.objects.using(self.alias)
            .filter(state=State.LEASED, concurrency_key__in=keys)
            .values_list("concurrency_key")
            .annotate(n=models.Count("id"))
            .values_list("concurrency_key", "n")
        )
        chosen = []
        for pk, key, limit in candidates:
            if holders.get(key, 0) < (limit or 1):
                holders[key] = holders.get(key, 0) + 1
                chosen.append(pk)
        return chosen

    @staticmethod
    def state_list(states: Sequence[str]) -> str:
        """States as SQL literals. They come from the state table, never from input; inlining
        them (rather than binding) lets the planner match the claim index's predicate."""
        from durable_jobs.states import State

        return ", ".join(f"'{State(s).value}'" for s in states)

    def claim_params(self, claim: Claim) -> dict[str, Any]:
        """Values the claim binds, adapted for this database (the application clock)."""
        from durable_jobs.models import Job

        now = timezone.now()
        meta = Job._meta
        prep = self.connection
        return {
            "queue": claim.queue,
            "target": claim.target,
            "node_id": claim.node_id,
            "now": meta.get_field("available_at").get_db_prep_value(now, prep),
            "lease_expires_at": meta.get_field("lease_expires_at").get_db_prep_value(
                now + timedelta(seconds=claim.lease_seconds), prep
            ),
            "lease_token": meta.get_field("lease_token").get_db_prep_value(uuid.uuid4(), prep),
        }

    def claim_sql_parts(self, claim: Claim, *, guarded: bool) -> dict[str, str]:
        """The pieces every vendor's claim SQL shares."""
        from durable_jobs.models import Job, Queue

        qn = self.connection.ops.quote_name
        table = qn(Job._meta.db_table)
        guard = ""
        if guarded:
            # A paused or limited queue is claimed only through the locked path.
            guard = (
                f"AND NOT EXISTS (SELECT 1 FROM {qn(Queue._meta.db_table)} AS control "
                "WHERE control.name = %(queue)s AND (control.paused "
                "OR control.global_concurrency IS NOT NULL OR control.rate_limit IS NOT NULL))"
            )
        return {
            "table": table,
            # Written into the text, not bound: with ``LIMIT $n`` a prepared statement's
            # generic plan is costed as if it fetched a tenth of the queue, so PostgreSQL
            # never adopts it and plans the claim at every call. One statement per limit
            # (at most the concurrency) is cheap to keep prepared.
            "limit": str(int(claim.limit)),
            "sources": self.state_list(claim.sources),
            "guard": guard,
            "leased": self.state_list([claim.target]),
            "target_like": f"'%%,{claim.target},%%'",
        }

    # -- acknowledgement ------------------------------------------------------------------

    def settle(self, settlements: Sequence[Settlement]) -> list[bool]:
        """Write a batch of lease outcomes and their attempts (see
        :func:`durable_jobs.states.settle`); return which were written."""
        raise NotImplementedError

    def settlement_rows(self, settlements: Sequence[Settlement]) -> str:
        """The batch as a JSON array of rows in :data:`SETTLE_COLUMNS` order."""
        from durable_jobs.states import State

        time = self.json_time_function()
        rows = []
        for s in settlements:
            attempt = s.attempt
            rows.append(
                (
                    s.job_id,
                    self.json_token(s.lease_token),
                    State.LEASED.value,
                    s.target.value,
                    time(s.updated_at),
                    time(s.finished_at),
                    time(s.available_at),
                    1 if s.gives_back else 0,
                    s.sets_result,
                    None if s.result is None else json.dumps(s.result),
                    s.last_error,
                    attempt.number,
                    attempt.node,
                    time(attempt.started_at),
                    time(attempt.finished_at),
                    attempt.duration // timedelta(microseconds=1),
                    str(attempt.outcome),
                    attempt.error_class,
                    attempt.error_message,
                    attempt.traceback,
                    attempt.log,
                )
            )
        return json.dumps(rows)

    def json_time_function(self) -> Callable[[datetime | None], str | None]:
        """A function writing a timestamp as this database reads it from JSON text."""

        def json_time(value: datetime | None) -> str | None:
            return None if value is None else value.isoformat()

        return json_time

    def json_token(self, value: uuid.UUID) -> str:
        return str(value)

    def mark_settled(
        self, settlements: Sequence[Settlement], attempt_ids: dict[int, int]
    ) -> list[bool]:
        """Which settlements were written (their job got an attempt id), in order; the
        written attempts get their primary key."""
        written = []
        for settlement in settlements:
            attempt_id = attempt_ids.get(settlement.job_id)
            if attempt_id is not None:
                settlement.attempt.pk = attempt_id
                settlement.attempt._state.adding = False
                settlement.attempt._state.db = self.alias
            written.append(attempt_id is not None)
        return written

    # -- wake-ups ---------------------------------------------------------------------------

    def listener(self, channel: str) -> Any:
        """A blocking source of wake-ups for idle workers, or None where only polling works."""
        return None

    def change_counter(self) -> int | None:
        """A number that changes when another connection commits a write, cheap enough to
        read every few milliseconds; None where the database has none (PostgreSQL, which
        notifies instead)."""
        return None
