"""Bad input, in-process: it gets a clear error or is handled, and nothing stored changes.

Payloads, handler names, stored payloads that no longer fit, schedule expressions and
timezones, settings, ``manage.py jobs`` / ``schedules`` arguments, admin URL parameters,
and handlers that hit interpreter limits (run by ``durable_jobs.testing.drain``, which
runs the worker's own ``execute`` and ``acks`` code). Real worker threads and
``runworker`` processes are in ``test_bad_input_worker.py``.

Hypothesis examples share the test's transaction: each example either asserts that
nothing was written or deletes what it wrote, and on PostgreSQL a failed statement
would abort the transaction, so the next example's query would fail loudly.
"""

from __future__ import annotations

import datetime
import decimal
import json
import math
import re
from collections.abc import Callable, Iterator
from io import StringIO
from typing import Any, TypeVar

import pytest
from django.conf import settings as django_settings
from django.contrib.auth import get_user_model
from django.core import checks
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test import Client, override_settings
from django.utils import timezone
from hypothesis import given, settings
from hypothesis import strategies as st

from durable_jobs import Snooze, enqueue, job, registry
from durable_jobs.backoff import exponential
from durable_jobs.conf import DEFAULTS, get_settings
from durable_jobs.exceptions import EnqueueError, UnknownJob
from durable_jobs.models import Attempt, Job, Node, Queue, Schedule
from durable_jobs.registry import all_handlers, get_handler
from durable_jobs.schedules.expressions import InvalidSchedule, parse
from durable_jobs.schedules.scheduler import Scheduler
from durable_jobs.testing import drain
from durable_jobs.validate import MAX_DEPTH
from durable_jobs.worker import Worker
from durable_jobs.worker.config import parse_queue_spec
from tests.conftest import command_output
from tests.testapp import jobs

pytestmark = pytest.mark.django_db

#: Hypothesis: bounded, reproducible, and no example database left in the checkout.
QUICK = settings(max_examples=60, deadline=None, database=None)

JOBS_URL = "/admin/durable_jobs/job/"
#: tests.add, typed for ints: some tests pass it other JSON on purpose.
add: Any = jobs.add

T = TypeVar("T")

# -- helpers ------------------------------------------------------------------------------------


def stored_rows() -> dict[str, list[Any]]:
    """Every row this app stores, to compare before and after a refused input."""
    return {
        "jobs": list(Job.objects.order_by("pk").values()),
        "attempts": list(Attempt.objects.order_by("pk").values()),
        "schedules": list(Schedule.objects.order_by("pk").values()),
        "queues": list(Queue.objects.order_by("pk").values()),
    }


def tables_intact() -> bool:
    names = set(connection.introspection.table_names())
    return {"durable_jobs_job", "durable_jobs_attempt", "durable_jobs_schedule"} <= names


@pytest.fixture
def existing() -> dict[str, list[Any]]:
    """Rows that bad input must leave alone: waiting and finished jobs, an attempt, a
    schedule. Returns their snapshot."""
    jobs.add.delay(a=1, b=2)
    add.using(idempotency_key="kept", meta={"note": "é"}).delay(a={"x": [1, 2.5, None]})
    done = jobs.add.delay(a=40, b=2)
    drain()  # the first and third complete, each with an attempt
    assert Job.objects.get(pk=done.pk).result == 42
    Scheduler().schedule("nightly", name="tests.add", expression="0 3 * * *", payload={"a": 1})
    return stored_rows()


def logged_in_admin() -> Client:
    """A superuser's client. Without a password: hashing one costs a third of a second,
    and the admin tests below would spend most of their time on it."""
    user = get_user_model().objects.create(username="admin", is_staff=True, is_superuser=True)
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def admin(db: Any) -> Client:
    return logged_in_admin()


def nest(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


def same_json(a: Any, b: Any) -> bool:
    """Equal with the same JSON types all the way down: 1 is not 1.0, True is not 1.

    Floats compare with ``==``, so -0.0 equals 0.0: PostgreSQL's jsonb drops the sign
    of a zero, the one normalization it applies that keeps the value equal.
    """
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    for kind in (int, float, str):
        if isinstance(a, kind) or isinstance(b, kind):
            return type(a) is type(b) and a == b
    if a is None or b is None:
        return a is b
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(map(same_json, a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    return False


def outcome(action: Callable[[], T], *errors: type[Exception]) -> tuple[T | None, str | None]:
    """``(result, None)``, or ``(None, message)`` if ``action`` raised one of ``errors``:
    for properties where both are fine, each with its own assertions."""
    try:
        return action(), None
    except errors as exc:
        return None, str(exc)


def has_bad_text(text: str) -> bool:
    return "\x00" in text or any(0xD800 <= ord(c) <= 0xDFFF for c in text)


def should_refuse(value: Any) -> bool:
    """An oracle written apart from the package: what cannot come back exactly from JSON
    in every supported database."""
    if value is None or isinstance(value, bool | int):
        return False
    if isinstance(value, float):
        # NaN and inf have no JSON; PostgreSQL returns 1e+16 and up as integers.
        return not math.isfinite(value) or "e+" in repr(value)
    if isinstance(value, str):
        return has_bad_text(value)
    if isinstance(value, list):
        return any(should_refuse(v) for v in value)
    if isinstance(value, dict):
        return any(
            not isinstance(k, str) or has_bad_text(k) or should_refuse(v) for k, v in value.items()
        )
    return True  # sets, bytes, tuples, datetimes, Decimals, objects


#: Text with what databases refuse mixed in: NUL, lone surrogates.
odd_text = st.one_of(
    st.text(alphabet=st.characters(exclude_categories=()), max_size=12),
    st.sampled_from(["\x00", "a\x00b", "\ud800", "caf\udce9", "é", "😀", "' OR '1'='1"]),
)
json_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(allow_nan=True, allow_infinity=True),
    odd_text,
)
other_leaves = st.one_of(
    st.sets(st.integers(), max_size=3),
    st.binary(max_size=4),
    st.tuples(st.integers()),
    st.datetimes(),
    st.decimals(allow_nan=False, allow_infinity=False),
    st.builds(object),
)
payload_values = st.recursive(
    st.one_of(json_leaves, other_leaves),
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.one_of(odd_text, st.integers()), children, max_size=4),
    ),
    max_leaves=12,
)


