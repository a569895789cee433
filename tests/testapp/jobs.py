"""Handlers the test suite enqueues (found by autodiscovery of installed apps' jobs.py)."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from datetime import timedelta
from pathlib import Path

from durable_jobs import Cancel, Discard, JobContext, Snooze, Unique, job
from tests.testapp.models import SideEffect


@job
def noop() -> None:
    pass


@job(name="tests.add")
def add(a: int, b: int = 0) -> int:
    return a + b


@job(takes_context=True, name="tests.record")
def record(context: JobContext, label: str = "") -> None:
    SideEffect.objects.create(job_id=context.job.pk, attempt=context.attempt, label=label)


@job(takes_context=True, name="tests.flaky", max_retries=5)
def flaky(context: JobContext, fail_times: int) -> str:
    if context.attempt <= fail_times:
        try:
            raise KeyError("root cause")
        except KeyError as exc:
            raise RuntimeError(f"failure {context.attempt}") from exc
    return "ok"


@job(takes_context=True, name="tests.fails_once", max_retries=1, backoff=[0])
def fails_once(context: JobContext) -> str:
    if context.attempt == 1:
        raise RuntimeError("the first attempt fails")
    return "second time lucky"


@job(name="tests.always_fails", max_retries=2)
def always_fails() -> None:
    try:
        {}["missing"]
    except KeyError as exc:
        raise ValueError("cannot process") from exc


@job(name="tests.snoozer", takes_context=True)
def snoozer(context: JobContext, seconds: float = 60) -> None:
    raise Snooze(seconds)


@job(name="tests.canceller")
def canceller() -> None:
    raise Cancel("order was refunded")


@job(name="tests.discarder")
def discarder() -> None:
    raise Discard("malformed input")


@job(name="tests.sleepy", takes_context=True, max_retries=3)
def sleepy(context: JobContext, seconds: float, marker_dir: str = "") -> None:
    """Sleeps in small steps, so interruption and timeouts can stop it."""
    if marker_dir:
        Path(marker_dir, f"started-{context.job.pk}-{context.attempt}-{os.getpid()}").touch()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.01)
    SideEffect.objects.create(job_id=context.job.pk, attempt=context.attempt, label="slept")


@job(name="tests.slow_timeout", timeout=0.5, max_retries=0)
def slow_timeout() -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        time.sleep(0.01)


@job(name="tests.async_add")
async def async_add(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a + b


@job(name="tests.async_slow", timeout=0.3, max_retries=0)
async def async_slow() -> None:
    await asyncio.sleep(30)


@job(name="tests.logs", takes_context=True)
def logs(context: JobContext) -> None:
    context.logger.info("hello from %s", "the handler")
    context.logger.warning("careful")
    context.progress(50)


@job(name="tests.fixed_backoff", backoff=[1, 2], max_retries=3)
def fixed_backoff() -> None:
    raise RuntimeError("nope")


@job(name="tests.exits", max_retries=0)
def exits() -> None:
    raise SystemExit(3)


@job(name="tests.bad_log_format", takes_context=True)
def bad_log_format(context: JobContext) -> str:
    context.logger.info("two placeholders %s %s", "one")
    return "still fine"


@job(name="tests.async_context", takes_context=True)
async def async_context(context: JobContext, x: int) -> int:
    context.progress(30)
    assert context.heartbeat()
    return x * 2


@job(name="tests.scheduled_report", takes_context=True)
def scheduled_report(context: JobContext, countries: list[str], window: str = "weekly") -> dict:
    """Returns what it learned, so tests can read it from the job's result."""
    return {
        "schedule_id": context.schedule_id,
        "scheduled_run_at": context.scheduled_run_at.isoformat()
        if context.scheduled_run_at
        else None,
        "run_timestamp": context.run_timestamp.isoformat() if context.run_timestamp else None,
        "idempotency_key": context.idempotency_key,
        "countries": countries,
        "window": window,
    }


@job(name="tests.sync_account")
def sync_account(account: str, api_token: str) -> None:
    """Takes a secret-looking argument, to check it is masked wherever payloads are shown."""


@job(name="tests.nul_result", takes_context=True)
def nul_result(context: JobContext) -> str:
    """Returns and logs text PostgreSQL cannot store (a NUL character)."""
    context.logger.info("nul \x00 inside")
    return "a\x00b"


# -- flow control ------------------------------------------------------------------------


