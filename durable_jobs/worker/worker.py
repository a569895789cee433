"""The worker: one loop thread that claims, dispatches and acknowledges; a pool that runs.

The loop thread is the only one that writes job state for this node: it claims at
most ``concurrency - running`` jobs per queue, hands them to the thread pool, and
records every outcome (including timeouts and hand-backs) itself. Because one
thread decides, a job's outcome is recorded once even when a handler's late return
races its timeout.

Wake-ups come from the pool (a slot freed), from enqueues in this process (on
commit), from PostgreSQL NOTIFY (a listener thread), and from the poll interval.
"""

from __future__ import annotations

import collections
import logging
import os
import queue
import signal
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import DataError, IntegrityError, close_old_connections, connections
from django.db import Error as DatabaseError
from django.utils import timezone

from durable_jobs import wakeup
from durable_jobs.backoff import MAX_DELAY_SECONDS
from durable_jobs.conf import get_settings
from durable_jobs.db import engine_for
from durable_jobs.db.upkeep import refresh_thread_connections
from durable_jobs.exceptions import ImproperlyConfiguredQueue, JobTimeout
from durable_jobs.flow import queues as flow_queues
from durable_jobs.lifecycle import outcomes, recording
from durable_jobs.lifecycle.outcomes import RunResult, Settlement
from durable_jobs.lifecycle.transitions import claim
from durable_jobs.logging import log_event
from durable_jobs.models import Job, Node, Outcome
from durable_jobs.payload import text_problem
from durable_jobs.plugins import Heartbeat, Plugin, default_plugins
from durable_jobs.worker.execute import execute
from durable_jobs.worker.node import register_node
from durable_jobs.worker.pool import Interrupted, ThreadPool

logger = logging.getLogger("durable_jobs.worker")

#: Extra time an async handler gets to report its own timeout before the loop records it.
ASYNC_TIMEOUT_GRACE = 1.0
#: The loop's longest sleep, so a stop requested by a signal is seen within it.
SIGNAL_CHECK_SECONDS = 0.25
#: How long a finished job's outcome may wait for others to share its write. Outcomes
#: are written at once when no job is left running, and when ACK_BATCH are waiting.
ACK_FLUSH_SECONDS = 0.005
#: The most outcomes written in one statement.
ACK_BATCH = 500
#: SQLite, where no notification reaches a worker in another process: an idle worker reads
#: the database's change counter (no I/O), every CHANGE_CHECK_MIN seconds after a change,
#: backing off to CHANGE_CHECK_MAX while nothing changes, and claims when it moved.
CHANGE_CHECK_MIN = 0.002
CHANGE_CHECK_MAX = 0.02


class LoopWake(threading.Event):
    """The loop's wake-up. ``set()`` (an enqueue in this process, a notification, a stop)
    also says that new jobs may be waiting; ``result_ready()`` (a pool thread finished a
    job) does not, so the loop can let outcomes gather before it writes and claims."""

    def __init__(self) -> None:
        super().__init__()
        self._new_work = False
        # set() and take() under one lock: a set() between take()'s read of the flag and
        # its clear of the event would otherwise be lost (until the next poll).
        self._flag_lock = threading.Lock()

    def set(self) -> None:
        with self._flag_lock:
            self._new_work = True
            super().set()

    def result_ready(self) -> None:
        # No flag: the loop collects results after take(), so none set before is missed.
        super().set()

    def take(self) -> bool:
        """Clear the wake-up; return whether new work was signalled since the last take."""
        with self._flag_lock:
            new_work, self._new_work = self._new_work, False
            super().clear()
        return new_work


@dataclass(eq=False)
class Running:
    job: Job
    deadline: float | None
    #: The loop already recorded an outcome (timeout, hand-back); ignore the late result.
    resolved: bool = False


@dataclass
class WorkerStats:
    claimed: int = 0
    finished: int = 0
    #: Outcomes recorded (written under the job's lease), by attempt outcome.
    outcomes: collections.Counter[str] = field(default_factory=collections.Counter)
    #: Outcomes refused because the job had moved on (rescued, cancelled): not counted above.
    rejected: int = 0
    #: Claim statements that leased at least one job, and writes of outcome batches: with
    #: ``claimed`` and ``finished``, how well the worker batches.
    claims: int = 0
    flushes: int = 0