# -- payloads -------------------------------------------------------------------------------


class Opaque:
    pass


REFUSED_PAYLOADS = [
    # (id, value, the message names the problem, the message names the fix)
    ("10000-levels", nest(10_000), f"nested more than {MAX_DEPTH} levels deep", "pass its id"),
    ("29-levels", nest(MAX_DEPTH + 1), f"nested more than {MAX_DEPTH} levels deep", "pass its id"),
    ("nul", "a\x00b", "NUL character", "base64-encoded"),
    ("nul-in-key", {"k\x00": 1}, "NUL character", "base64-encoded"),
    ("lone-surrogate", "\ud800", "lone surrogate", "errors='replace'"),
    ("set", {1, 2}, "a set", "pass a sorted list"),
    ("bytes", b"raw", "bytes", "pass text (for example base64)"),
    ("datetime", datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC), "a date/time", "isoformat"),
    ("decimal", decimal.Decimal("1.10"), "a Decimal", "pass str(value)"),
    ("object", Opaque(), "a Opaque", "pass ids or plain JSON values"),
    ("tuple-key", {(1, 2): "x"}, "non-string keys", "use string keys"),
    ("tuple", (1, 2), "a tuple", "pass a list"),
    ("nan", math.nan, "NaN or infinite", "pass None or a string"),
    ("inf", -math.inf, "NaN or infinite", "pass None or a string"),
    ("exponent-float", 6.02e23, "gives back as an integer", "pass an int"),
    ("5000-digit-int", 10**5000, "cannot be written as JSON", "large numbers as strings"),
]


@pytest.mark.parametrize(
    ("value", "problem", "fix"),
    [case[1:] for case in REFUSED_PAYLOADS],
    ids=[case[0] for case in REFUSED_PAYLOADS],
)
def test_a_payload_json_cannot_keep_is_refused_naming_problem_and_fix(
    existing: dict[str, Any], value: Any, problem: str, fix: str
) -> None:
    with pytest.raises(EnqueueError) as refused:
        jobs.add.delay(a=value)
    message = str(refused.value)
    assert message.startswith("tests.add: ")
    assert problem in message
    assert fix in message
    assert stored_rows() == existing  # nothing written, nothing altered
    assert jobs.add.delay(a=1).pk  # and the transaction is still usable (PostgreSQL)


@pytest.mark.parametrize(
    ("name", "problem"),
    [("a\x00b", "NUL character"), ("caf\udce9", "lone surrogate")],
    ids=["nul", "surrogate"],
)
def test_an_argument_name_a_database_cannot_store_is_refused(
    existing: dict[str, Any], name: str, problem: str
) -> None:
    with pytest.raises(EnqueueError, match=problem) as refused:
        jobs.any_arguments.delay(**{name: 1})
    assert str(refused.value).startswith("tests.any_arguments: an argument's name is ")
    assert stored_rows() == existing
    assert jobs.any_arguments.delay(fine=1).pk  # the transaction is still usable


def test_an_argument_named_context_is_refused_for_a_handler_that_takes_the_context(
    existing: dict[str, Any],
) -> None:
    with pytest.raises(EnqueueError, match="'context' is the name of the handler's JobContext"):
        jobs.context_and_any.delay(context=1, other=2)
    assert stored_rows() == existing
    assert jobs.context_and_any.delay(other=2).pk
    assert jobs.any_arguments.delay(context=1).pk  # no JobContext there: a plain argument


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"meta": {"at": datetime.date(2026, 1, 1)}}, "meta: argument at is a date/time"),
        ({"meta": {"note": "\x00"}}, "NUL character"),
        ({"meta": "not a dict"}, "meta must be a dict"),
        ({"idempotency_key": "key\x00"}, "idempotency_key cannot be text containing a NUL"),
        ({"queue": "caf\udce9"}, "queue cannot be text with a lone surrogate"),
        ({"max_retries": 2**40}, "max_retries can be at most 2147483647"),
    ],
    ids=["meta-date", "meta-nul", "meta-text", "key-nul", "queue-surrogate", "huge-retries"],
)
def test_bad_enqueue_options_are_refused(
    existing: dict[str, Any], options: dict[str, Any], problem: str
) -> None:
    with pytest.raises(EnqueueError, match=re.escape(problem)):
        jobs.add.using(**options).delay(a=1)
    assert stored_rows() == existing


@QUICK
@given(value=payload_values)
def test_any_payload_round_trips_exactly_or_is_refused(value: Any) -> None:
    before = Job.objects.count()
    job, refused = outcome(lambda: jobs.add.delay(a=value), EnqueueError)
    if refused is not None:
        assert should_refuse(value), f"refused a value JSON keeps: {refused}"
        assert refused.startswith("tests.add: ")
        assert Job.objects.count() == before  # nothing written; the transaction works
        return
    assert job is not None
    assert not should_refuse(value), "accepted a value that cannot come back unchanged"
    assert same_json(Job.objects.get(pk=job.pk).payload, {"a": value})
    job.delete()