@job(name="tests.webhook", queue="webhooks", takes_context=True)
def webhook(context: JobContext, n: int, seconds: float = 0.0) -> None:
    """Runs on the rate-limited queue the flow tests configure; records its start."""
    SideEffect.objects.create(job_id=context.job.pk, attempt=context.attempt, label=f"start:{n}")
    time.sleep(seconds)


@job(
    name="tests.per_account",
    takes_context=True,
    concurrency_key=lambda account, **_: f"account:{account}",
    concurrency_limit=1,
)
def per_account(context: JobContext, account: int, n: int = 0, seconds: float = 0.05) -> None:
    time.sleep(seconds)


@job(name="tests.global_lock", concurrency_key="global-lock", concurrency_limit=2)
def global_lock(n: int = 0) -> None:
    pass


@job(name="tests.unique_sync", unique=Unique(fields=["account_id"]))
def unique_sync(account_id: int, reason: str = "") -> None:
    pass


@job(
    name="tests.unique_while_queued",
    unique=Unique(states=["queued"]),
)
def unique_while_queued(account_id: int) -> None:
    pass


@job(name="tests.unique_per_minute", unique=Unique(period=timedelta(minutes=1)))
def unique_per_minute(account_id: int) -> None:
    pass


@job(name="tests.batch_item", max_retries=0)
def batch_item(n: int, fail: bool = False, seconds: float = 0.0) -> int:
    time.sleep(seconds)
    if fail:
        raise ValueError(f"item {n} failed on purpose")
    return n


@job(name="tests.batch_done", takes_context=True)
def batch_done(context: JobContext, label: str) -> dict:
    batch = context.batch
    assert batch is not None
    return {"label": label, "id": batch.id, "total": batch.total, "counts": batch.counts}


@job(name="tests.progress_loop", takes_context=True)
def progress_loop(context: JobContext, steps: int = 1000) -> None:
    for i in range(steps):
        context.progress(100 * i / steps)


# Handlers of other test areas live in their own modules; importing them here registers
# them, since only jobs.py is autodiscovered.
from tests.testapp import crash_jobs, partition_jobs, requestable_jobs  # noqa: E402, F401

# -- bad input (tests/test_bad_input*.py) ------------------------------------------------
# Handlers that hit interpreter limits or raise what a worker must survive. Most have
# max_retries=0, so one attempt decides their fate and the tests need no clock tricks;
# the two with a misbehaving backoff have one retry, so that the backoff is asked.


class _BadInputBoom(BaseException):
    """Not an Exception: ``except Exception`` in a worker would not catch it."""


class _UnprintableError(Exception):
    """An error whose message cannot even be formatted."""

    def __str__(self) -> str:
        raise RuntimeError("__str__ failed on purpose")


@job(name="tests.bad_input.recurse", max_retries=0)
def bad_input_recurse(depth: int = 0) -> int:
    """Recurses without bound: the interpreter raises RecursionError."""
    return bad_input_recurse.func(depth + 1) + 1


@job(name="tests.bad_input.raises", max_retries=0)
def bad_input_raises(kind: str) -> None:
    """Raises what ``kind`` names: the errors and exits a handler might hit."""
    if kind == "memory":
        raise MemoryError("simulated: the allocation failed")
    if kind == "system_exit":
        raise SystemExit(3)
    if kind == "keyboard_interrupt":
        raise KeyboardInterrupt
    if kind == "base_exception":
        raise _BadInputBoom("a BaseException that is not an Exception")
    if kind == "unprintable":
        raise _UnprintableError
    if kind == "surrogate":
        # What a file name with undecodable bytes looks like after os.fsdecode().
        raise ValueError("cannot open " + b"caf\xe9.txt".decode("utf-8", "surrogateescape"))
    if kind == "nul":
        raise ValueError("bad byte \x00 in input")
    if kind == "snooze_forever":
        raise Snooze(float("inf"))
    raise ValueError(f"unknown kind {kind!r}")


@job(name="tests.bad_input.returns", max_retries=0)
def bad_input_returns(kind: str) -> object:
    """Returns a value JSON cannot store as it is."""
    if kind == "object":
        return object()
    if kind == "set":
        return {3, 1, 2}
    if kind == "nan":
        return float("nan")
    if kind == "deep":
        value: object = 1
        for _ in range(10_000):
            value = [value]
        return value
    if kind == "surrogate":
        return {"name": b"caf\xe9".decode("utf-8", "surrogateescape")}
    if kind == "nul":
        return "a\x00b"
    if kind == "big_float":
        return 6.02e23  # PostgreSQL's jsonb would give back an int
    return kind


