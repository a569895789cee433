"""``@job``: turns a function into a named, durable job handler."""

from __future__ import annotations

import dataclasses
import datetime
import inspect
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, Literal, ParamSpec, TypeVar, overload

from asgiref.sync import sync_to_async

from durable_jobs import payload as payloads
from durable_jobs import registry, validate
from durable_jobs.backoff import Backoff, backoff_from
from durable_jobs.exceptions import EnqueueError
from durable_jobs.flow.unique import Unique, with_defaults

if TYPE_CHECKING:
    from durable_jobs.context import JobContext
    from durable_jobs.models import Job

#: ``@job(concurrency_key=...)``: a fixed key, or a function of the job's arguments.
ConcurrencyKey = str | Callable[..., str | None]

P = ParamSpec("P")
R = TypeVar("R")
#: At most this many sets of keyword names remembered per handler as binding (a handler
#: taking ``**kwargs`` may see any number of them).
BINDING_NAMES_KEPT = 64


@dataclasses.dataclass(frozen=True)
class EnqueueOptions:
    """Per-enqueue options given to :meth:`JobHandler.using`."""

    queue: str | None = None
    priority: int | None = None
    run_at: datetime.datetime | None = None
    run_in: datetime.timedelta | None = None
    idempotency_key: str | None = None
    max_retries: int | None = None
    meta: Mapping[str, Any] | None = None
    #: Makes a ``unique`` handler's key this scope's own: two scopes never share a job.
    #: The HTTP endpoint scopes it by the requesting user.
    unique_scope: str | None = None


#: The options of a plain ``handler.prepare()`` (frozen: one instance serves them all).
NO_OPTIONS = EnqueueOptions()