def test_big_and_deep_payloads_round_trip_and_can_still_be_shown(admin: Client) -> None:
    big = {
        "text": "é€😀" * 300_000 + "\n\t\\\"'",  # about 2.7 MB of UTF-8
        "int": 2**200,
        "negative": -(2**64) - 1,
        "tiny": 5e-324,
        "float": 9007199254740993.0,
    }
    job = add.delay(a=big)
    assert same_json(Job.objects.get(pk=job.pk).payload, {"a": big})

    # The deepest payload accepted is one every reader can still show.
    deep = add.delay(a=nest(MAX_DEPTH), b={"k": nest(MAX_DEPTH - 1)})
    assert same_json(Job.objects.get(pk=deep.pk).payload["a"], nest(MAX_DEPTH))
    assert admin.get(f"{JOBS_URL}{deep.pk}/change/").status_code == 200
    assert admin.get(JOBS_URL).status_code == 200
    assert f"{deep.pk}" in command_output("jobs", "show", str(deep.pk))
    listed = json.loads(command_output("jobs", "list", "--json"))
    assert {row["id"] for row in listed} == {job.pk, deep.pk}


def test_enqueue_by_name_refuses_what_is_not_keyword_arguments(existing: dict[str, Any]) -> None:
    assert enqueue("tests.add", {"a": 5}).payload == {"a": 5}
    Job.objects.filter(payload={"a": 5}).delete()
    for payload in ("ab", [1, 2], 5, {1: 2}, {"a": 1, 2: 3}):
        with pytest.raises(EnqueueError, match="payload must be a dict of keyword arguments"):
            enqueue("tests.add", payload)  # type: ignore[arg-type]
    with pytest.raises(EnqueueError, match="missing a required argument: 'a'"):
        enqueue("tests.add", {"b": 1})
    with pytest.raises(UnknownJob, match="No job handler is registered under the name"):
        enqueue("tests.nope", {"a": 1})
    assert stored_rows() == existing


# -- handler names ---------------------------------------------------------------------------


@QUICK
@given(name=st.one_of(odd_text, st.text(max_size=300), st.just(""), st.just("x" * 10_000)))
def test_an_unknown_handler_name_is_a_clear_unknown_job(name: str) -> None:
    if name in all_handlers():
        return
    with pytest.raises(UnknownJob) as unknown:
        get_handler(name)
    assert repr(name) in str(unknown.value)
    assert "Decorate the function with @job" in str(unknown.value)  # the fix
    with pytest.raises(UnknownJob):
        enqueue(name, {})
    assert not Job.objects.exists()


@pytest.mark.parametrize("name", [None, 5, ["tests.add"], ("tests", "add"), b"tests.add"])
def test_a_name_that_is_not_text_is_an_unknown_job_too(name: Any) -> None:
    with pytest.raises(UnknownJob, match="No job handler is registered"):
        get_handler(name)


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("x" * 256, "longer than 255 characters"),
        ("billing.\x00send", "NUL character or a lone surrogate"),
        ("caf\udce9.send", "NUL character or a lone surrogate"),
        (5, "not a string"),
    ],
    ids=["too-long", "nul", "surrogate", "number"],
)
def test_a_handler_name_the_job_table_cannot_hold_is_refused_at_import(
    name: Any, problem: str
) -> None:
    def handler() -> None:
        pass

    with pytest.raises(ValueError, match=problem) as refused:
        job(name=name)(handler)
    assert "@job(name='...') with a name of 1-255 characters" in str(refused.value)
    assert name not in all_handlers()


def test_odd_but_storable_handler_names_work_end_to_end() -> None:
    names = ["x" * 255, "émoji 😀 name", "' OR '1'='1", "1; DROP TABLE durable_jobs_job; --"]
    try:
        for name in names:

            def handler(n: int) -> int:
                return n

            handler.__qualname__ = f"odd_{len(name)}_{abs(hash(name))}"  # distinct origins
            registered = job(name=name)(handler)
            assert enqueue(name, {"n": 7}).name == name
            assert registered.delay(n=8).name == name
        assert drain() == {"completed": 2 * len(names)}
        for name in names:
            listed = json.loads(command_output("jobs", "list", f"--name={name}", "--json"))
            assert sorted(row["result"] for row in listed) == [7, 8]
        assert tables_intact()
    finally:
        for name in names:
            registry._handlers.pop(name, None)


@QUICK
@given(name=odd_text)
def test_jobs_list_by_any_name_finds_nothing_or_says_why(name: str) -> None:
    if not Job.objects.exists():
        jobs.add.delay(a=1)  # something that a bad comparison could wrongly match
    # --name=value: argparse reads a separate value that starts with "-" as an option.
    out, refused = outcome(lambda: command_output("jobs", "list", f"--name={name}"), CommandError)
    if refused is not None:
        assert has_bad_text(name)
        assert "NUL character" in refused or "lone surrogate" in refused
        return
    assert out is not None
    assert not has_bad_text(name)
    assert out.strip() == "Nothing to show." or "tests.add" in out  # only a real name matches


# -- stored payloads that no longer fit their handler ----------------------------------------