@job(name="tests.bad_input.logs_surrogate", takes_context=True, max_retries=0)
def bad_input_logs_surrogate(context: JobContext) -> str:
    """Logs text no database can store as it is (a lone surrogate), then succeeds."""
    context.logger.info("file %s", b"caf\xe9".decode("utf-8", "surrogateescape"))
    return "done"


@job(name="tests.bad_input.v2", max_retries=0)
def bad_input_v2(order_id: int, currency: str) -> str:
    """Version 2 of a handler: ``currency`` was added without a default after jobs were stored."""
    return f"{order_id} {currency}"


def _failing_backoff(attempt: int) -> float:
    raise ZeroDivisionError("a backoff with a bug")


@job(name="tests.bad_input.failing_backoff", max_retries=1, backoff=_failing_backoff)
def bad_input_failing_backoff() -> None:
    """Fails, so that its broken backoff function is asked for a delay."""
    raise RuntimeError("fails so that the backoff is used")


@job(name="tests.bad_input.endless_backoff", max_retries=1, backoff=lambda attempt: float("inf"))
def bad_input_endless_backoff() -> None:
    """Fails; its backoff asks for an infinite delay."""
    raise RuntimeError("fails so that the backoff is used")


# -- end of bad input ---------------------------------------------------------------------


@job(name="tests.any_arguments")
def any_arguments(**kwargs: object) -> int:
    return len(kwargs)


@job(name="tests.raises_text", max_retries=0)
def raises_text(text: str) -> None:
    """Fails with ``text`` as its message (a client's text, say), and logs it too."""
    logging.getLogger("tests").warning(text)
    raise ValueError(text)


@job(name="tests.context_and_any", takes_context=True)
def context_and_any(context: JobContext, **kwargs: object) -> int:
    return len(kwargs)


# -- the process executor (enqueued on "processes", a queue the tests configure with
# "executor": "process") ----------------------------------------------------------------

#: What a child of the process executor allocated and keeps, so its resident memory stays up.
_kept: list[bytes] = []


def _record_pid(context: JobContext) -> None:
    SideEffect.objects.create(
        job_id=context.job.pk, attempt=context.attempt, label=str(os.getpid())
    )


@job(name="tests.proc.pid", takes_context=True)
def proc_pid(context: JobContext, n: int = 0) -> int:
    """Records the pid of the process that ran it."""
    _record_pid(context)
    return os.getpid()


@job(
    name="tests.proc.hang",
    takes_context=True,
    timeout=1,
    max_retries=1,
    backoff=[0],
)
def proc_hang(context: JobContext, seconds: float = 3600) -> int:
    """Blocks in C (a sleep no exception interrupts) on its first attempt; succeeds after."""
    _record_pid(context)
    if context.attempt == 1:
        time.sleep(seconds)
    return os.getpid()


@job(name="tests.proc.exit", max_retries=0)
def proc_exit(status: int = 3) -> None:
    os._exit(status)


@job(name="tests.proc.allocate", takes_context=True)
def proc_allocate(context: JobContext, megabytes: int = 0) -> int:
    """Keeps ``megabytes`` of touched memory for the rest of its process's life."""
    if megabytes:
        _kept.append(b"x" * (megabytes * 1024 * 1024))
    _record_pid(context)
    return os.getpid()


@job(name="tests.proc.context", takes_context=True)
def proc_context(context: JobContext) -> dict:
    context.progress(0)
    context.progress(40)
    held = context.heartbeat()
    context.logger.info("running in pid %s", os.getpid())
    return {"held": held, "pid": os.getpid(), "attempt": context.attempt}


@job(name="tests.proc.async", takes_context=True)
async def proc_async(context: JobContext, x: int) -> dict:
    await asyncio.sleep(0.01)
    context.logger.info("async in pid %s", os.getpid())
    return {"x": x * 2, "pid": os.getpid(), "loop": type(asyncio.get_running_loop()).__name__}


@job(name="tests.proc.raises", max_retries=0)
def proc_raises() -> None:
    try:
        raise KeyError("inner")
    except KeyError as exc:
        raise ValueError("the handler failed in its child") from exc
