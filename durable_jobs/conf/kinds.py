"""What a setting's value may be: one kind per shape of setting, with its check messages
and the typed value it becomes (see the table in :mod:`durable_jobs.conf`)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar

from django.db import connections
from django.utils.module_loading import import_string

from durable_jobs import limits, validate
from durable_jobs.flow.rates import InvalidRate, parse_rate

T = TypeVar("T")


class Problem(NamedTuple):
    """One way a value breaks its rule."""

    message: str
    #: None: the setting's own hint.
    hint: str | None = None
    #: None: the setting's own check id.
    id: str | None = None


@dataclass(frozen=True)
class QueueOptions:
    name: str
    concurrency: int
    global_concurrency: int | None = None
    rate: str | None = None
    #: ``"thread"``: jobs run on the worker's threads; ``"process"``: each in a pooled child.
    executor: str = "thread"
    #: Process executor: a child is replaced after this many jobs (None: never).
    max_jobs_per_child: int | None = None
    #: Process executor: a child whose resident memory passes this many bytes after a job
    #: is replaced (None: never).
    max_memory_per_child: int | None = None


EXECUTORS = ("thread", "process")


class Kind(Generic[T]):
    """A setting's rule: the check messages for a raw value, and its typed value."""

    def problems(self, key: str, value: Any) -> list[Problem]:
        """Each way ``value`` breaks the rule; none when it keeps it."""
        raise NotImplementedError

    def convert(self, value: Any) -> T:
        raise NotImplementedError


class Seconds(Kind[float]):
    def __init__(self, *, zero: bool = False) -> None:
        self.zero = zero

    def problems(self, key: str, value: Any) -> list[Problem]:
        problem = validate.seconds_problem(value, zero=self.zero)
        return [Problem(f"{key} {problem} (got {value!r}).")] if problem else []

    def convert(self, value: Any) -> float:
        return float(value)


class Days(Kind["float | None"]):
    def problems(self, key: str, value: Any) -> list[Problem]:
        # "not <=" also refuses NaN; inf would crash every worker's pruner.
        if value is None or (validate.is_number(value) and 0 < value <= limits.MAX_PRUNE_DAYS):
            return []
        return [
            Problem(
                f"{key} must be a positive number of at most {limits.MAX_PRUNE_DAYS} or None "
                f"(got {value!r})."
            )
        ]

    def convert(self, value: Any) -> float | None:
        return None if value is None else float(value)


class Retries(Kind[int]):
    def problems(self, key: str, value: Any) -> list[Problem]:
        # The column's limit: a larger default would make every enqueue fail.
        if validate.is_retries(value):
            return []
        return [Problem(f"{key} must be {validate.RETRIES_RULE} (got {value!r}).")]

    def convert(self, value: Any) -> int:
        return int(value)


class Bytes(Kind[int]):
    """A size in bytes: a whole number from 1 to ``limit``."""

    def __init__(self, *, limit: int) -> None:
        self.limit = limit

    def problems(self, key: str, value: Any) -> list[Problem]:
        if type(value) is int and 1 <= value <= self.limit:  # not a bool, not "65536"
            return []
        return [
            Problem(
                f"{key} must be a whole number of bytes from 1 to {self.limit} (got {value!r})."
            )
        ]

    def convert(self, value: Any) -> int:
        return int(value)


class Flag(Kind[bool]):
    def problems(self, key: str, value: Any) -> list[Problem]:
        if isinstance(value, bool):
            return []
        return [Problem(f"{key} must be True or False (got {value!r}).")]

    def convert(self, value: Any) -> bool:
        return bool(value)


class ExtraFlag(Flag):
    """A switch whose True needs an optional library (an extra) that imports."""

    def __init__(self, module: str, library: str) -> None:
        self.module = module
        self.library = library

    def problems(self, key: str, value: Any) -> list[Problem]:
        found = super().problems(key, value)
        if found or value is False:
            return found
        try:
            importlib.import_module(self.module)
        except ImportError as exc:
            return [Problem(f"{key} is True, but {self.library} cannot be imported ({exc}).")]
        return []