def parse_queues(
    spec: str | Sequence[str] | None, default_concurrency: int | None = None
) -> dict[str, int]:
    """``"default,emails:5"`` -> ``{"default": 10, "emails": 5}``.

    A queue without ``:N`` takes ``default_concurrency``, else its configured
    concurrency, else 10. Without a spec, every queue in ``DURABLE_JOBS["QUEUES"]``.
    """
    return parse_queue_spec(spec, default_concurrency)[0]


def parse_queue_spec(
    spec: str | Sequence[str] | None, default_concurrency: int | None = None
) -> tuple[dict[str, int], dict[str, str]]:
    """:func:`parse_queues`, plus the global rates given as a third part:
    ``"webhooks:3:30/1m"`` -> ``({"webhooks": 3}, {"webhooks": "30/1m"})``."""
    from durable_jobs.flow.rates import InvalidRate, parse_rate

    configured = get_settings().queues
    rates: dict[str, str] = {}
    parts: list[str]
    if spec is None or spec == "" or spec == []:
        parts = list(configured)
    elif isinstance(spec, str):
        parts = [p.strip() for p in spec.split(",") if p.strip()]
    else:
        parts = list(spec)
    queues: dict[str, int] = {}
    for part in parts:
        name, _, rest = part.partition(":")
        limit, _, rate = rest.partition(":")
        name = name.strip()
        if rate:
            try:
                parse_rate(rate)
            except InvalidRate as exc:
                raise ImproperlyConfiguredQueue(f"Queue {name!r}: {exc}") from None
            rates[name] = rate.strip()
        if not name:
            raise ImproperlyConfiguredQueue(
                f"Empty queue name in {spec!r}; use name[:concurrency],..."
            )
        problem = text_problem(name)
        if problem or len(name) > 100:
            # The queue's row could not be stored (PostgreSQL), so the worker would fail
            # at start with a misleading database error, or claim forever in vain.
            raise ImproperlyConfiguredQueue(
                f"Queue name {name[:120]!r} is "
                + (problem or "longer than 100 characters")
                + "; queue names are 1-100 characters of text"
            )
        if limit:
            try:
                concurrency = int(limit)
            except ValueError:
                raise ImproperlyConfiguredQueue(
                    f"Queue {part!r}: concurrency must be a whole number, as in {name}:5"
                ) from None
        elif default_concurrency is not None:
            concurrency = default_concurrency
        elif name in configured:
            concurrency = configured[name].concurrency
        else:
            concurrency = 10
        if concurrency < 1:
            raise ImproperlyConfiguredQueue(f"Queue {name!r}: concurrency must be at least 1")
        queues[name] = concurrency
    if not queues:
        raise ImproperlyConfiguredQueue("No queues to serve; pass --queues name[:concurrency],...")
    return queues, rates


