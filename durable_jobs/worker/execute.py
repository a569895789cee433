"""Running one leased job's handler and classifying how it ended.

Nothing here writes to the database except through the handler itself; the outcome
is returned as a :class:`~durable_jobs.lifecycle.outcomes.RunResult`, which
:func:`durable_jobs.lifecycle.outcomes.decide` turns into the job's next state.
"""

from __future__ import annotations

import asyncio
import datetime
import inspect
import time
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from durable_jobs import resolve, signals
from durable_jobs.context import JobContext, LeaseWrites
from durable_jobs.exceptions import Cancel, Discard, JobTimeout, PayloadMismatch, Snooze, UnknownJob
from durable_jobs.lifecycle.errors import storable
from durable_jobs.lifecycle.outcomes import RunResult
from durable_jobs.logging import JobLoggerAdapter, job_fields
from durable_jobs.models import Job, Node, Outcome
from durable_jobs.worker import middleware
from durable_jobs.worker.pool import Interrupted

if TYPE_CHECKING:
    from durable_jobs.handlers import JobHandler


def execute(
    job: Job,
    *,
    node: str = "",
    lease_seconds: float = 60.0,
    handler: JobHandler[..., Any] | None = None,
    worker_node: Node | None = None,
    writes: LeaseWrites | None = None,
    announce: bool = True,
) -> RunResult:
    """Run ``job``'s handler (looked up by name unless given) with its stored payload,
    through the execution middleware if there is any.

    Never raises for what the handler raises: ``SystemExit``, ``KeyboardInterrupt`` and
    other ``BaseException`` s are the attempt's failure too (in a worker's pool thread
    they could stop nothing but this job). Only the pool's own :class:`Interrupted`
    goes through.

    In a child of the process executor, ``writes`` carries the context's progress and
    lease renewals to the worker, which has already sent ``attempt_started``
    (``announce=False``).
    """
    started_at = timezone.now()
    t0 = time.monotonic()
    adapter = JobLoggerAdapter(job_fields(job, node=node))
    outcome, value, snooze = Outcome.COMPLETED, None, 0.0
    error: BaseException | None = None
    try:
        handler = handler or resolve.handler_for(job)  # once per job, with the worker
        if announce:
            signals.send(
                signals.attempt_started, Job, job=job, attempt_number=job.attempts, node=worker_node
            )
        value = storable(
            handler.stored_result(run(handler, job, node, adapter, lease_seconds, writes))
        )
    except Snooze as exc:
        outcome, error, snooze = Outcome.SNOOZED, exc, exc.seconds
    except Cancel as exc:
        outcome, error = Outcome.CANCELLED, exc
    except (Discard, PayloadMismatch) as exc:
        outcome, error = Outcome.DISCARDED, exc
    except JobTimeout as exc:
        outcome, error = Outcome.TIMED_OUT, exc
    except UnknownJob as exc:
        # Possibly a rolling deploy: a node with the handler may pick the retry up.
        outcome, error = Outcome.FAILED, exc
    except Interrupted:
        raise  # the worker has already recorded this attempt's outcome
    except BaseException as exc:
        outcome, error = Outcome.FAILED, exc
    elapsed = datetime.timedelta(seconds=time.monotonic() - t0)
    return RunResult(
        job=job,
        outcome=outcome,
        started_at=started_at,
        finished_at=started_at + elapsed,
        value=value,
        error=error,
        snooze_seconds=snooze,
        log_lines=adapter.lines,
        handler=handler,
    )


def run(
    handler: JobHandler[..., Any],
    job: Job,
    node: str,
    adapter: JobLoggerAdapter,
    lease_seconds: float,
    writes: LeaseWrites | None = None,
) -> Any:
    """Bind ``job``'s payload and call the handler, inside the middleware chain if any."""

    def new_context() -> JobContext:
        return JobContext(job=job, logger=adapter, lease_seconds=lease_seconds, _writes=writes)

    chain = middleware.chain()
    if chain is None:  # the fast path: no context unless the handler asks for one
        args, kwargs = handler.call_arguments(job, node=node, job_context=new_context)
        return call_handler(handler, job.timeout, args, kwargs)
    context = new_context()

    def invoke() -> Any:
        args, kwargs = handler.call_arguments(job, node=node, job_context=lambda: context)
        if handler.is_async:
            return _call_async(handler.func, job.timeout, args, kwargs)
        return handler.func(*args, **kwargs)

    context._invoke = invoke
    if handler.is_async:
        return asyncio.run(_through(chain, context))
    result = chain(context)
    if inspect.isawaitable(result):  # an async middleware around a sync handler
        return asyncio.run(_awaited(result))
    return result


async def _through(chain: middleware.Call, context: JobContext) -> Any:
    result = chain(context)
    return (await result) if inspect.isawaitable(result) else result


async def _awaited(result: Any) -> Any:
    return await result


def call_handler(handler: Any, timeout: float | None, args: tuple, kwargs: dict) -> Any:
    if not handler.is_async:
        # Sync timeouts are enforced by the worker, which interrupts this thread.
        return handler.func(*args, **kwargs)
    return asyncio.run(_call_async(handler.func, timeout, args, kwargs))


async def _call_async(func: Any, timeout: float | None, args: tuple, kwargs: dict) -> Any:
    try:
        async with asyncio.timeout(timeout) as scope:
            return await func(*args, **kwargs)
    except TimeoutError:
        if scope.expired():
            raise JobTimeout(f"the job ran longer than its timeout of {timeout:g}s") from None
        raise