class OptionalFlag(Kind["bool | None"]):
    """True, False, or None (decided elsewhere, for example by ``settings.DEBUG``)."""

    def problems(self, key: str, value: Any) -> list[Problem]:
        if value is None or isinstance(value, bool):
            return []
        return [Problem(f"{key} must be True, False or None (got {value!r}).")]

    def convert(self, value: Any) -> bool | None:
        return value


class DottedPaths(Kind["tuple[str, ...]"]):
    """A list of dotted paths to importable callables (checked by importing them)."""

    def problems(self, key: str, value: Any) -> list[Problem]:
        if not isinstance(value, list | tuple) or not all(isinstance(p, str) and p for p in value):
            return [Problem(f"{key} must be a list of dotted paths (got {value!r}).")]
        found = []
        for path in value:
            try:
                target = import_string(path)
            except ImportError as exc:
                found.append(Problem(f"{key}: {path!r} cannot be imported: {exc}"))
                continue
            if not callable(target):
                found.append(Problem(f"{key}: {path!r} is not callable."))
        return found

    def convert(self, value: Any) -> tuple[str, ...]:
        return tuple(value)


class Fragments(Kind["tuple[str, ...]"]):
    """Fragments of payload keys, matched case-insensitively."""

    def problems(self, key: str, value: Any) -> list[Problem]:
        if isinstance(value, list | tuple) and all(isinstance(k, str) and k for k in value):
            return []
        return [Problem(f"{key} must be a list of non-empty strings.")]

    def convert(self, value: Any) -> tuple[str, ...]:
        return tuple(k.lower() for k in value)


class Channel(Kind[str]):
    """A PostgreSQL LISTEN/NOTIFY channel: ``pg_notify()`` refuses names over 63 bytes."""

    def problems(self, key: str, value: Any) -> list[Problem]:
        if (
            isinstance(value, str)
            and value
            and len(value.encode("utf-8", "replace")) <= 63
            and not validate.text_problem(value)
        ):
            return []
        return [Problem(f"{key} must be a non-empty string of at most 63 bytes (got {value!r}).")]

    def convert(self, value: Any) -> str:
        return str(value)


class Alias(Kind["str | None"]):
    """None, or a PostgreSQL alias of ``DATABASES``."""

    def problems(self, key: str, value: Any) -> list[Problem]:
        if value is None:
            return []
        if not isinstance(value, str) or value not in connections.settings:
            return [Problem(f"{key} must be None or an alias in DATABASES (got {value!r}).")]
        if connections[value].vendor != "postgresql":
            return [
                Problem(
                    f"{key} {value!r} is not a PostgreSQL database; only PostgreSQL has "
                    "LISTEN/NOTIFY.",
                    hint="Point it at a PostgreSQL alias (the same server as the jobs), or leave "
                    "it None.",
                )
            ]
        return []

    def convert(self, value: Any) -> str | None:
        return value


class Declarations(Kind["Mapping[str, Any]"]):
    """A dict of declarations (each entry is checked by its area: see schedules.check)."""

    def __init__(self, what: str) -> None:
        self.what = what

    def problems(self, key: str, value: Any) -> list[Problem]:
        return [] if isinstance(value, dict) else [Problem(f"{key} must be a dict of {self.what}.")]

    def convert(self, value: Any) -> Mapping[str, Any]:
        return value


