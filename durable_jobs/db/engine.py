"""The engine contract: every database operation the rest of durable_jobs relies on.

One complete subclass per database (:mod:`~durable_jobs.db.postgresql`, :mod:`~.sqlite`),
chosen once per alias from ``connection.vendor`` (:func:`durable_jobs.db.engine_for`).
The abstract methods are what each database writes in its own SQL. The others are
portable (the ORM, or SQL that every supported database accepts); an engine overrides
them where its database does better.

Engines execute, they do not decide: which jobs a claim may take (pauses, rates,
concurrency keys) is decided in :mod:`durable_jobs.flow.limits`, and what an outcome
means in :mod:`durable_jobs.lifecycle.outcomes`. An engine imports nothing above the
models and the lifecycle's vocabulary (:mod:`~durable_jobs.lifecycle.states`,
:mod:`~durable_jobs.lifecycle.sql`), besides the leaf modules ``conf``, ``limits`` and
``exceptions``.
"""

from __future__ import annotations

import abc
import contextlib
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from django.core.checks import CheckMessage
from django.db import connections, models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import signals as model_signals
from django.utils import timezone

from durable_jobs.db import inserts, percentiles, rows
from durable_jobs.db.contract import ChooseKeyed, ClaimRequest, Listener, PassWrites
from durable_jobs.db.inserts import insert_fields
from durable_jobs.lifecycle.sql import LEASED, state_list
from durable_jobs.lifecycle.states import CLAIMABLE, FINAL, State
from durable_jobs.models import Attempt, Job, JobRequest, Node, Queue

if TYPE_CHECKING:
    from durable_jobs.lifecycle.outcomes import Settlement


DELETE_CHUNK = 500  # ids per DELETE statement (SQLite allows 999 parameters)

#: Keyed jobs whose key already has ``concurrency_limit`` leased holders are not picked.
KEY_FILTER = """
    AND (job.concurrency_key IS NULL OR (
        SELECT count(*) FROM {table} AS holder
        WHERE holder.concurrency_key = job.concurrency_key AND holder.state IN ({leased})
    ) < job.concurrency_limit)
"""


def _plain_delete_is_enough() -> bool:
    """Whether deleting a job's attempts and requests, then the job, deletes all Django would:
    no delete signal has receivers and no other model points at jobs."""
    dependents = {relation.related_model for relation in Job._meta.related_objects}
    signals = (model_signals.pre_delete, model_signals.post_delete)
    return dependents <= {Attempt, JobRequest} and not any(
        signal.has_listeners(Job) for signal in signals
    )