def test_a_stored_payload_that_no_longer_fits_is_dead_with_the_reason() -> None:
    good = jobs.bad_input_v2.delay(order_id=1, currency="EUR")
    # Rows written by an older version of the code: enqueued, then the signature changed.
    stale = {
        "missing": {"order_id": 2},
        "unexpected": {"order_id": 3, "currency": "EUR", "coupon": "X"},
        "not-an-object": [4, "EUR"],
    }
    stored = {}
    for label, payload in stale.items():
        job = jobs.bad_input_v2.delay(order_id=0, currency="x")
        Job.objects.filter(pk=job.pk).update(payload=payload)
        stored[label] = job.pk
    gone = jobs.add.delay(a=1)
    Job.objects.filter(pk=gone.pk).update(name="tests.removed_handler")
    after = jobs.add.delay(a=2)

    outcomes = drain()

    assert outcomes == {"completed": 2, "discarded": 3, "failed": 1}  # drain went on
    assert Job.objects.get(pk=good.pk).result == "1 EUR"
    assert Job.objects.get(pk=after.pk).result == 2
    for label, pk in stored.items():
        job = Job.objects.get(pk=pk)
        assert job.state == "dead", label  # never run with guessed values
        attempt = Attempt.objects.get(job_id=pk)
        assert attempt.error_class == "durable_jobs.exceptions.PayloadMismatch"
        assert job.last_error == attempt.error_message
    assert (
        "missing a required argument: 'currency'"
        in Job.objects.get(pk=stored["missing"]).last_error
    )
    unexpected = Job.objects.get(pk=stored["unexpected"]).last_error
    assert "no longer fits tests.bad_input.v2(order_id, currency)" in unexpected
    assert "enqueue it again with the new arguments" in unexpected  # the fix
    not_object = Job.objects.get(pk=stored["not-an-object"]).last_error
    assert "is list, not an object of keyword arguments" in not_object
    # A handler that is gone may come back with the next deploy: retried, not dead.
    gone.refresh_from_db()
    assert gone.state == "retrying"
    assert "'tests.removed_handler'" in gone.last_error
    assert "Decorate the function with @job" in gone.last_error


# -- handlers that hit interpreter limits, run by drain ---------------------------------------

RAISED = [
    # (kind, error class, in the recorded message)
    ("memory", "builtins.MemoryError", "MemoryError: simulated: the allocation failed"),
    ("system_exit", "builtins.SystemExit", "SystemExit: 3"),
    ("base_exception", "tests.testapp.jobs._BadInputBoom", "a BaseException that is not"),
    ("unprintable", "tests.testapp.jobs._UnprintableError", "<str() of the exception failed"),
    ("surrogate", "builtins.ValueError", "cannot open caf\\udce9.txt"),
    ("nul", "builtins.ValueError", "bad byte \\x00 in input"),
    ("snooze_forever", "builtins.ValueError", "Snooze(seconds) needs a number of seconds"),
]


@pytest.mark.parametrize(("kind", "error_class", "message"), RAISED, ids=[r[0] for r in RAISED])
def test_drain_records_what_a_handler_raises_and_goes_on(
    kind: str, error_class: str, message: str
) -> None:
    bad = jobs.bad_input_raises.delay(kind=kind)
    good = jobs.add.delay(a=1)
    assert drain() == {"failed": 1, "completed": 1}
    bad.refresh_from_db()
    assert bad.state == "dead"  # max_retries=0; not left leased
    attempt = Attempt.objects.get(job=bad)
    assert (attempt.outcome, attempt.error_class) == ("failed", error_class)
    assert message in attempt.error_message
    assert bad.last_error == attempt.error_message
    assert Job.objects.get(pk=good.pk).state == "completed"


def test_unbounded_recursion_in_a_handler_is_its_failure() -> None:
    bad = jobs.bad_input_recurse.delay()
    good = jobs.add.delay(a=1)
    assert drain() == {"failed": 1, "completed": 1}
    bad.refresh_from_db()
    assert bad.state == "dead"
    attempt = Attempt.objects.get(job=bad)
    assert attempt.error_class == "builtins.RecursionError"
    assert "maximum recursion depth exceeded" in attempt.error_message
    assert Job.objects.get(pk=good.pk).state == "completed"


def test_keyboard_interrupt_in_drain_is_recorded_then_stops_the_drain() -> None:
    # In drain (the calling thread) it may be the developer's Ctrl-C, so it propagates;
    # it is recorded first, as a worker records it, instead of leaving the job leased.
    bad = jobs.bad_input_raises.delay(kind="keyboard_interrupt")
    with pytest.raises(KeyboardInterrupt):
        drain()
    bad.refresh_from_db()
    assert bad.state == "dead"
    assert Attempt.objects.get(job=bad).error_class == "builtins.KeyboardInterrupt"


RETURNED = [
    ("object", "<object object at "),
    ("set", "{1, 2, 3}"),
    ("nan", "nan"),
    ("deep", "<list that could not be shown: RecursionError>"),
    ("surrogate", "{'name': 'caf\\udce9'}"),
    ("nul", "'a\\x00b'"),
    ("big_float", "6.02e+23"),
]


@pytest.mark.parametrize(("kind", "shown"), RETURNED, ids=[r[0] for r in RETURNED])
def test_a_result_json_cannot_keep_completes_the_job_as_text(kind: str, shown: str) -> None:
    job = jobs.bad_input_returns.delay(kind=kind)
    assert drain() == {"completed": 1}  # not a failure: retrying would repeat its work
    job.refresh_from_db()
    assert job.state == "completed"
    assert isinstance(job.result, dict)
    assert set(job.result) == {"repr"}
    assert job.result["repr"].startswith(shown)


def test_a_misbehaving_backoff_cannot_stop_the_decision() -> None:
    failing = jobs.bad_input_failing_backoff.delay()
    endless = jobs.bad_input_endless_backoff.delay()
    before = timezone.now()
    assert drain() == {"failed": 2}
    failing.refresh_from_db()
    endless.refresh_from_db()
    assert (failing.state, endless.state) == ("retrying", "retrying")
    # The broken backoff falls back to the default (15 s base, up to 25 % jitter) ...
    delay = (failing.available_at - before).total_seconds()
    assert 15 <= delay <= 15 * 1.25 + 5
    # ... and an infinite one is capped at a year instead of overflowing.
    year = datetime.timedelta(days=365)
    assert before + year <= endless.available_at <= timezone.now() + year


@pytest.mark.parametrize("seconds", [math.nan, math.inf, -1, 1e20, "soon", None])
def test_snooze_refuses_a_delay_it_could_not_record(seconds: Any) -> None:
    with pytest.raises(ValueError, match=r"Snooze\(seconds\) needs a number of seconds from 0"):
        Snooze(seconds)
    assert Snooze(0).seconds == 0.0
    assert Snooze(365 * 86400).seconds == 365 * 86400.0