class Queues(Kind["dict[str, QueueOptions]"]):
    """Queue name -> options (``concurrency``, ``global_concurrency``, ``rate``)."""

    OPTIONS = (
        "concurrency",
        "global_concurrency",
        "rate",
        "executor",
        "max_jobs_per_child",
        "max_memory_per_child",
    )
    PROCESS_ONLY = ("max_jobs_per_child", "max_memory_per_child")

    def problems(self, key: str, value: Any) -> list[Problem]:
        if not isinstance(value, dict) or not value:
            return [
                Problem(
                    f"{key} must be a non-empty dict of queue name -> options.",
                    hint='For example "QUEUES": {"default": {"concurrency": 10}}.',
                )
            ]
        found = []
        for name, options in value.items():
            if not validate.is_queue_name(name):
                hint = f"Queue names are {validate.queue_name_rule()}."
                found.append(Problem(f"Queue name {name!r} is invalid.", hint=hint))
                continue
            options = {} if options is None else options
            concurrency = options.get("concurrency", 10) if isinstance(options, dict) else None
            if not validate.whole(concurrency) or concurrency < 1:
                found.append(
                    Problem(
                        f"Queue {name!r}: concurrency must be an integer >= 1 (got "
                        f"{concurrency!r}).",
                        hint=f'For example "QUEUES": {{"{name}": {{"concurrency": 10}}}}.',
                    )
                )
                continue
            found += self.limit_problems(name, options)
        return found

    def limit_problems(self, name: str, options: dict[str, Any]) -> list[Problem]:
        found = []
        unknown = sorted(set(options) - set(self.OPTIONS))
        if unknown:
            found.append(
                Problem(
                    f"Queue {name!r}: unknown option(s) {', '.join(map(repr, unknown))}.",
                    hint="Queue options are concurrency (per node), global_concurrency, rate, "
                    "executor, max_jobs_per_child and max_memory_per_child.",
                    id="durable_jobs.E012",
                )
            )
        limit = options.get("global_concurrency")
        if not validate.is_global_concurrency(limit):
            found.append(
                Problem(
                    f"Queue {name!r}: global_concurrency must be an integer >= 1 or None "
                    f"(got {limit!r}).",
                    hint="It caps the leased jobs of the queue across every node.",
                    id="durable_jobs.E012",
                )
            )
        rate = options.get("rate")
        if rate is not None:
            try:
                parse_rate(rate)
            except InvalidRate as exc:
                found.append(
                    Problem(
                        f"Queue {name!r}: {exc}.",
                        hint='For example "rate": "30/1m" (at most 30 starts per sliding minute).',
                        id="durable_jobs.E013",
                    )
                )
        return found + self.executor_problems(name, options)

    def executor_problems(self, name: str, options: dict[str, Any]) -> list[Problem]:
        executor = options.get("executor", "thread")
        if executor not in EXECUTORS:
            return [
                Problem(
                    f"Queue {name!r}: executor must be 'thread' or 'process' (got {executor!r}).",
                    hint="'process' runs each job in a pooled child process, which the worker "
                    "kills at the job's timeout.",
                    id="durable_jobs.E012",
                )
            ]
        found = []
        given = [key for key in self.PROCESS_ONLY if options.get(key) is not None]
        if executor == "thread" and given:
            found.append(
                Problem(
                    f"Queue {name!r}: {' and '.join(given)} only apply to the process executor.",
                    hint=f'Add "executor": "process" to the options of {name!r}, or remove them.',
                    id="durable_jobs.E012",
                )
            )
        most = options.get("max_jobs_per_child")
        if most is not None and (not validate.whole(most) or most < 1):
            found.append(
                Problem(
                    f"Queue {name!r}: max_jobs_per_child must be an integer >= 1 or None "
                    f"(got {most!r}).",
                    hint="A child process is replaced after running that many jobs.",
                    id="durable_jobs.E012",
                )
            )
        memory = options.get("max_memory_per_child")
        if memory is not None:
            try:
                validate.parse_size(memory)
            except ValueError as exc:
                found.append(
                    Problem(
                        f"Queue {name!r}: max_memory_per_child {exc}.",
                        hint='For example "max_memory_per_child": "512MB" (resident memory, '
                        "checked after each job).",
                        id="durable_jobs.E012",
                    )
                )
        return found

    def convert(self, value: Any) -> dict[str, QueueOptions]:
        converted = {}
        for name, options in value.items():
            options = options or {}
            memory = options.get("max_memory_per_child")
            converted[name] = QueueOptions(
                name=name,
                concurrency=int(options.get("concurrency", 10)),
                global_concurrency=options.get("global_concurrency"),
                rate=options.get("rate"),
                executor=options.get("executor", "thread"),
                max_jobs_per_child=options.get("max_jobs_per_child"),
                max_memory_per_child=None if memory is None else validate.parse_size(memory),
            )
        return converted
