"""Handlers that HTTP clients may request (the client boundary tests)."""

from __future__ import annotations

from typing import Literal

from durable_jobs import JobContext, Unique, job


@job(name="tests.http.export", requestable=True, expose_result=True)
def export(
    report: str,
    rows: int = 10,
    columns: list[str] | None = None,
    fmt: Literal["csv", "xlsx"] = "csv",
    ratio: float = 1.0,
    options: dict[str, int] | None = None,
) -> dict:
    """Returns a result with a secret-looking key, to check that it is masked."""
    return {"report": report, "rows": rows, "download_token": "s3cr3t"}


@job(name="tests.http.quiet", requestable=True)
def quiet(note: str = "") -> str:
    """Requestable, but its result is not shown to clients."""
    return f"private result: {note}"


@job(name="tests.http.guarded", requestable=True, permission="testapp.add_order")
def guarded(order: int) -> None:
    pass


@job(name="tests.http.throttled", requestable=True, throttle="2/1m")
def throttled(n: int = 0) -> None:
    pass


@job(name="tests.http.sync", requestable=True, unique=Unique(fields=["account"]))
def sync(account: int, reason: str = "") -> None:
    pass


@job(
    name="tests.http.statement",
    requestable=True,
    unique=Unique(fields=["account"]),
    expose_result=True,
)
def statement(account: int, requested_by: str = "") -> dict:
    """Its result tells whose request ran it: a job shared between users would leak it."""
    return {"account": account, "for": requested_by}


@job(name="tests.http.progress", requestable=True, takes_context=True)
def progress(context: JobContext, steps: int = 2) -> None:
    context.progress(50)


@job(name="tests.http.anything", requestable=True)
def anything(**fields: object) -> None:
    """Takes any keyword arguments."""


#: What a project's code may hold: neither may reach a client through a 400.
SECRET = "hunter2-do-not-echo"


def _failing_region_key(region: str, **_: object) -> str:
    raise KeyError(f"no shard for {region} in {SECRET}")


@job(name="tests.http.regional", requestable=True, concurrency_key=_failing_region_key)
def regional(region: str) -> None:
    pass


@job(name="tests.http.positional", requestable=True)
def positional(target: str, /, dsn: str = f"postgres://app:{SECRET}@db/app") -> None:
    pass