# -- schedules: expressions and timezones ------------------------------------------------------

cron_fields = st.one_of(
    st.sampled_from(
        ["*", "*/5", "0", "59", "60", "1-5", "5-1", "1,2,3", "L", "?", "MON", "jan", "-1", "9" * 25]
    ),
    st.text(max_size=4),
)
expressions = st.one_of(
    st.lists(cron_fields, max_size=7).map(" ".join),
    st.sampled_from(
        [
            "@daily",
            "@never",
            "30s",
            "0s",
            "1.5m",
            "99999999999d",
            "9" * 400 + "s",
            "once:2030-01-01T00:00:00+00:00",
            "once:2030-01-01",
            "once:garbage",
            "once:9999-12-31T23:00:00-05:00",
            "0 0 30 2 *",
            "",
            ",".join(str(m) for m in range(60))
            + " "
            + ",".join(str(h) for h in range(24))
            + " * * *",
        ]
    ),
    st.text(max_size=30),
)
zones = st.one_of(
    st.sampled_from(
        [
            "UTC",
            "Europe/Paris",
            "America/New_York",
            "America",
            "../etc/passwd",
            "/etc/passwd",
            "",
            " ",
            "Factory",
            "zone.tab",
            "UTC\x00",
            "a" * 300,
            "Europe/../UTC",
        ]
    ),
    odd_text,
)


@QUICK
@given(expression=expressions, zone=zones)
def test_a_schedule_is_saved_whole_or_refused_with_nothing_stored(
    expression: str, zone: str
) -> None:
    before = list(Schedule.objects.values())
    _, refused = outcome(
        lambda: Scheduler().schedule(
            "hypothesis", name="tests.add", expression=expression, timezone=zone, payload={"a": 1}
        ),
        InvalidSchedule,
    )
    if refused is not None:
        assert refused  # a message, and nothing stored
        assert list(Schedule.objects.values()) == before
        return
    row = Schedule.objects.get(pk="hypothesis")
    assert row.expression == str(parse(expression))
    assert row.timezone == zone
    assert row.next_run_at is not None  # it will run: a schedule that never can is refused
    assert Scheduler().preview("hypothesis", 3)  # and it reads back
    row.delete()


SCHEDULE_ADD = [
    (["--cron", "61 * * * *"], "Invalid cron expression '61 * * * *'"),
    (["--cron", "0 0 30 2 *"], "never occurs"),
    (
        ["--cron", ",".join(map(str, range(60))) + " " + ",".join(map(str, range(24))) + " * * *"],
        "longer than 200 characters",
    ),
    (["--every", "0s"], "longer than zero"),
    (["--every", "99999999999d"], "at most 36500d"),
    (["--every", "9" * 400 + "s"], "at most 36500d"),
    (["--once", "garbage"], "is not an ISO 8601 time"),
    (["--once", "2030-01-01T00:00:00"], "needs an aware datetime"),
    (["--once", "9999-12-31T23:00:00-05:00"], "out of range in UTC"),
    (["--cron", "* * * * *", "--timezone", "America"], "Unknown timezone 'America'"),
    (["--cron", "* * * * *", "--timezone", "UTC\x00"], "Unknown timezone"),
    (["--cron", "* * * * *", "--timezone", "a" * 300], "Unknown timezone"),
    (["--cron", "* * * * *", "--payload", '{"a": "\\u0000"}'], "NUL character"),
    (["--cron", "* * * * *", "--payload", "[" * 100_000], "--payload is not valid JSON"),
    (["--cron", "* * * * *", "--payload", "1" * 5000], "--payload is not valid JSON"),
    (["--cron", "* * * * *", "--payload", "[1]"], "--payload must be a JSON object"),
    (["--cron", "* * * * *", "--job", "tests.nope"], "No job handler is registered"),
    (["--cron", "* * * * *", "--queue", "q\x00"], "queue name cannot be text containing a NUL"),
    (["--cron", "* * * * *", "--catch-up-limit", "99999999999"], "catch_up_limit must be"),
    (["--cron", "* * * * *", "--max-consecutive-fails", "-1"], "max_consecutive_fails must"),
]


@pytest.mark.parametrize(
    ("args", "problem"), SCHEDULE_ADD, ids=[repr(a)[:40] for a, _ in SCHEDULE_ADD]
)
def test_schedules_add_refuses_bad_arguments_and_stores_nothing(
    existing: dict[str, Any], args: list[str], problem: str
) -> None:
    defaults = {"--job": "tests.add", "--payload": '{"a": 1}'}
    for flag, value in defaults.items():
        if flag not in args:
            args = [*args, flag, value]
    with pytest.raises(CommandError) as refused:
        call_command("schedules", "add", "weird", *args, stdout=StringIO())
    assert problem in str(refused.value)
    assert stored_rows() == existing


@pytest.mark.parametrize(
    ("schedule_id", "can_exist"),
    [("\x00", False), ("caf\udce9", False), ("x" * 1000, False), ("' OR '1'='1", True)],
    ids=["nul", "surrogate", "too-long", "sql"],
)
def test_schedule_ids_that_do_not_exist_are_not_found(
    existing: dict[str, Any], schedule_id: str, can_exist: bool
) -> None:
    for action in ("show", "pause", "resume", "run", "remove"):
        with pytest.raises(CommandError, match="No schedule with id"):
            call_command("schedules", action, schedule_id, stdout=StringIO())
    assert stored_rows() == existing
    if not can_exist:
        with pytest.raises(CommandError, match="A schedule id"):
            call_command(
                "schedules", "add", schedule_id, "--cron", "* * * * *", "--job", "tests.add",
                "--payload", '{"a": 1}', stdout=StringIO(),
            )  # fmt: skip
        assert stored_rows() == existing