class Engine(abc.ABC):
    """The database operations of one alias. Stateless: one instance serves every thread."""

    vendor: ClassVar[str]
    #: SQL for the overview's duration percentiles per handler (see :mod:`.percentiles`).
    percentiles_sql = staticmethod(percentiles.ranked)

    def __init__(self, alias: str) -> None:
        self.alias = alias

    @property
    def connection(self) -> BaseDatabaseWrapper:
        return connections[self.alias]

    # -- transactions ---------------------------------------------------------------------

    @abc.abstractmethod
    def write_transaction(self, *, savepoint: bool = True) -> AbstractContextManager[None]:
        """A transaction for statements that write (on SQLite it takes the write lock first).

        Inside another transaction it is a savepoint, unless ``savepoint`` is False (a
        statement the caller's transaction succeeds or fails with: the worker's claim and
        outcome write, which share one transaction per loop pass).
        """

    def keyed_transaction(self, key: str) -> AbstractContextManager[None]:
        """A write transaction that runs alone among the holders of ``key``, and whose
        reads see all that the previous holder committed, whatever the connection's
        isolation level (the HTTP endpoint's per-user throttle counts on both). Here:
        :meth:`write_transaction`, then :meth:`lock_keys` inside it (on SQLite the write
        lock comes before the transaction's snapshot, so that is enough)."""
        return _locked_inside(self, key)

    # -- enqueue ----------------------------------------------------------------------------

    @abc.abstractmethod
    def insert_job(self, job: Job, *, notify: bool) -> int | None:
        """Insert ``job``; return its id, or None when its idempotency key already exists.
        The unique constraint decides between concurrent enqueues of one key (``ON CONFLICT
        DO NOTHING``, ``INSERT IGNORE``), never a read-then-write. ``notify``: announce the
        job when the transaction commits, where the database can."""

    @abc.abstractmethod
    def insert_rows(self, jobs: Sequence[Job]) -> list[tuple[Any, ...]]:
        """Insert ``jobs`` (keyed ones first), skipping taken keys: the ``(id, key)`` of
        the rows inserted, in ``jobs`` order."""

    @abc.abstractmethod
    def rows_per_insert(self) -> int:
        """The most jobs :meth:`insert_rows` takes at once."""

    def insert_jobs(self, jobs: Sequence[Job]) -> list[int | None]:
        """Insert ``jobs``; each one's new id, or None where its idempotency key was taken
        (by an existing job, or by an earlier one in the list).

        The returned rows come back in insert order (Django's bulk_create relies on the
        same), minus the skipped ones; matching them by key puts each id in its place.
        """
        if not jobs:
            return []
        # Keyed rows first, in key order: two bulk inserts that share keys then wait on
        # each other's keys in the same order, instead of deadlocking.
        keyed = [i for i, job in enumerate(jobs) if job.idempotency_key is not None]
        keyed.sort(key=lambda i: (jobs[i].idempotency_key, i))
        order = keyed + [i for i, job in enumerate(jobs) if job.idempotency_key is None]
        in_order = [jobs[i] for i in order]
        per_statement = self.rows_per_insert()
        ids: list[int | None] = []
        for start in range(0, len(in_order), per_statement):
            chunk = in_order[start : start + per_statement]
            returned = self.insert_rows(chunk)
            if len(returned) == len(chunk):  # every row went in (as keyless rows do)
                ids += [int(row[0]) for row in returned]
                continue
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

    @abc.abstractmethod
    def notify(self, queues: Sequence[str]) -> None:
        """Wake workers of ``queues`` when the current transaction commits (where the
        database can)."""

    # -- claim ------------------------------------------------------------------------------

    @abc.abstractmethod
    def may_claim(self, queue: str) -> bool:
        """False when ``queue`` certainly has nothing to claim now: a cheap read, with no
        lock, for databases where a claim's transaction costs a lock others wait for."""

    def pass_transaction(self, *, one_claim: bool) -> AbstractContextManager[None]:
        """What a worker's loop pass writes in: its outcomes, then its claims
        (:meth:`settle_and_claim`, and :meth:`claim` for further queues). Here one write
        transaction, so that a pass costs one commit (on SQLite, one turn of the write
        lock). ``one_claim``: the pass is one call of :meth:`settle_and_claim`, which an
        engine may run as one statement that commits on its own."""
        return self.write_transaction(savepoint=False)

    def settle_and_claim(
        self,
        settlements: Sequence[Settlement],
        request: ClaimRequest,
        *,
        choose_keyed: ChooseKeyed,
    ) -> PassWrites:
        """:meth:`settle` the outcomes, then :meth:`claim` on the fast path (``guarded``)
        for the slots they freed, in :meth:`pass_transaction`."""
        if not settlements and not self.may_claim(request.queue):
            return PassWrites([], [])
        with self.write_transaction(savepoint=False):
            written = self.settle(settlements) if settlements else []
            jobs = self.claim(request, guarded=True, choose_keyed=choose_keyed)
        return PassWrites(written, jobs)

    @abc.abstractmethod
    def claim(
        self, request: ClaimRequest, *, guarded: bool, choose_keyed: ChooseKeyed
    ) -> list[Job]:
        """Lease up to ``request.limit`` available jobs of the queue, best first, in the
        caller's write transaction.

        ``guarded``: lease nothing if the queue's row says it is paused or limited (the
        fast path; see :mod:`durable_jobs.flow.limits`). Picked jobs with a concurrency
        key are row-locked and passed to ``choose_keyed``; only those it returns are
        leased.
        """

    def lock_queue(self, name: str) -> Queue | None:
        """The queue's row, locked until the transaction ends."""
        return Queue.objects.using(self.alias).select_for_update().filter(name=name).first()

    @abc.abstractmethod
    def lock_keys(self, keys: Sequence[str]) -> None:
        """Serialise claimers of the same concurrency keys until the transaction ends."""

    # -- outcomes and leases ------------------------------------------------------------------

    @abc.abstractmethod
    def settle(self, settlements: Sequence[Settlement]) -> list[bool]:
        """Write a batch of lease outcomes and their attempts; return which were written.

        Each job moves only if it is still ``leased`` under the settlement's token (the
        fence), and its attempt row is inserted only then; a written attempt gets its
        primary key. A batch holds each job at most once.
        """

    def renew_leases(self, leases: Mapping[Any, Sequence[int]], expires_at: datetime) -> None:
        """Extend the leases ``{lease token: job ids}`` still held, to ``expires_at``."""
        jobs = Job.objects.using(self.alias)
        for token, ids in leases.items():
            jobs.filter(pk__in=list(ids), state=State.LEASED, lease_token=token).update(
                lease_expires_at=expires_at
            )

    def expired_leases(self, now: datetime, limit: int) -> list[Job]:
        """Up to ``limit`` leased jobs whose lease expired before ``now``, oldest first,
        with their node."""
        return list(
            Job.objects.using(self.alias)
            .filter(state=State.LEASED, lease_expires_at__lt=now)
            .select_related("leased_by")
            .order_by("lease_expires_at")[:limit]
        )

    def delete_finished(self, finished_before: datetime, limit: int) -> int | None:
        """Delete up to ``limit`` jobs (and their attempts) finished before ``finished_before``,
        except those of a batch still open; how many went, or None when none was due."""
        finished = Job.objects.using(self.alias).filter(
            state__in=sorted(FINAL), finished_at__lt=finished_before
        )
        ids = list(
            # A batch still open needs its finished jobs to count them.
            finished.exclude(batch__isnull=False, batch__finished_at__isnull=True).values_list(
                "pk", flat=True
            )[:limit]
        )
        if not ids:
            return None
        with self.write_transaction():
            # The conditions again: a job retried by an operator since the read stays.
            ids = list(finished.filter(pk__in=ids).values_list("pk", flat=True))
            if not _plain_delete_is_enough():
                # Let Django's collector send the project's signals, or follow its relations.
                return finished.filter(pk__in=ids).delete()[1].get(Job._meta.label, 0)
            # Plain DELETEs of the dependent rows and then of the jobs: the collector would
            # build a model instance of every job first, while the batch holds SQLite's
            # write lock (and the GIL of the worker's process).
            Attempt.objects.using(self.alias).filter(job_id__in=ids).delete()
            JobRequest.objects.using(self.alias).filter(job_id__in=ids).delete()
            return self.delete_rows(Job, ids)

    def delete_rows(self, model: type[models.Model], ids: Sequence[int]) -> int:
        """``DELETE`` the rows of ``model`` with these ids (their dependents already gone)."""
        qn = self.connection.ops.quote_name
        table, pk = qn(model._meta.db_table), qn(str(model._meta.pk.column))
        deleted = 0
        with self.connection.cursor() as cursor:
            for start in range(0, len(ids), DELETE_CHUNK):
                chunk = ids[start : start + DELETE_CHUNK]
                marks = ", ".join(["%s"] * len(chunk))
                cursor.execute(f"DELETE FROM {table} WHERE {pk} IN ({marks})", chunk)
                deleted += cursor.rowcount
        return deleted

    def forget_refused_requests(self, before: datetime, limit: int) -> int:
        """Delete up to ``limit`` records of refused HTTP requests older than ``before``
        (those of requests that got a job go with their job); how many went."""
        refused = JobRequest.objects.using(self.alias).filter(job__isnull=True)
        ids = list(refused.filter(created_at__lt=before).values_list("pk", flat=True)[:limit])
        if not ids:
            return 0
        with self.write_transaction():
            return refused.filter(pk__in=ids).delete()[0]

    def forget_nodes(self, silent_since: datetime) -> None:
        """Delete the rows of nodes whose last heartbeat is older than ``silent_since``."""
        with self.write_transaction():
            Node.objects.using(self.alias).filter(last_heartbeat_at__lt=silent_since).delete()

    # -- wake-ups -----------------------------------------------------------------------------

    @abc.abstractmethod
    def listener(self, channel: str) -> Listener | None:
        """A source of wake-ups for idle workers, or None where only polling works."""

    @abc.abstractmethod
    def change_counter(self) -> int | None:
        """A number that changes when another connection commits a write, cheap enough to
        read every few milliseconds; None where the database has none."""

    # -- checks -------------------------------------------------------------------------------

    def check(self, *, server: bool = False) -> list[CheckMessage]:
        """System check messages about this database's settings (see ``docs/checks.rst``);
        with ``server``, instead, about the server itself (a database check: it connects)."""
        return []

    def is_transient(self, exc: BaseException) -> bool:
        """Whether ``exc`` (a deadlock, say) ended a transaction that may succeed if rerun."""
        return False

    # -- what the engines' statements share ---------------------------------------------------

    def execute_prepared(
        self, sql: str, params: Any, *, prepare: bool = True
    ) -> tuple[tuple[str, ...], list[tuple[Any, ...]]]:
        """Run one of the statements a worker repeats (claim, outcome write), prepared where
        the database benefits and ``prepare`` allows; the result's column names and rows."""
        with self.connection.cursor() as cursor:
            cursor.execute(sql, params)
            return tuple(column[0] for column in cursor.description), cursor.fetchall()

    def fetch_jobs(self, sql: str, params: Any) -> list[Job]:
        """Run ``sql`` (through :meth:`execute_prepared`) and build a Job from each row it
        returns, which holds all of the job's columns."""
        layout, found = self.execute_prepared(sql, params)
        return rows.instances(Job, self.alias, layout, found)

    def claim_params(self, request: ClaimRequest) -> dict[str, Any]:
        """Values the claim binds, adapted for this database (the application clock)."""
        now = timezone.now()
        meta = Job._meta
        prep = self.connection
        return {
            "queue": request.queue,
            "target": LEASED,
            "node_id": request.node_id,
            "now": meta.get_field("available_at").get_db_prep_value(now, prep),
            "lease_expires_at": meta.get_field("lease_expires_at").get_db_prep_value(
                now + timedelta(seconds=request.lease_seconds), prep
            ),
            "lease_token": meta.get_field("lease_token").get_db_prep_value(uuid.uuid4(), prep),
        }

    def claim_parts(self, request: ClaimRequest, *, guarded: bool) -> dict[str, str]:
        """The pieces every engine's claim statement is built from."""
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
        leased = state_list([State.LEASED])
        return {
            "table": table,
            # Written into the text, not bound: with ``LIMIT $n`` a prepared statement's
            # generic plan is costed as if it fetched a tenth of the queue, so PostgreSQL
            # never adopts it and plans the claim at every call. One statement per limit
            # (at most the concurrency) is cheap to keep prepared.
            "limit": str(int(request.limit)),
            "sources": state_list(CLAIMABLE),
            "guard": guard,
            "key_filter": KEY_FILTER.format(table=table, leased=leased),
        }

    def insert_values(self, job: Job) -> list[Any]:
        """``job``'s values for :func:`insert_fields`, adapted for this database."""
        connection = self.connection  # looked up once: it is a thread-local access
        return [
            field.get_db_prep_save(getattr(job, field.attname), connection)
            for field in insert_fields()
        ]

    def insert_sql(self, rows: int = 1) -> str:
        """A multi-row ``INSERT ... ON CONFLICT DO NOTHING`` of :func:`insert_fields`."""
        return inserts.insert_sql(rows)


@contextlib.contextmanager
def _locked_inside(engine: Engine, key: str) -> Iterator[None]:
    with engine.write_transaction():
        engine.lock_keys([key])
        yield