class JobHandler(Generic[P, R]):
    """A registered job handler. Call it to run in-process; ``.delay()`` to enqueue."""

    def __init__(
        self,
        func: Callable[P, R],
        *,
        name: str | None = None,
        queue: str = "default",
        priority: int = 0,
        max_retries: int | None = None,
        timeout: float | None = None,
        backoff: Backoff | Sequence[float] | None = None,
        takes_context: bool = False,
        unique: Unique | None = None,
        concurrency_key: ConcurrencyKey | None = None,
        concurrency_limit: int = 1,
        requestable: bool = False,
        permission: str | None = None,
        throttle: str | None = None,
        expose_result: bool = False,
    ) -> None:
        self.func = func
        # A name that is not text is refused by the registry, with the others it cannot hold.
        if isinstance(name, str) and not name.strip():
            raise ValueError(
                f"@job(name=...) of {func.__module__}.{func.__qualname__} must be a non-empty "
                "string; leave it out to use the function's dotted path"
            )
        self.name = name or f"{func.__module__}.{func.__qualname__}"
        with validate.refused_as(EnqueueError, self.name):
            self.queue = validate.queue_name(queue)
            self.priority = validate.priority(priority)
            self.max_retries = None if max_retries is None else validate.retries(max_retries)
        # `not 0 < timeout < inf` also refuses NaN, which compares false with everything.
        if timeout is not None and not 0 < timeout < math.inf:
            raise ValueError(
                f"@job(timeout=...) of {self.name} must be a positive number of seconds"
            )
        self.timeout = timeout
        self.backoff = backoff_from(backoff)
        self.takes_context = takes_context
        self.is_async = inspect.iscoroutinefunction(func)
        self.signature = payloads.parameters(func, takes_context=takes_context)
        #: Sets of keyword names known to bind to the signature.
        self._binding_names: set[frozenset[str]] = set()
        if unique is not None and not isinstance(unique, Unique):
            raise ValueError(f"@job(unique=...) of {self.name} takes durable_jobs.Unique(...)")
        if unique is not None:
            unique.check_fields(self.name, self.signature)
        self.unique = unique
        if concurrency_key is not None and not (
            isinstance(concurrency_key, str) or callable(concurrency_key)
        ):
            raise ValueError(
                f"@job(concurrency_key=...) of {self.name} must be a string or a function of "
                'the job\'s arguments, as in lambda order_id, **_: f"order:{order_id}"'
            )
        with validate.refused_as(ValueError, f"@job(concurrency_limit=...) of {self.name}"):
            self.concurrency_limit = validate.count(concurrency_limit, "concurrency_limit")
        self.concurrency_key = concurrency_key
        # The client boundary (durable_jobs.urls). Checked by manage.py check
        # (durable_jobs.E014-E016), and refused at request time if still invalid.
        #: Clients may request this job over HTTP.
        self.requestable = requestable
        #: The Django permission ("app_label.codename") a requesting user must have.
        self.permission = permission
        #: At most this many requests per user in a sliding window, as in "10/1m".
        self.throttle = throttle
        #: A completed job's result is shown to the users who requested it.
        self.expose_result = expose_result
        self.__doc__ = func.__doc__
        self.__name__ = getattr(func, "__name__", self.name)
        self.__qualname__ = getattr(func, "__qualname__", self.name)
        self.__module__ = func.__module__
        self.__wrapped__ = func

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run the function directly, in this process; no job is created."""
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<job {self.name} queue={self.queue}>"

    def using(
        self,
        *,
        queue: str | None = None,
        priority: int | None = None,
        run_at: datetime.datetime | None = None,
        run_in: datetime.timedelta | None = None,
        idempotency_key: str | None = None,
        max_retries: int | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> ConfiguredJob[P, R]:
        """Options for the next enqueue: ``send_receipt.using(run_in=...).delay(order_id=1)``."""
        return ConfiguredJob(
            self,
            EnqueueOptions(queue, priority, run_at, run_in, idempotency_key, max_retries, meta),
        )

    def delay(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        """Enqueue this job with the given keyword arguments; return the ``Job`` row."""
        return ConfiguredJob(self, EnqueueOptions()).delay(*args, **kwargs)

    async def adelay(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        """``delay()`` for async code (views, consumers): the same checks, the same job."""
        return await ConfiguredJob(self, EnqueueOptions()).adelay(*args, **kwargs)

    def prepare(self, *args: P.args, **kwargs: P.kwargs) -> PreparedJob:
        """A checked enqueue that has not happened yet, for ``enqueue_many`` and ``Batch``."""
        return PreparedJob(self, self.check_arguments(args, kwargs), NO_OPTIONS)

    def key_for(self, payload: Mapping[str, Any]) -> str | None:
        """This job's concurrency key for ``payload`` (None when it has none)."""
        spec = self.concurrency_key
        if spec is None:
            return None
        if isinstance(spec, str):
            key: Any = spec
        else:
            try:
                # With defaults filled in, as Unique sees them: the function may rely on
                # every parameter being there.
                key = spec(**with_defaults(self.signature, payload))
            except Exception as exc:
                raise EnqueueError(
                    f"{self.name}: the concurrency_key function failed on {sorted(payload)}: "
                    f"{type(exc).__name__}: {exc}. It is called with the job's keyword "
                    "arguments; accept the ones it does not use with **_"
                ) from exc
        if key is not None:
            try:
                validate.key(key, "the concurrency key", field="concurrency_key")
            except validate.Invalid as exc:
                raise EnqueueError(
                    f"{self.name}: {exc} (or None for no key), not {key!r}"
                ) from None
        return key

    def check_arguments(self, args: tuple, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """Validate a call's arguments and return them as a JSON payload."""
        names = frozenset(kwargs)
        if args or names not in self._binding_names:
            payloads.check_binds(self.name, self.signature, args, kwargs)
            # Binding depends on the names alone: a set of names that bound once always
            # will (a bulk enqueue checks the signature once, not per job).
            if len(self._binding_names) < BINDING_NAMES_KEPT:
                self._binding_names.add(names)
        if self.takes_context and "context" in kwargs:
            # A handler's **kwargs would take it, then every attempt would fail: the
            # worker passes the JobContext under that name.
            raise EnqueueError(
                f"{self.name}: 'context' is the name of the handler's JobContext, which the "
                "worker passes; it cannot also be an argument. Rename the argument."
            )
        return payloads.check_json(self.name, kwargs)

    def named_arguments(self, payload: Mapping[str, Any]) -> Mapping[str, Any]:
        """A stored payload as the handler's parameters by name (what ``unique`` keys on)."""
        return payload

    def task_fields(self, options: EnqueueOptions) -> dict[str, Any] | None:
        """What a job of Django's Tasks framework records in ``Job.task``; None for ``@job``."""
        return None

    def call_arguments(
        self, job: Job, *, node: str, job_context: Callable[[], JobContext]
    ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The positional and keyword arguments of the call that runs ``job``: its stored
        payload (or PayloadMismatch if it no longer fits), after the context if asked for
        (``job_context()`` makes it)."""
        kwargs = payloads.bind_stored(self.name, self.signature, job.payload)
        if not self.takes_context:
            return (), kwargs
        return (job_context(),), kwargs

    def stored_result(self, value: Any) -> Any:
        """The handler's return value as it is stored (``@job``: as returned)."""
        return value


class ConfiguredJob(Generic[P, R]):
    """A handler with enqueue options applied; returned by :meth:`JobHandler.using`."""

    def __init__(self, handler: JobHandler[P, R], options: EnqueueOptions) -> None:
        self.handler = handler
        self.options = options

    def using(self, **changes: Any) -> ConfiguredJob[P, R]:
        return ConfiguredJob(self.handler, dataclasses.replace(self.options, **changes))

    def delay(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        from durable_jobs.enqueueing import enqueue_job

        return enqueue_job(self.handler, self.handler.check_arguments(args, kwargs), self.options)

    async def adelay(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        # Checked here, so that bad arguments fail without a trip to the database thread.
        return await self.prepare(*args, **kwargs).adelay()

    def prepare(self, *args: P.args, **kwargs: P.kwargs) -> PreparedJob:
        return PreparedJob(self.handler, self.handler.check_arguments(args, kwargs), self.options)


@dataclasses.dataclass(frozen=True)
class PreparedJob:
    """Arguments checked and options set, not yet enqueued: ``send_receipt.prepare(order_id=1)``.

    Pass a list of them to :func:`durable_jobs.enqueue_many`, or to a ``Batch``.
    """

    handler: JobHandler[..., Any]
    payload: dict[str, Any]
    options: EnqueueOptions

    def delay(self) -> Job:
        from durable_jobs.enqueueing import enqueue_job

        return enqueue_job(self.handler, self.payload, self.options)

    async def adelay(self) -> Job:
        # The thread that runs the caller's other sync_to_async database work: its
        # connection, and so its transaction, if the caller opened one there.
        return await sync_to_async(self.delay, thread_sensitive=True)()


def enqueue(name: str, payload: Mapping[str, Any] | None = None, **options: Any) -> Job:
    """Enqueue a job by its handler's registered name::

        durable_jobs.enqueue("billing.send_receipt", {"order_id": 42}, run_in=timedelta(minutes=5))

    ``options`` are those of :meth:`JobHandler.using`. Raises :class:`UnknownJob`
    for a name no handler has.
    """
    handler = registry.get_handler(name)
    if payload is not None and not (
        isinstance(payload, Mapping) and all(isinstance(k, str) for k in payload)
    ):
        # Else dict(payload) or **payload would fail with a bare TypeError or ValueError.
        raise EnqueueError(
            f"{handler.name}: the payload must be a dict of keyword arguments with string "
            f'keys, as in enqueue("{handler.name}", {{"order_id": 1}}); '
            f"got {type(payload).__name__}"
        )
    return handler.using(**options).delay(**dict(payload or {}))


async def aenqueue(name: str, payload: Mapping[str, Any] | None = None, **options: Any) -> Job:
    """:func:`enqueue` for async code."""
    return await sync_to_async(enqueue, thread_sensitive=True)(name, payload, **options)


def enqueue_many(jobs: Iterable[PreparedJob], *, using: str | None = None) -> list[Job]:
    """Enqueue many prepared jobs in a few statements and one transaction::

        durable_jobs.enqueue_many([send_receipt.prepare(order_id=i) for i in order_ids])

    Returns the rows in the same order. Where an idempotency key (or ``unique``) is
    already taken, the existing job takes that place. Workers are woken once.
    """
    from durable_jobs.enqueueing import insert_many

    return insert_many(checked_prepared(jobs), using=using)[0]


async def aenqueue_many(jobs: Iterable[PreparedJob], *, using: str | None = None) -> list[Job]:
    """:func:`enqueue_many` for async code."""
    prepared = checked_prepared(jobs)
    return await sync_to_async(enqueue_many, thread_sensitive=True)(prepared, using=using)


def checked_prepared(jobs: Iterable[Any]) -> list[PreparedJob]:
    """``jobs`` as a list, if every one is a :class:`PreparedJob`."""
    prepared = list(jobs)
    for item in prepared:
        if not isinstance(item, PreparedJob):
            raise EnqueueError(
                f"enqueue_many takes prepared jobs, as in send_receipt.prepare(order_id=1); "
                f"got {type(item).__name__}"
            )
    return prepared


@overload
def job(func: Callable[P, R], /) -> JobHandler[P, R]: ...


@overload
def job(
    *,
    name: str | None = None,
    queue: str = "default",
    priority: int = 0,
    max_retries: int | None = None,
    timeout: float | None = None,
    backoff: Backoff | Sequence[float] | None = None,
    unique: Unique | None = None,
    concurrency_key: ConcurrencyKey | None = None,
    concurrency_limit: int = 1,
    requestable: bool = False,
    permission: str | None = None,
    throttle: str | None = None,
    expose_result: bool = False,
    takes_context: Literal[False] = False,
) -> Callable[[Callable[P, R]], JobHandler[P, R]]: ...


@overload
def job(
    *,
    name: str | None = None,
    queue: str = "default",
    priority: int = 0,
    max_retries: int | None = None,
    timeout: float | None = None,
    backoff: Backoff | Sequence[float] | None = None,
    unique: Unique | None = None,
    concurrency_key: ConcurrencyKey | None = None,
    concurrency_limit: int = 1,
    requestable: bool = False,
    permission: str | None = None,
    throttle: str | None = None,
    expose_result: bool = False,
    takes_context: Literal[True],
) -> Callable[[Callable[..., R]], JobHandler[..., R]]:
    # The stored arguments exclude ``context``, which a ParamSpec cannot drop: such
    # handlers' ``delay()`` is checked at run time (argument binding), not by mypy.
    ...


def job(func: Any = None, /, **options: Any) -> Any:
    """Register a function as a durable job handler.

    Usable bare (``@job``) or with options (``@job(queue="emails", max_retries=5)``).
    """

    def decorate(f: Callable[P, R]) -> JobHandler[P, R]:
        handler: JobHandler[P, R] = JobHandler(f, **options)
        registry.register(handler)
        return handler

    return decorate(func) if func is not None else decorate