def test_schedule_payload_and_metadata_must_be_dicts_of_json() -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"payload": "a=1"}, "payload must be a dict"),
        ({"metadata": 5}, "metadata must be a dict"),
        ({"metadata": {"at": datetime.datetime.now(datetime.UTC)}}, "is a date/time"),
        ({"enabled": True, "max_consecutive_fails": 2**40}, "max_consecutive_fails must be"),
    ]
    for options, problem in cases:
        arguments: dict[str, Any] = {"payload": {"a": 1}, **options}
        with pytest.raises(InvalidSchedule, match=problem):
            Scheduler().schedule("s", name="tests.add", expression="* * * * *", **arguments)
    assert not Schedule.objects.exists()


# -- settings --------------------------------------------------------------------------------

BAD_SETTINGS = [
    *[
        ({key: value}, "durable_jobs.E004")
        for key in (
            "LEASE_SECONDS",
            "POLL_INTERVAL",
            "SHUTDOWN_GRACE_SECONDS",
            "BACKOFF_BASE_SECONDS",
            "BACKOFF_MAX_SECONDS",
            "SCHEDULER_INTERVAL",
            "SCHEDULE_MISFIRE_GRACE_SECONDS",
            "PRUNE_AFTER_DAYS",
        )
        for value in (math.nan, math.inf, 1e300, 10**30, "5", True)
    ],
    ({"HEARTBEAT_SECONDS": math.nan}, "durable_jobs.E004"),
    ({"DEFAULT_MAX_RETRIES": 10**30}, "durable_jobs.E004"),
    ({"NOTIFY_CHANNEL": None}, "durable_jobs.E009"),
    ({"NOTIFY_CHANNEL": "x" * 64}, "durable_jobs.E009"),
    ({"NOTIFY_CHANNEL": "jobs\x00"}, "durable_jobs.E009"),
    ({"QUEUES": {"q\x00": {}}}, "durable_jobs.E003"),
    ({"QUEUES": {"default": {"concurrency": math.inf}}}, "durable_jobs.E003"),
    ({"QUEUES": {"default": {"rate": 5}}}, "durable_jobs.E013"),
    ({"QUEUES": {"default": []}}, "durable_jobs.E003"),
    ({"REDACT_KEYS": "password"}, "durable_jobs.E005"),
    ({"SCHEDULES": []}, "durable_jobs.E010"),
    *[
        ({"SCHEDULES": {"s": {"job": "tests.add", **entry}}}, "durable_jobs.E010")
        for entry in (
            {"cron": "* * * * *", "payload": "a=1"},
            {"cron": "* * * * *", "payload": 5},
            {"cron": "* * * * *", "payload": {"a": math.nan}},
            {"cron": "* * * * *", "metadata": "x"},
            {"cron": "* * * * *", "metadata": {"at": datetime.date(2026, 1, 1)}},
            {"cron": "* * * * *", "timezone": "America"},
            {"cron": "* * * * *", "timezone": 5},
            {"cron": "0 0 30 2 *"},
            {"interval": 5},
            {"interval": "99999999999d"},
            {"run_at": 5},
            {"run_at": "9999-12-31T23:00:00-05:00"},
        )
    ],
    ({"SCHEDULES": {"s": {"cron": "* * * * *", "job": ["tests.add"]}}}, "durable_jobs.E011"),
    ({"SCHEDULES": {("t",): {"cron": "* * * * *", "job": "tests.add"}}}, "durable_jobs.E010"),
]


def durable_errors() -> list[str]:
    return [
        m.id
        for m in checks.run_checks()
        if m.id and m.id.startswith("durable_jobs.") and m.level >= checks.ERROR
    ]


@pytest.mark.parametrize(
    ("overrides", "check_id"), BAD_SETTINGS, ids=[repr(o)[:50] for o, _ in BAD_SETTINGS]
)
def test_invalid_settings_are_check_errors_not_exceptions(
    overrides: dict[str, Any], check_id: str
) -> None:
    with override_settings(DURABLE_JOBS={**django_settings.DURABLE_JOBS, **overrides}):
        assert check_id in durable_errors()


anything = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(10**20), max_value=10**20),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=8),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=6,
)
queue_settings = st.dictionaries(
    st.one_of(st.sampled_from(["default", "emails", "a:b", ""]), odd_text),
    st.one_of(
        st.none(),
        anything,
        st.fixed_dictionaries(
            {},
            optional={
                "concurrency": st.one_of(st.integers(-2, 10**12), anything),
                "rate": st.one_of(
                    st.sampled_from(["30/1m", "0/1m", "1/0s", "5/99999999999d"]), anything
                ),
                "global_concurrency": anything,
            },
        ),
    ),
    max_size=3,
)
schedule_settings = st.dictionaries(
    st.one_of(st.text(max_size=8), st.integers()),
    st.one_of(
        anything,
        st.fixed_dictionaries(
            {"job": st.sampled_from(["tests.add", "tests.nope"])},
            optional={
                "cron": st.one_of(expressions, anything),
                "interval": st.one_of(st.sampled_from(["5m", "0s", "9" * 400 + "s"]), anything),
                "payload": st.one_of(st.just({"a": 1}), anything),
                "timezone": st.one_of(zones, anything),
                "metadata": anything,
                "catch_up": anything,
            },
        ),
    ),
    max_size=2,
)
durable_settings = st.fixed_dictionaries(
    {},
    optional={
        **{key: anything for key in DEFAULTS if key not in ("QUEUES", "SCHEDULES")},
        "QUEUES": st.one_of(queue_settings, anything),
        "SCHEDULES": st.one_of(schedule_settings, anything),
        "UNKNOWN_KEY": anything,
    },
)