class Worker:
    """Runs jobs from ``queues`` until stopped. Drive it from a command, a thread or a test.

    >>> Worker({"default": 4}, burst=True).run()   # process what is there, then return
    """

    def __init__(
        self,
        queues: Mapping[str, int] | str | None = None,
        *,
        concurrency: int | None = None,
        burst: bool = False,
        max_jobs: int | None = None,
        lease_seconds: float | None = None,
        heartbeat_seconds: float | None = None,
        shutdown_grace: float | None = None,
        poll_interval: float | None = None,
        plugins: Sequence[Plugin] | None = None,
        scheduler: bool = True,
        using: str | None = None,
        name: str | None = None,
        rates: Mapping[str, str] | None = None,
    ) -> None:
        settings = get_settings()
        spec_rates: dict[str, str] = {}
        if queues is None or isinstance(queues, str):
            queues, spec_rates = parse_queue_spec(queues, concurrency)
        self.queues: dict[str, int] = dict(queues)
        #: Global rates given on the command line (``--queues name:N:rate``).
        self.rates: dict[str, str] = {**spec_rates, **(rates or {})}
        #: Queues whose claims lock and count; refreshed by every heartbeat.
        self.limited_queues: set[str] = set()
        self.burst = burst
        self.max_jobs = max_jobs
        self.lease_seconds = float(
            settings.lease_seconds if lease_seconds is None else lease_seconds
        )
        self.heartbeat_seconds = float(
            min(settings.heartbeat_seconds, self.lease_seconds / 3)
            if heartbeat_seconds is None
            else heartbeat_seconds
        )
        self.shutdown_grace = float(
            settings.shutdown_grace_seconds if shutdown_grace is None else shutdown_grace
        )
        self.poll_interval = float(
            settings.poll_interval if poll_interval is None else poll_interval
        )
        timings = (self.lease_seconds, self.heartbeat_seconds, self.poll_interval)
        # "not 0 < x <= ..." also refuses NaN; inf would overflow the first lease's expiry.
        if not all(0 < value <= MAX_DELAY_SECONDS for value in timings):
            raise ValueError(
                "lease_seconds, heartbeat_seconds and poll_interval must be > 0 and at most "
                f"{MAX_DELAY_SECONDS:g} seconds (a year)"
            )
        # The schedule heartbeat runs before the first claim, so a burst worker also
        # processes the occurrences that are due when it starts.
        self.plugins = list(default_plugins(scheduler=scheduler) if plugins is None else plugins)
        self.alias = engine_for(using).alias
        self.requested_name = name
        self.stats = WorkerStats()
        self.node: Node
        self.stopping = False
        self.stop_reason = "finished"

        self._wake = LoopWake()
        self._closing = threading.Event()
        # Database failures seen by the loop or the listener, and per pool thread the count
        # it last checked its connection at: after a failure (a restart breaks every idle
        # connection) each thread checks its connection once before its next job, instead
        # of failing that job's attempt on a dead connection.
        self._database_failures = 0
        self._failures_lock = threading.Lock()
        self._checked = threading.local()
        self._results: queue.SimpleQueue[tuple[Running, RunResult | None]] = queue.SimpleQueue()
        self._running: dict[int, Running] = {}
        self._per_queue: collections.Counter[str] = collections.Counter()
        self._pending: list[Settlement] = []
        #: When the oldest unwritten outcome was collected (monotonic), for ACK_FLUSH_SECONDS.
        self._pending_since = 0.0
        self._plugin_due: dict[int, float] = {}
        #: SQLite's change counter as last read, when the next read is due, and the gap.
        self._changes: int | None = None
        self._next_change_check = 0.0
        self._change_check_gap = CHANGE_CHECK_MIN
        self._signals = 0
        self._pool: ThreadPool | None = None
        self._listener_thread: threading.Thread | None = None
        self.started = threading.Event()
        #: What stopped a worker started with start(), if it failed.
        self.failure: BaseException | None = None

    # -- public control -------------------------------------------------------------------

    def run(self) -> int:
        """Run until stopped (or, in burst mode, until nothing is left); return an exit code."""
        self._start()
        try:
            self._loop()
        finally:
            self._shutdown()
        return 0

    def start(self) -> threading.Thread:
        """Run in a background thread (for tests and in-process workers)."""
        thread = threading.Thread(
            target=self._run_in_thread, name="durable-jobs-worker", daemon=True
        )
        thread.start()
        self.started.wait(30)
        if self.failure is not None:
            raise self.failure
        return thread

    def stop(self) -> None:
        """Ask for a graceful stop: no new claims; running jobs get the grace period."""
        if not self.stopping and self.stop_reason == "finished":
            self.stop_reason = "stop requested"
        self.stopping = True
        self._wake.set()

    def install_signal_handlers(self) -> None:
        """First SIGTERM/SIGINT: graceful stop. Second: exit at once."""
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    def running_leases(self) -> dict[Any, list[int]]:
        """Lease token -> ids of the jobs this node runs and still holds."""
        out: dict[Any, list[int]] = collections.defaultdict(list)
        for job_id, running in self._running.items():
            if not running.resolved:
                out[running.job.lease_token].append(job_id)
        return out

    def reregister_node(self) -> None:
        self.node = register_node(self.queues, using=self.alias)

    def refresh_queue_limits(self) -> None:
        self.limited_queues = flow_queues.limited(self.queues, using=self.alias)

    # -- the loop ---------------------------------------------------------------------------

    def _run_in_thread(self) -> None:
        try:
            self.run()
        except BaseException as exc:
            self.failure = exc
            logger.exception("worker thread failed")
        finally:
            self.started.set()  # never leave start() waiting on a worker that died
            connections.close_all()

    def _start(self) -> None:
        self.node = register_node(
            self.queues,
            name=self.requested_name,
            using=self.alias,
            stale_after=self.lease_seconds,
        )
        flow_queues.sync_for_worker(self.queues, self.rates, using=self.alias)
        self.refresh_queue_limits()
        self._pool = ThreadPool(
            sum(self.queues.values()), work=self._work, report=self._report, name=self.node.name
        )
        wakeup.subscribe(self._wake)
        listener = engine_for(self.alias).listener(get_settings().notify_channel)
        if listener is not None and not self.burst:
            self._listener_thread = threading.Thread(
                target=self._listen, args=(listener,), name=f"{self.node.name}-listen", daemon=True
            )
            self._listener_thread.start()
        self._changes = engine_for(self.alias).change_counter()
        now = time.monotonic()
        self._plugin_due = {id(p): now for p in self.plugins}
        logger.info(
            "worker %s started (pid %s, queues %s)",
            self.node.name,
            os.getpid(),
            ", ".join(f"{q}:{c}" for q, c in self.queues.items()),
            extra={"node": self.node.name, "queues": self.queues},
        )
        self.started.set()

    def _loop(self) -> None:
        failures = 0
        next_poll = 0.0
        while not self.stopping:
            new_work = self._wake.take()
            try:
                self._collect_results()
                # Plugins first: the heartbeat keeps renewing leases even while outcome
                # writes are failing and being retried.
                self._run_plugins()
                acks_due = self._acks_due()
                self._enforce_timeouts()
                if self._reached_max_jobs():
                    break
                # Claim when new jobs may be waiting (a wake-up, a due poll, a change on
                # SQLite), or when the waiting outcomes are due: a pass that only collected
                # a result leaves its slot for later, so that each claim takes a batch.
                poll_due = time.monotonic() >= next_poll or self._database_changed()
                if new_work or poll_due or acks_due or (self.burst and not self._pending):
                    next_poll = time.monotonic() + self.poll_interval
                    claimed = self._write_and_claim()
                    if self.burst and not claimed and not self._running and not self._pending:
                        break
                failures = 0
            except DatabaseError as exc:
                failures += 1
                self._on_database_error(exc, failures)
                continue
            self._wake.wait(self._next_wait(next_poll))

    def _database_changed(self) -> bool:
        """SQLite: whether another connection committed since the last check (read when
        due, see CHANGE_CHECK_MIN). Always False where the database cannot tell."""
        if self._changes is None or time.monotonic() < self._next_change_check:
            return False
        changes = engine_for(self.alias).change_counter()
        changed = changes != self._changes
        self._changes = changes
        gap = CHANGE_CHECK_MIN if changed else min(self._change_check_gap * 2, CHANGE_CHECK_MAX)
        self._change_check_gap = min(gap, self.poll_interval)
        self._next_change_check = time.monotonic() + self._change_check_gap
        return changed

    def _acks_due(self) -> bool:
        """Whether to write the waiting outcomes now: when no job is left running (nothing
        else is coming soon), when a batch is full, or when the oldest has waited long
        enough."""
        return bool(self._pending) and (
            len(self._running) == 0
            or len(self._pending) >= ACK_BATCH
            or time.monotonic() - self._pending_since >= ACK_FLUSH_SECONDS
            or self.stopping
        )

    def _write_and_claim(self) -> int:
        """Write the waiting outcomes and lease jobs for the free slots in one transaction,
        so that a loop pass costs one commit; return how many were leased. A finished
        job's slot is taken again only together with its outcome's write: the database
        never shows more leases than the concurrency."""
        while len(self._pending) > ACK_BATCH:
            self._flush_batch(ACK_BATCH)
        batch = self._pending
        if not batch:
            return self._claim()
        free = self._free_slots()
        try:
            with engine_for(self.alias).write_transaction(savepoint=False):
                written = recording.write(batch, using=self.alias)
                leased = self._lease(free)
        except (DataError, IntegrityError):
            # An outcome the database refuses: write them one at a time, then claim in a
            # transaction of its own.
            self._flush_acks()
            return self._claim()
        self._written(batch, written)
        del self._pending[: len(batch)]
        return self._dispatch_all(leased)

    def _free_slots(self) -> dict[str, int]:
        """Per queue, how many jobs this worker may lease now."""
        free = {}
        for queue_name, concurrency in self.queues.items():
            slots = concurrency - self._per_queue[queue_name]
            if self.max_jobs is not None:
                slots = min(slots, self.max_jobs - self.stats.claimed)
            if slots > 0:
                free[queue_name] = slots
        return free

    def _lease(self, free: Mapping[str, int]) -> list[Job]:
        leased: list[Job] = []
        for queue_name, slots in free.items():
            jobs = claim(
                queue=queue_name,
                limit=slots,
                node_id=self.node.pk,
                lease_seconds=self.lease_seconds,
                limited=queue_name in self.limited_queues,
                using=self.alias,
            )
            jobs.sort(key=lambda j: (-j.priority, j.available_at, j.pk))
            leased += jobs
            self.stats.claims += bool(jobs)
        return leased

    def _claim(self) -> int:
        return self._dispatch_all(self._lease(self._free_slots()))

    def _dispatch_all(self, jobs: Sequence[Job]) -> int:
        for job in jobs:
            self._dispatch(job)
        return len(jobs)

    def _dispatch(self, job: Job) -> None:
        deadline = None
        if job.timeout:
            handler_is_async = _is_async(job.name)
            deadline = (
                time.monotonic() + job.timeout + (ASYNC_TIMEOUT_GRACE if handler_is_async else 0)
            )
        running = Running(job=job, deadline=deadline)
        self._running[job.pk] = running
        self._per_queue[job.queue] += 1
        self.stats.claimed += 1
        log_event(logging.DEBUG, "leased", job, node=self.node.name)
        assert self._pool is not None
        self._pool.submit(running)

    def _work(self, running: Running) -> RunResult:
        # Connections that errored or outlived a positive CONN_MAX_AGE are closed before
        # and after each job, so a long-running worker survives database restarts.
        failures = self._database_failures
        refresh_thread_connections(verify=getattr(self._checked, "failures", 0) != failures)
        self._checked.failures = failures
        try:
            return execute(running.job, node=self.node.name, lease_seconds=self.lease_seconds)
        except Interrupted:
            raise  # the loop's own interruption: it has already recorded the outcome
        except BaseException as exc:
            # SystemExit, KeyboardInterrupt or any other BaseException raised by the handler
            # itself (signals only reach the main thread): in a pool thread it can stop
            # nothing but this job, so it is that job's failure. Escaping, it would end the
            # pool thread and leave the job leased, its lease renewed by every heartbeat.
            return outcomes.unreported(
                running.job, now=timezone.now(), outcome=Outcome.FAILED, error=exc
            )
        finally:
            refresh_thread_connections()

    def _report(self, running: Running, result: RunResult | None) -> None:
        self._results.put((running, result))
        self._wake.result_ready()

    def _collect_results(self) -> None:
        while True:
            try:
                running, result = self._results.get_nowait()
            except queue.Empty:
                return
            self._running.pop(running.job.pk, None)
            self._per_queue[running.job.queue] -= 1
            if running.resolved:
                continue
            if result is None:
                # Only an interruption yields no result, and the loop resolves a job before
                # interrupting it; record a failure rather than ever leave the job leased.
                now = timezone.now()
                result = outcomes.unreported(running.job, now=now, outcome=Outcome.LOST)
            self._finish(running, result)

    def _finish(self, running: Running, result: RunResult) -> None:
        running.resolved = True
        self.stats.finished += 1
        if not self._pending:
            self._pending_since = time.monotonic()
        self._pending.append(outcomes.decide(result, node=self.node.name))

    def _flush_acks(self) -> bool:
        """Write the waiting outcomes (ACK_BATCH per statement); True if there were any."""
        if not self._pending:
            return False
        while self._pending:
            self._flush_batch(min(len(self._pending), ACK_BATCH))
        return True

    def _flush_batch(self, size: int) -> None:
        batch = self._pending[:size]
        try:
            # The batch in one statement (on SQLite, one turn of the write lock): one
            # commit for the batch instead of one per job.
            written = recording.write(batch, using=self.alias)
        except (DataError, IntegrityError):
            pass  # one of them is unwritable: find it by writing them one at a time
        else:
            self._written(batch, written)
            del self._pending[:size]
            return
        for _ in range(size):
            ack = self._pending[0]
            try:
                self._count(ack, recording.write_now([ack], using=self.alias)[0])
            except (DataError, IntegrityError) as exc:
                # Not transient: the same write would fail forever. Record the outcome
                # without the handler's data; if even that fails, leave the job to rescue.
                logger.error("could not record job %s's outcome in full: %s", ack.job.pk, exc)
                try:
                    self._count(
                        ack, recording.write_now([outcomes.stripped(ack)], using=self.alias)[0]
                    )
                except (DataError, IntegrityError) as again:
                    logger.error(
                        "dropped job %s's outcome (%s); it will be rescued", ack.job.pk, again
                    )
            self._pending.pop(0)

    def _written(self, batch: Sequence[Settlement], written: Sequence[bool]) -> None:
        """After a batch of outcomes is committed."""
        self.stats.flushes += 1
        recording.after_commit(batch, written, using=self.alias)
        for ack, ok in zip(batch, written, strict=True):
            self._count(ack, ok)

    def _count(self, ack: Settlement, written: bool) -> None:
        if written:
            self.stats.outcomes[ack.attempt.outcome] += 1
        else:
            self.stats.rejected += 1

    def _enforce_timeouts(self) -> None:
        now = time.monotonic()
        timed_out = False
        for running in list(self._running.values()):
            if running.resolved or running.deadline is None or now < running.deadline:
                continue
            job = running.job
            result = outcomes.unreported(
                job,
                now=timezone.now(),
                outcome=Outcome.TIMED_OUT,
                error=JobTimeout(f"the job ran longer than its timeout of {job.timeout:g}s"),
            )
            self._finish(running, result)
            assert self._pool is not None
            self._pool.interrupt(running)
            timed_out = True
        if timed_out:
            self._flush_acks()

    def _run_plugins(self, only: type[Plugin] | None = None) -> None:
        now = time.monotonic()
        for plugin in self.plugins:
            if only is not None and not isinstance(plugin, only):
                continue
            if now >= self._plugin_due[id(plugin)]:
                # Schedule first: a failing plugin is retried at its next interval, not at once.
                self._plugin_due[id(plugin)] = now + plugin.interval(self)
                plugin.run(self)
                # Again after it ran: its interval may depend on what the run found (the
                # pruner comes back sooner while it is behind).
                self._plugin_due[id(plugin)] = time.monotonic() + plugin.interval(self)

    def _reached_max_jobs(self) -> bool:
        return (
            self.max_jobs is not None
            and self.stats.claimed >= self.max_jobs
            and not self._running
            and not self._pending
        )

    def _next_wait(self, next_poll: float) -> float:
        now = time.monotonic()
        # Capped, because a signal handler only sets a flag (see _on_signal) and the loop
        # must notice it promptly.
        wait = min(next_poll - now, SIGNAL_CHECK_SECONDS)
        for due in self._plugin_due.values():
            wait = min(wait, due - now)
        for running in self._running.values():
            if running.deadline is not None and not running.resolved:
                wait = min(wait, running.deadline - now)
        if self._pending:
            wait = min(wait, self._pending_since + ACK_FLUSH_SECONDS - now)
        if self._changes is not None:
            wait = min(wait, self._next_change_check - now)
        return max(wait, 0.0005)

    def _count_database_failure(self) -> None:
        # The loop and the listener thread both count.
        with self._failures_lock:
            self._database_failures += 1

    def _on_database_error(self, exc: Exception, failures: int) -> None:
        self._count_database_failure()
        delay = min(0.25 * 2 ** (failures - 1), 10.0)
        logger.warning(
            "database error in worker %s (%s: %s); retrying in %.2fs",
            self.node.name,
            type(exc).__name__,
            exc,
            delay,
            extra={"node": self.node.name, "error": str(exc)},
        )
        connections[self.alias].close()
        close_old_connections()
        # Sleep in short steps so a stop request (a signal's flag) ends the backoff early.
        until = time.monotonic() + delay
        while not self.stopping and time.monotonic() < until:
            time.sleep(min(SIGNAL_CHECK_SECONDS, max(until - time.monotonic(), 0)))

    # -- wake-ups -----------------------------------------------------------------------------

    def _listen(self, listener: Any) -> None:
        backoff = 0.5
        while not self._closing.is_set():
            try:
                queues = listener.wait(timeout=1.0)
                backoff = 0.5
            except Exception as exc:
                logger.warning("listener lost its connection (%s); reconnecting", exc)
                self._count_database_failure()
                listener.close()
                self._closing.wait(backoff)
                backoff = min(backoff * 2, 10.0)
                self._wake.set()  # poll once, in case a notification was missed meanwhile
                continue
            if any(q in self.queues for q in queues):
                self._wake.set()
        listener.close()

    # -- stopping ---------------------------------------------------------------------------

    def _on_signal(self, signum: int, frame: Any) -> None:
        # Only set flags here. The handler runs in the main thread between bytecodes,
        # possibly inside a stream write (a reentrant write raises) or inside an Event's
        # lock (Event.set would deadlock on it). The loop notices the flag and logs.
        self._signals += 1
        if self._signals > 1:
            os._exit(128 + signum)
        self.stop_reason = f"signal {signal.Signals(signum).name}"
        self.stopping = True

    def _shutdown(self) -> None:
        self.stopping = True
        logger.info(
            "worker %s stopping (%s): finishing running jobs for up to %ss",
            self.node.name,
            self.stop_reason,
            self.shutdown_grace,
            extra={"node": self.node.name, "running": len(self._running)},
        )
        deadline = time.monotonic() + self.shutdown_grace
        self._with_retries(self._mark_stopping, deadline)
        while self._running and time.monotonic() < deadline:
            self._wake.wait(min(0.05, max(deadline - time.monotonic(), 0.001)))
            self._wake.clear()
            self._with_retries(self._collect_and_flush, deadline)
            self._with_retries(self._enforce_timeouts, deadline)
            # Keep renewing leases: a grace period longer than the lease must not let
            # another node rescue (and run again) a job that is about to finish here.
            self._with_retries(lambda: self._run_plugins(only=Heartbeat), deadline)
        self._hand_back_running()
        self._with_retries(self._collect_and_flush, time.monotonic() + 5)
        self._closing.set()
        wakeup.unsubscribe(self._wake)
        if self._pool is not None:
            self._pool.shutdown()
        if self._listener_thread is not None:
            self._listener_thread.join(timeout=5)
        self._with_retries(self._delete_node, time.monotonic() + 5)
        logger.info(
            "worker %s stopped after %s jobs (%s claims, %s writes of outcomes)",
            self.node.name,
            self.stats.finished,
            self.stats.claims,
            self.stats.flushes,
            extra={
                "node": self.node.name,
                "outcomes": dict(self.stats.outcomes),
                "rejected": self.stats.rejected,
            },
        )

    def _delete_node(self) -> None:
        with engine_for(self.alias).write_transaction():
            Node.objects.using(self.alias).filter(pk=self.node.pk).delete()

    def _mark_stopping(self) -> None:
        Node.objects.using(self.alias).filter(pk=self.node.pk).update(stopping=True)

    def _collect_and_flush(self) -> None:
        self._collect_results()
        self._flush_acks()

    def _hand_back_running(self) -> None:
        """Return unfinished jobs to ``queued`` at once, rather than after the lease expires."""
        # Results already reported are finished jobs, not unfinished ones: take them first
        # (no database involved). A handler that returned while the grace period's last
        # pass was busy (flush, heartbeat) was otherwise recorded as interrupted and run
        # again by another worker: a needless second run (tests/faults/test_graceful_deploy.py).
        self._collect_results()
        now = timezone.now()
        for running in list(self._running.values()):
            if running.resolved:
                continue
            result = outcomes.unreported(running.job, now=now, outcome=Outcome.INTERRUPTED)
            self._finish(running, result)
            assert self._pool is not None
            self._pool.interrupt(running)
        self._with_retries(self._flush_acks, time.monotonic() + 10)

    def _with_retries(self, action: Any, deadline: float) -> None:
        """Best effort during shutdown: retry on database errors until ``deadline``."""
        failures = 0
        while True:
            try:
                action()
                return
            except DatabaseError as exc:
                failures += 1
                if time.monotonic() >= deadline:
                    logger.error("giving up during shutdown: %s", exc)
                    return
                self._on_database_error(exc, failures)


def _is_async(name: str) -> bool:
    from durable_jobs import registry
    from durable_jobs.exceptions import UnknownJob

    try:
        return registry.get_handler(name).is_async
    except UnknownJob:
        return False