#: One numeric setting changed from the test settings: most such values pass the checks,
#: so the property below meets the edge values that do (0, huge, tiny), not just errors.
NUMERIC_KEYS = [
    "LEASE_SECONDS",
    "HEARTBEAT_SECONDS",
    "SHUTDOWN_GRACE_SECONDS",
    "POLL_INTERVAL",
    "PRUNE_AFTER_DAYS",
    "DEFAULT_MAX_RETRIES",
    "BACKOFF_BASE_SECONDS",
    "BACKOFF_MAX_SECONDS",
    "SCHEDULER_INTERVAL",
    "SCHEDULE_MISFIRE_GRACE_SECONDS",
]
one_number_changed = st.tuples(
    st.sampled_from(NUMERIC_KEYS),
    st.one_of(
        st.integers(min_value=-1, max_value=10**12),
        st.floats(min_value=-1, allow_infinity=True),
        st.sampled_from([math.nan, 1e-300, 365 * 86400.0, 365 * 86400.0 + 1]),
    ),
).map(lambda change: {**django_settings.DURABLE_JOBS, change[0]: change[1]})


def use_settings() -> None:
    """What workers do with the settings, enough to meet a value they cannot use."""
    loaded = get_settings()
    now = timezone.now()
    for seconds in (
        loaded.lease_seconds,
        loaded.heartbeat_seconds,
        loaded.shutdown_grace_seconds,
        loaded.poll_interval,
        loaded.scheduler_interval,
        loaded.schedule_misfire_grace_seconds,
        *(exponential(attempt) for attempt in (1, 10, 100)),
    ):
        assert now - datetime.timedelta(seconds=seconds) <= now + datetime.timedelta(
            seconds=seconds
        )
    if loaded.prune_after_days is not None:
        assert now - datetime.timedelta(days=loaded.prune_after_days) <= now
    assert parse_queue_spec(None)


@settings(max_examples=80, deadline=None, database=None)
@given(value=st.one_of(durable_settings, one_number_changed, anything))
def test_any_settings_either_fail_the_checks_or_work(value: Any) -> None:
    with override_settings(DURABLE_JOBS=value):
        errors = durable_errors()  # never an exception
        if not errors:
            use_settings()


# -- manage.py jobs arguments ----------------------------------------------------------------

JOBS_CLI = [
    # (arguments, the CommandError's message, or None: it runs and prints this)
    (["show", "9" * 30], "is not an id"),
    (["show", "-1"], "is not an id"),
    (["show", "0"], "is not an id"),
    (["show", "1; DROP TABLE durable_jobs_job; --"], "is not an id"),
    (["show", "999999"], "No job with id 999999"),
    (["why", "9" * 30], "is not an id"),
    (["retry", "9" * 20, "--yes"], "is not an id"),
    (["delete", "-99999999999999999999", "--yes"], "is not an id"),
    (["list", "--limit", "-1"], "is not a number of rows"),
    (["list", "--limit", "9" * 30], "is not a number of rows"),
    (["list", "--since", "garbage"], "is not a duration back from now"),
    (["list", "--since", "99999999999d"], "is not a duration back from now"),
    (["list", "--since", "0001-01-01T00:00:00+14:00"], "is not a duration back from now"),
    (["list", "--since", "2026-01-01T00:00:00"], "give the time's UTC offset"),
    (["list", "--state", "garbage"], "unknown state 'garbage'; states are queued, leased"),
    (["list", "--state", "dead' OR '1'='1"], "unknown state"),
    (["list", "--name", "\x00"], "NUL character"),
    (["list", "--queue", "caf\udce9"], "lone surrogate"),
    (["list", "--batch", "9" * 30], "is not an id"),
    (["errors", "--limit", "-1"], "is not a number of rows"),
    (["errors", "--since", "9999999999d"], "is not a duration back from now"),
    (["batches", "--limit", "9" * 30], "is not a number of rows"),
    (["prune", "--days", "nan"], "is not a number of days from 0 to 36500"),
    (["prune", "--days", "inf"], "is not a number of days"),
    (["prune", "--days", "-1"], "is not a number of days"),
    (["prune", "--days", "1e300"], "is not a number of days"),
    (["pause", "\x00"], "NUL character"),
    (["pause", "x" * 101], "is not a queue name"),
    (["resume", "a,b"], "is not a queue name"),
    (["cancel", "--all", "--name", "\x00", "--yes"], "NUL character"),
    # Injection-looking text is only ever a value compared for equality: no match.
    (["list", "--name", "1; DROP TABLE durable_jobs_job; --"], None),
    (["list", "--name", "' OR '1'='1"], None),
    (["list", "--queue", "default' OR '1'='1"], None),
    (["list", "--name", "x" * 100_000], None),
    (["list", "--limit", str(2**63 - 1), "--name", "tests.nope"], None),
    (["cancel", "--all", "--name", "x' OR '1'='1", "--yes"], "cancel: 0 changed."),
    (["delete", "--all", "--queue", "' OR 1=1 --", "--yes"], "delete: 0 changed."),
]


@pytest.mark.parametrize(("args", "expected"), JOBS_CLI, ids=[repr(a)[:50] for a, _ in JOBS_CLI])
def test_jobs_command_arguments_error_clearly_or_match_nothing(
    existing: dict[str, Any], args: list[str], expected: str | None
) -> None:
    out = StringIO()
    if expected is None or expected.endswith("changed."):
        call_command("jobs", *args, stdout=out, stderr=StringIO())
        assert out.getvalue().strip() == (expected or "Nothing to show.")
    else:
        with pytest.raises(CommandError) as refused:
            call_command("jobs", *args, stdout=out, stderr=StringIO())
        assert expected in str(refused.value)
    assert stored_rows() == existing
    assert tables_intact()


@QUICK
@given(text=st.one_of(odd_text, st.from_regex(r"-?[0-9]{1,25}", fullmatch=True)))
def test_jobs_show_and_since_take_any_text(text: str) -> None:
    for args in (["show", text], ["list", "--since", text], ["list", "--state", text]):

        def run(args: list[str] = args) -> None:
            call_command("jobs", *args, stdout=StringIO(), stderr=StringIO())

        _, refused = outcome(run, CommandError)
        # argparse's message ("Error: argument id: '-x' is not an id", or for text that
        # looks like an option "Error: unrecognized arguments"), or no such job.
        assert refused is None or refused.startswith("Error: ") or "No job with id" in refused
    assert tables_intact()


RUNWORKER = [
    (["--lease-seconds", "inf"], "is not a number of seconds > 0"),
    (["--lease-seconds", "nan"], "is not a number of seconds > 0"),
    (["--poll-interval", "1e300"], "is not a number of seconds > 0"),
    (["--shutdown-grace", "nan"], "is not a number of seconds >= 0"),
    (["--shutdown-grace", "-1"], "is not a number of seconds >= 0"),
    (["--concurrency", "0"], "invalid positive_int value"),
    (["--queues", "default:abc"], "concurrency must be a whole number"),
    (["--queues", "default:0"], "concurrency must be at least 1"),
    (["--queues", ",,,"], "No queues to serve"),
    (["--queues", "default:1:often"], "Invalid rate 'often'"),
    (["--queues", "q\x00"], "NUL character"),
    (["--queues", "x" * 101], "longer than 100 characters"),
]


@pytest.mark.parametrize(("args", "problem"), RUNWORKER, ids=[repr(a)[:40] for a, _ in RUNWORKER])
def test_runworker_refuses_bad_options_before_it_starts(args: list[str], problem: str) -> None:
    with pytest.raises(CommandError, match=re.escape(problem)):
        call_command("runworker", *args, stdout=StringIO(), stderr=StringIO())
    assert not Node.objects.exists()  # no worker registered, so none ran


@pytest.mark.parametrize("option", ["lease_seconds", "heartbeat_seconds", "poll_interval"])
@pytest.mark.parametrize("value", [math.nan, math.inf, 0, 1e300])
def test_a_worker_refuses_timings_it_could_not_use(option: str, value: float) -> None:
    timings: dict[str, Any] = {option: value}
    with pytest.raises(ValueError, match="must be > 0 and at most"):
        Worker("default:1", **timings)


# -- admin URL parameters --------------------------------------------------------------------

ADMIN_URLS = [
    "?q=%00",
    "?q=1%3B+DROP+TABLE+durable_jobs_job%3B+--",
    "?q=%27+OR+%271%27%3D%271",
    "?q=99999999999999999999999",
    "?q=%D9%A1%D9%A2",  # Arabic-Indic digits
    "?q=%C2%B2",  # superscript two: isdigit() but not int()
    "?q=" + "x" * 5000,
    "?state=%00",
    "?state__exact=garbage",
    "?queue=%00",
    "?name=%00",
    "?name=%27+OR+1%3D1",
    "?error=99999999999999999999999",
    "?error=9223372036854775808",  # 2**63: one past the largest id
    "?error=9223372036854775807",
    "?error=" + "9" * 5000,
    "?error=%D9%A1",
    "?error=%00",
    "?created_at__gte=garbage",
    "?created_at__gte=99999-01-01",
    "?created_at__lt=0001-01-01+00%3A00%3A00%2B14%3A00",
    "?nonsense=1",
    "?payload__contains=x",
    "?payload__order_id=1",
    "?name__regex=%28",
    "?id__gt=%00",
    "?o=-1.%00",
    "?p=99999999999999999999",
    "?_to_field=password",
    "99999999999999999999999/change/",
    "%00/change/",
    "1%3B%20DROP/change/",
]


@pytest.mark.parametrize("url", ADMIN_URLS)
def test_admin_job_list_parameters_never_fail(
    existing: dict[str, Any], admin: Client, url: str
) -> None:
    response = admin.get(JOBS_URL + url)
    assert response.status_code in (200, 302, 400), response.status_code
    if response.status_code == 302:  # Django's "bad filter" redirect, or a missing object
        assert response["Location"] in (f"{JOBS_URL}?e=1", "/admin/")
    # Everything the user set up is still there (the admin user's own rows aside).
    assert stored_rows() == existing
    assert tables_intact()


@QUICK
@given(
    parameter=st.sampled_from(["q", "queue", "name", "error", "state", "created_at__gte", "o"]),
    value=st.text(alphabet=st.characters(codec="utf-8"), max_size=30),
)
def test_any_admin_filter_value_answers_without_a_server_error(parameter: str, value: str) -> None:
    # HTTP cannot carry lone surrogates (they are not UTF-8); NUL and the rest it can.
    response = admin_client_for_hypothesis().get(JOBS_URL, {parameter: value})
    assert response.status_code in (200, 302, 400)


_clients: dict[str, Client] = {}


def admin_client_for_hypothesis() -> Client:
    """A logged-in client made once per test (hypothesis refuses function-scoped fixtures
    in @given tests, and examples share the test's transaction)."""
    if "admin" not in _clients:
        _clients["admin"] = logged_in_admin()
    return _clients["admin"]


@pytest.fixture(autouse=True)
def _forget_clients() -> Iterator[None]:
    yield
    _clients.clear()


@pytest.mark.parametrize("timeout", [0, -1, math.nan, math.inf])
def test_a_handler_timeout_must_be_a_finite_positive_number(timeout: float) -> None:
    with pytest.raises(ValueError, match="positive number of seconds"):
        job(timeout=timeout)(lambda: None)


@pytest.mark.parametrize("name", ["", "   "])
def test_an_empty_handler_name_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="non-empty string"):
        job(name=name)(lambda: None)
