"""durable_jobs as the backend of Django's Tasks framework, in-process: configuration and
checks, enqueue and its refusals, reading results back, running through
``durable_jobs.testing.drain()``, the signals, schedules naming a Task, and the Django
Tasks topic guide's examples. Worker processes: tests/test_tasks_worker.py.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import inspect
import json
import math
import pickle
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.core import mail
from django.db import transaction
from django.test import override_settings
from django.utils import timezone

from durable_jobs import Unique
from durable_jobs.backends.compat import (
    FRAMEWORK_LOGGER,
    InvalidTask,
    InvalidTaskBackend,
    Task,
    TaskResultDoesNotExist,
    TaskResultMismatch,
    TaskResultStatus,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)
from durable_jobs.backends.tasks import DurableJobsBackend, DurableTask
from durable_jobs.exceptions import JobTimeout
from durable_jobs.models import Job
from durable_jobs.states import State
from durable_jobs.testing import drain
from tests.conftest import ROOT, command_output
from tests.testapp import jobs, tasks

try:
    from django.tasks import task
except ImportError:
    from django_tasks import task  # type: ignore[no-redef]

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("async_connections_closed")]

BACKEND = "durable_jobs.backends.tasks.DurableJobsBackend"


def job_of(result: Any) -> Job:
    return Job.objects.get(pk=int(result.id))


@contextmanager
def received(*signals: Any) -> Iterator[list[tuple[str, Any, Any]]]:
    """(signal name, status, attempts) of every task signal sent while inside."""
    seen: list[tuple[str, Any, Any]] = []
    names = {task_enqueued: "enqueued", task_started: "started", task_finished: "finished"}
    receivers = []
    for signal in signals:

        def receiver(sender: Any, task_result: Any, _signal: Any = signal, **kw: Any) -> None:
            assert sender is DurableJobsBackend
            seen.append((names[_signal], task_result.status, task_result.attempts))

        signal.connect(receiver)
        receivers.append((signal, receiver))
    try:
        yield seen
    finally:
        for signal, receiver in receivers:
            signal.disconnect(receiver)


# -- configuration and checks ----------------------------------------------------------------


def test_the_backend_supports_everything_and_builds_durable_tasks() -> None:
    backend = task_backends["default"]
    assert isinstance(backend, DurableJobsBackend)
    assert backend.supports_defer
    assert backend.supports_async_task
    assert backend.supports_get_result
    assert backend.supports_priority
    assert isinstance(tasks.add, DurableTask)


def test_constructing_the_backend_imports_no_model() -> None:
    # Before django.setup(), as when a tasks module is imported while the apps load.
    code = (
        "import sys\n"
        "from django.conf import settings\n"
        "settings.configure(INSTALLED_APPS=['durable_jobs'], USE_TZ=True)\n"
        "from durable_jobs.backends.tasks import DurableJobsBackend\n"
        "backend = DurableJobsBackend('default', {'QUEUES': [], 'OPTIONS': {'max_retries': 1}})\n"
        "assert backend.defaults == {'max_retries': 1}\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('durable_jobs.models')\n"
        "    or m == 'django.contrib.contenttypes.models')\n"
        "print('models:', loaded)\n"
    )
    assert run_python(code) == "models: []"


def test_a_process_that_runs_no_task_does_not_import_the_tasks_integration() -> None:
    """Start-up: the finish hook that sends ``task_finished`` is installed when the app is
    ready, and imports the Tasks framework's side of durable_jobs on a task's end only."""
    code = (
        "import sys, django\n"
        "from django.conf import settings\n"
        "settings.configure(INSTALLED_APPS=['durable_jobs'], USE_TZ=True,\n"
        "    DATABASES={'default': {'ENGINE': 'django.db.backends.sqlite3', 'NAME': ':memory:'}})\n"
        "django.setup()\n"
        "from durable_jobs import hooks\n"
        "from durable_jobs.apps import send_task_finished\n"
        "from durable_jobs.models import Job\n"
        "assert send_task_finished in hooks.finish_hooks\n"
        "plain = Job(name='plain')\n"
        "assert plain.task_backend is None\n"
        "send_task_finished(plain, None, None)  # the end of a job that is not a task's\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('durable_jobs.backends'))\n"
        "print('loaded:', loaded)\n"
    )
    assert run_python(code) == "loaded: []"


def run_python(code: str) -> str:
    """What ``code`` prints, run by a fresh interpreter (Django not set up yet)."""
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_check_errors_without_the_app_and_warns_of_undeclared_queues() -> None:
    backend = DurableJobsBackend("reports", {"QUEUES": ["default", "reports", "emails"]})
    messages = backend.check()
    assert [(m.id, "'reports'" in m.msg) for m in messages] == [("durable_jobs.W005", True)]
    assert all(m.level < 40 for m in messages)  # never an Error for queues
    assert DurableJobsBackend("any", {"QUEUES": []}).check() == []
    with override_settings(INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth"]):
        errors = backend.check()
    assert [m.id for m in errors] == ["durable_jobs.E019"]
    assert "durable_jobs" in errors[0].msg


def test_the_system_checks_report_the_alias_warning() -> None:
    tasks_setting = {
        "default": {"BACKEND": BACKEND, "QUEUES": ["default", "nightly"]},
    }
    with override_settings(TASKS=tasks_setting):
        from django.core.checks import run_checks

        ids = [m.id for m in run_checks() if m.id and m.id.startswith("durable_jobs")]
    assert ids.count("durable_jobs.W005") == 1


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ({"retries": 3}, "unknown option(s) 'retries'"),
        ({"max_retries": -1}, "max_retries"),
        ({"timeout": 0}, "timeout must be a positive number"),
        ({"timeout": math.inf}, "timeout must be a positive number"),
        ({"backoff": "fast"}, "backoff"),
        ({"unique": True}, "unknown option(s) 'unique'"),
    ],
)
def test_bad_options_are_refused_naming_the_option(options: dict, needle: str) -> None:
    with pytest.raises(InvalidTaskBackend, match=r"TASKS\['x'\]\['OPTIONS'\]") as caught:
        DurableJobsBackend("x", {"OPTIONS": options})
    assert needle in str(caught.value)


# -- task options ----------------------------------------------------------------------------


def test_task_options_reach_the_job_row_and_survive_using() -> None:
    # dataclasses.replace: Django 6.0's Task fields have no defaults to construct with.
    configured = dataclasses.replace(tasks.add, max_retries=5, timeout=30, backoff=[1, 2])
    assert (configured.max_retries, configured.timeout, configured.backoff) == (5, 30, (1, 2))
    moved = configured.using(priority=3, queue_name="emails")
    assert (moved.max_retries, moved.timeout, moved.priority) == (5, 30, 3)
    job = job_of(moved.enqueue(1, b=2))
    assert (job.max_retries, job.timeout, job.priority, job.queue) == (5, 30.0, 3, "emails")


@pytest.mark.skipif(
    "kwargs" not in inspect.signature(task).parameters,
    reason="@task takes no extra keywords on Django 6.0 (OPTIONS are the way there)",
)
def test_task_decorator_keywords_are_the_options() -> None:
    configured = task(max_retries=5, timeout=30)(tasks.add.func)
    assert isinstance(configured, DurableTask)
    assert job_of(configured.enqueue(1)).max_retries == 5


def test_the_alias_options_are_the_defaults() -> None:
    assert job_of(tasks.add.enqueue(1)).max_retries == 2  # TASKS["default"]["OPTIONS"]
    assert job_of(tasks.add.using(backend="other").enqueue(1)).max_retries == 0


def test_an_unknown_task_keyword_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        task(retries=5)(tasks.add.func)


def test_a_bad_task_option_is_invalid_task() -> None:
    with pytest.raises(InvalidTask, match="timeout must be a positive number"):
        dataclasses.replace(tasks.add, timeout=-1)
    with pytest.raises(InvalidTask, match="max_retries"):
        dataclasses.replace(tasks.add, max_retries=-1)
    with pytest.raises(InvalidTask, match="not a parameter"):
        dataclasses.replace(tasks.add, unique=Unique(fields=["z"]))


@pytest.mark.skipif(
    "__reduce__" not in vars(Task), reason="Tasks pickle from Django 6.1 (Task.__reduce__)"
)
def test_a_task_pickles() -> None:
    configured = dataclasses.replace(
        tasks.add.using(priority=4), max_retries=5, backoff=[1, 2], unique=Unique(fields=["a"])
    )
    copy = pickle.loads(pickle.dumps(configured))
    assert copy == configured
    assert copy.func is tasks.add.func
    assert (copy.max_retries, copy.backoff, copy.unique) == (5, (1, 2), Unique(fields=["a"]))


def test_a_task_with_options_is_hashable() -> None:
    configured = dataclasses.replace(tasks.add, backoff=[1, 2])
    assert hash(configured) == hash(dataclasses.replace(tasks.add, backoff=(1, 2)))


# -- enqueue ---------------------------------------------------------------------------------


def test_enqueue_stores_one_job_and_returns_a_ready_result() -> None:
    run_after = timezone.now() + datetime.timedelta(hours=1)
    result = tasks.send_email.using(run_after=run_after).enqueue("a@example.com", subject="Hi")
    assert result.status == TaskResultStatus.READY
    assert isinstance(result.id, str)
    assert len(result.id) <= 63
    assert result.args == ["a@example.com"]
    assert result.kwargs == {"subject": "Hi"}
    assert result.backend == "default"
    assert result.task.run_after == run_after
    job = job_of(result)
    assert job.name == "tests.testapp.tasks.send_email"
    assert (job.queue, job.priority, job.available_at) == ("emails", 10, run_after)
    assert job.task == {"backend": "default", "run_after": run_after.isoformat()}
    assert job.payload == {"args": ["a@example.com"], "kwargs": {"subject": "Hi"}}
    again = tasks.send_email.get_result(result.id)
    assert again.enqueued_at == result.enqueued_at
    assert (again.task.queue_name, again.task.priority, again.task.run_after) == (
        "emails",
        10,
        run_after,
    )
    assert Job.objects.count() == 1


def test_a_second_alias_keeps_its_name() -> None:
    result = tasks.add.using(backend="other").enqueue(1, 2)
    assert result.backend == "other"
    read = task_backends["other"].get_result(result.id)
    assert read.backend == "other"
    assert read.task.backend == "other"
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result(result.id)


def test_enqueue_in_a_rolled_back_transaction_leaves_nothing() -> None:
    class Rollback(Exception):
        pass

    ids = []

    def enqueue_then_fail() -> None:
        with transaction.atomic():
            ids.append(tasks.add.enqueue(1, 2).id)
            assert Job.objects.filter(pk=int(ids[0])).exists()
            raise Rollback

    with pytest.raises(Rollback):
        enqueue_then_fail()
    (result_id,) = ids
    assert not Job.objects.exists()
    with pytest.raises(TaskResultDoesNotExist):
        tasks.add.get_result(result_id)


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ((datetime.datetime.now(),), TypeError),
        (({1, 2},), TypeError),
        ((object(),), TypeError),
        ((math.nan,), ValueError),
        ((math.inf,), ValueError),
        (("nul\x00text",), ValueError),
        (("lone \udc80 surrogate",), ValueError),
        ((1, 2, 3), TypeError),  # more arguments than add(a, b) takes
    ],
)
def test_arguments_that_cannot_be_stored_are_refused_and_nothing_is_written(
    args: tuple, error: type[Exception]
) -> None:
    with pytest.raises(error):
        tasks.add.enqueue(*args)
    assert not Job.objects.exists()


def local_function() -> None:
    pass


def test_django_own_refusals() -> None:
    def nested() -> None:
        pass

    with pytest.raises(InvalidTask, match="module level"):
        task(nested)
    with pytest.raises(InvalidTask, match="priority"):
        tasks.add.using(priority=101)
    with pytest.raises(InvalidTask, match="aware"):
        tasks.add.using(run_after=datetime.datetime(2030, 1, 1))
    with pytest.raises(InvalidTaskBackend):
        tasks.add.using(backend="missing")
    with pytest.raises(InvalidTask, match="Queue 'emails' is not valid"):
        task(backend="other")(local_function).using(queue_name="emails")
    with pytest.raises(InvalidTask, match="queue name"):
        tasks.add.using(queue_name="a:b")
    assert not Job.objects.exists()


def test_a_unique_task_returns_the_existing_job() -> None:
    unique_add = dataclasses.replace(tasks.add, unique=Unique(fields=["a"]))
    first = unique_add.enqueue(1, b=2)
    second = unique_add.enqueue(a=1, b=3)
    assert first.id == second.id
    assert Job.objects.count() == 1


# -- reading results ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "result_id",
    ["abc", "", " ", "-1", "0", "1.5", "99999999999999999999", "9223372036854775808", "١٢"],
)
def test_ids_that_are_no_result_raise_does_not_exist(result_id: str) -> None:
    with pytest.raises(TaskResultDoesNotExist):
        tasks.add.get_result(result_id)
    with pytest.raises(TaskResultDoesNotExist):
        asyncio.run(task_backends["default"].aget_result(result_id))


@pytest.mark.django_db(transaction=True)
def test_unknown_uuid_and_plain_job_ids_raise_does_not_exist() -> None:
    plain = jobs.add.delay(a=1)
    for result_id in (str(plain.pk), str(uuid.uuid4()), "12345"):
        with pytest.raises(TaskResultDoesNotExist):
            tasks.add.get_result(result_id)
        with pytest.raises(TaskResultDoesNotExist):
            asyncio.run(tasks.add.aget_result(result_id))


def test_the_status_of_every_state() -> None:
    result = tasks.add.enqueue(1, 2)
    expected = {
        State.QUEUED: TaskResultStatus.READY,
        State.RETRYING: TaskResultStatus.READY,
        State.LEASED: TaskResultStatus.RUNNING,
        State.COMPLETED: TaskResultStatus.SUCCESSFUL,
        State.DEAD: TaskResultStatus.FAILED,
        State.CANCELLED: TaskResultStatus.FAILED,
    }
    for state, status in expected.items():
        Job.objects.filter(pk=int(result.id)).update(state=state)
        result.refresh()
        assert result.status == status, state


# -- running, through drain() ------------------------------------------------------------------


def test_results_after_running() -> None:
    added = tasks.add.enqueue(2, b=3)
    paired = tasks.pair.enqueue(1, 2)
    awaited = tasks.async_add.enqueue(4, 5)
    assert drain() == {"completed": 3}
    for result, value in ((added, 5), (paired, [1, 2]), (awaited, 9)):
        result.refresh()
        assert result.status == TaskResultStatus.SUCCESSFUL
        assert result.return_value == value
        assert result.worker_ids == ["test-drain"]
        assert result.attempts == 1
        assert result.enqueued_at <= result.started_at == result.last_attempted_at
        assert result.started_at <= result.finished_at
        assert result.errors == []


def test_a_failing_task_retries_and_fails_with_one_error_per_attempt() -> None:
    result = tasks.always_fails.enqueue()
    drain(with_scheduled=True)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert len(result.errors) == 3 == result.attempts  # max_retries 2 from OPTIONS
    for error in result.errors:
        assert error.exception_class is ValueError
        assert "ValueError: cannot process" in error.traceback
    assert result.finished_at is not None
    with pytest.raises(ValueError, match="Task failed"):
        result.return_value  # noqa: B018


def test_context_sees_the_running_attempt() -> None:
    result = tasks.record.enqueue(label="ctx")
    drain()
    result.refresh()
    assert result.return_value == {
        "attempt": 1,
        "status": "RUNNING",
        "workers": ["test-drain"],
    }


def test_context_attempt_counts_up_across_retries() -> None:
    result = tasks.flaky.enqueue(fail_times=2)
    drain(with_scheduled=True)
    result.refresh()
    assert result.started_at < result.last_attempted_at < result.finished_at
    attempts = job_of(result).attempt_set.order_by("number")
    assert result.started_at == attempts.first().started_at
    assert result.last_attempted_at == attempts.last().started_at
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == "ok"
    assert result.attempts == 3
    assert len(result.errors) == 2
    assert [e.exception_class for e in result.errors] == [RuntimeError, RuntimeError]


@pytest.mark.parametrize(
    ("task_", "error_class", "state"),
    [
        (tasks.discards, "durable_jobs.exceptions.Discard", State.DEAD),
        (tasks.cancels, "durable_jobs.exceptions.Cancel", State.CANCELLED),
    ],
)
def test_discard_and_cancel_fail_the_task_at_once(task_: Any, error_class: str, state: str) -> None:
    result = task_.enqueue()
    drain(with_scheduled=True)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert [e.exception_class_path for e in result.errors] == [error_class]
    assert job_of(result).state == state


def test_a_result_json_cannot_hold_fails_with_type_error() -> None:
    result = tasks.unstorable.using(backend="other").enqueue()
    drain()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class is TypeError


def test_system_exit_fails_the_task_and_the_drain_goes_on() -> None:
    exiting = tasks.exits.using(backend="other").enqueue()
    after = tasks.add.enqueue(1, 1)
    assert drain() == {"failed": 1, "completed": 1}
    errors = task_backends["other"].get_result(exiting.id).errors
    assert errors[0].exception_class is SystemExit
    assert tasks.add.get_result(after.id).return_value == 2


def test_a_timeout_is_a_failed_attempt_whose_traceback_names_it() -> None:
    # An async task: drain() runs in the calling thread, which only asyncio can time out.
    result = tasks.async_sleep.using(backend="strict").enqueue(seconds=5)
    drain()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    (error,) = result.errors
    assert error.exception_class is JobTimeout
    assert "timeout of 1s" in error.traceback


def test_a_lost_lease_is_an_error_whose_class_imports() -> None:
    from durable_jobs.backends.task_results import error_of
    from durable_jobs.models import Attempt, Outcome

    attempt = Attempt(
        number=1, outcome=Outcome.LOST, error_class="durable_jobs.exceptions.LeaseExpired",
        error_message="the lease expired", traceback="",
    )  # fmt: skip
    error = error_of(attempt)
    assert error.exception_class.__name__ == "LeaseExpired"
    assert error.traceback == "durable_jobs.exceptions.LeaseExpired: the lease expired"


def test_a_refresh_inside_a_task_reads_its_own_alias() -> None:
    result = tasks.refreshing.using(backend="other", priority=7).enqueue()
    drain()
    assert task_backends["other"].get_result(result.id).return_value == {
        "backend": "other",
        "task_backend": "other",
        "status": "RUNNING",
    }


@pytest.mark.parametrize("kind", sorted(tasks.UNSTORABLE))
def test_a_return_value_json_cannot_hold_unchanged_fails_with_type_error(kind: str) -> None:
    result = tasks.returns.using(backend="other").enqueue(kind)
    drain()
    errors = task_backends["other"].get_result(result.id).errors
    assert [e.exception_class for e in errors] == [TypeError]
    assert job_of(result).result is None


def test_a_nested_exception_class_reads_as_its_importable_base() -> None:
    from django.core.exceptions import ObjectDoesNotExist

    result = tasks.looks_up.using(backend="other").enqueue(pk=10**9)
    drain()
    (error,) = task_backends["other"].get_result(result.id).errors
    assert error.exception_class is ObjectDoesNotExist
    assert "SideEffect.DoesNotExist" in error.traceback


def test_a_snoozed_attempt_is_not_listed() -> None:
    result = tasks.snoozes_once.enqueue()
    drain(with_scheduled=True)
    drain(with_scheduled=True)
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 1
    assert result.worker_ids == ["test-drain"]
    assert result.errors == []


def test_a_whole_float_priority_is_stored_as_an_integer() -> None:
    assert job_of(tasks.add.using(priority=5.0).enqueue(1)).priority == 5


def test_the_testing_helpers_find_tasks_by_their_keyword_arguments() -> None:
    from durable_jobs.testing import assert_enqueued, refute_enqueued

    result = tasks.add.enqueue(a=1, b=2)
    assert assert_enqueued(tasks.add, a=1).pk == int(result.id)
    refute_enqueued(tasks.add, a=2)


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("name", "task_info", "needle"),
    [
        ("tests.testapp.no_such_module.task", {"backend": "default"}, "No Task can be imported"),
        ("tests.testapp.tasks.UNSTORABLE", {"backend": "default"}, "not a Task"),
        ("tests.testapp.tasks.add", {"backend": "missing"}, "TASKS['missing']"),
    ],
)
def test_a_task_job_this_process_cannot_run_fails_and_the_worker_goes_on(
    name: str, task_info: dict, needle: str
) -> None:
    from durable_jobs.worker import Worker

    broken = Job.objects.create(
        name=name, payload={"args": [1], "kwargs": {}}, task=task_info, max_retries=0
    )
    after = tasks.add.enqueue(2, 3)
    assert Worker({"default": 1}, burst=True).run() == 0
    broken.refresh_from_db()
    assert broken.state == State.DEAD
    (attempt,) = broken.attempt_set.all()
    assert attempt.error_class == "durable_jobs.exceptions.UnknownJob"
    assert needle in attempt.error_message
    assert tasks.add.get_result(after.id).return_value == 5


# -- signals -----------------------------------------------------------------------------------


def test_signals_in_order_and_none_for_a_retried_attempt() -> None:
    with received(task_enqueued, task_started, task_finished) as seen:
        result = tasks.flaky.enqueue(fail_times=1)
        assert seen == [("enqueued", TaskResultStatus.READY, 0)]
        drain(with_scheduled=True)
    assert seen[1:] == [
        ("started", TaskResultStatus.RUNNING, 1),
        ("started", TaskResultStatus.RUNNING, 2),
        ("finished", TaskResultStatus.SUCCESSFUL, 2),
    ]
    assert tasks.flaky.get_result(result.id).status == TaskResultStatus.SUCCESSFUL


def test_task_finished_on_failure_is_sent_with_the_exception_set() -> None:
    exc_infos: list[Any] = []

    def receiver(sender: Any, task_result: Any, **kwargs: Any) -> None:
        exc_infos.append((task_result.status, sys.exc_info()[1]))

    task_finished.connect(receiver)
    try:
        tasks.always_fails.using(backend="other").enqueue()
        drain()
    finally:
        task_finished.disconnect(receiver)
    assert len(exc_infos) == 1
    status, error = exc_infos[0]
    assert status == TaskResultStatus.FAILED
    assert isinstance(error, ValueError)
    assert str(error) == "cannot process"


def test_django_own_receiver_logs_the_failure_with_its_traceback(caplog: Any) -> None:
    # The framework's logger: "django.tasks", or "django_tasks" for the backport.
    caplog.set_level("INFO", logger=FRAMEWORK_LOGGER)
    result = tasks.always_fails.using(backend="other").enqueue()
    drain()
    records = [
        r for r in caplog.records if r.name == FRAMEWORK_LOGGER and result.id in r.getMessage()
    ]
    failed = [r for r in records if r.levelname == "ERROR"]
    assert len(failed) == 1
    assert "FAILED" in failed[0].getMessage()
    assert failed[0].exc_info is not None
    assert failed[0].exc_info[0] is ValueError


def test_a_raising_receiver_is_logged_and_changes_nothing(caplog: Any) -> None:
    def broken(sender: Any, **kwargs: Any) -> None:
        raise RuntimeError("receiver bug")

    for signal in (task_enqueued, task_started, task_finished):
        signal.connect(broken)
    try:
        result = tasks.add.enqueue(1, 2)
        drain()
    finally:
        for signal in (task_enqueued, task_started, task_finished):
            signal.disconnect(broken)
    assert tasks.add.get_result(result.id).return_value == 3
    # Ours, one per signal (Django's send_robust logs each failure too).
    logged = [r.getMessage() for r in caplog.records if "failed for task" in r.getMessage()]
    assert [m.split(" receiver")[0] for m in logged] == [
        "task_enqueued",
        "task_started",
        "task_finished",
    ]


# -- schedules, admin and CLI ------------------------------------------------------------------


def test_a_schedule_can_name_a_task() -> None:
    from durable_jobs import Scheduler
    from durable_jobs.schedules.tick import tick

    Scheduler().schedule(
        "add-every-minute", name="tests.testapp.tasks.add", payload={"a": 1, "b": 2}, interval="1m"
    )
    tick(now=timezone.now() + datetime.timedelta(minutes=2))
    enqueued = list(Job.objects.all())
    assert enqueued
    for job in enqueued:
        assert job.task_backend == "default"
        assert job.payload == {"args": [], "kwargs": {"a": 1, "b": 2}}
    drain()
    for job in enqueued:
        assert tasks.add.get_result(str(job.pk)).return_value == 3


def test_a_schedule_refuses_arguments_the_task_cannot_take() -> None:
    from durable_jobs import Scheduler
    from durable_jobs.schedules.expressions import InvalidSchedule

    for payload in ({"c": 1}, {"a": datetime.datetime.now()}):
        with pytest.raises(InvalidSchedule, match=r"tests\.testapp\.tasks\.add"):
            Scheduler().schedule(
                "bad", name="tests.testapp.tasks.add", payload=payload, interval="1m"
            )
    with pytest.raises(LookupError, match="No job handler is registered"):
        Scheduler().schedule("none", name="tests.testapp.tasks.missing", interval="1m")


def test_schedules_declared_in_settings_may_name_a_task() -> None:
    from durable_jobs.schedules.definitions import check

    declared = {
        "good": {"interval": "1m", "job": "tests.testapp.tasks.add", "payload": {"a": 1}},
        "bad": {"interval": "1m", "job": "tests.testapp.tasks.add", "payload": {"z": 1}},
    }
    with override_settings(DURABLE_JOBS={"SCHEDULES": declared}):
        messages = check()
    assert [(m.id, m.obj) for m in messages] == [("durable_jobs.E010", "SCHEDULES['bad']")]


def test_jobs_show_and_the_admin_name_the_task_and_alias(admin_client: Any) -> None:
    result = tasks.add.using(backend="other").enqueue(1, 2)
    shown = json.loads(command_output("jobs", "show", result.id, "--json"))
    assert shown["task"] == {"path": "tests.testapp.tasks.add", "backend": "other"}
    assert '"backend": "other"' in command_output("jobs", "show", result.id)
    page = admin_client.get(f"/admin/durable_jobs/job/{result.id}/change/")
    assert page.status_code == 200
    assert b"TASKS alias" in page.content
    assert b'<div class="readonly">other</div>' in page.content
    plain = jobs.add.delay(a=1)
    plain_page = admin_client.get(f"/admin/durable_jobs/job/{plain.pk}/change/")
    assert plain_page.status_code == 200
    assert b"TASKS alias" not in plain_page.content
    command_output("jobs", "cancel", result.id, "--yes")
    assert tasks.add.using(backend="other").get_result(result.id).status == "FAILED"


# -- the Django Tasks topic guide, unchanged -----------------------------------------------------


def test_the_topic_guide_email_example() -> None:
    from tests.testapp.guide_tasks import email_users

    result = email_users.enqueue(
        emails=["user@example.com"],
        subject="You have a message",
        message="Hello there!",
    )
    assert result.status == TaskResultStatus.READY
    result_id = result.id
    drain()
    # Later, somewhere else...
    result = email_users.get_result(result_id)
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 1
    assert [m.subject for m in mail.outbox] == ["You have a message"]
    from durable_jobs.backends.compat import task_backends as handlers

    assert handlers["default"].get_result(result_id).return_value == 1


def test_the_topic_guide_context_example(caplog: Any) -> None:
    from tests.testapp.guide_tasks import email_users_with_context

    caplog.set_level("DEBUG", logger="tests.testapp.guide_tasks")
    result = email_users_with_context.enqueue(
        emails=["user@example.com"], subject="You have a message", message="Hello there!"
    )
    drain()
    result.refresh()
    assert result.return_value == 1
    assert f"Attempt 1 to send user email. Task result id: {result.id}." in caplog.messages


def test_get_result_checks_the_task_and_results_compare() -> None:
    paired = tasks.pair.enqueue(1, 2)
    with pytest.raises(TaskResultMismatch, match=r"tests\.testapp\.tasks\.pair"):
        tasks.add.get_result(paired.id)
    assert tasks.pair.get_result(paired.id).task == tasks.pair
    moved = tasks.pair.using(priority=7).enqueue(1, 2)
    assert tasks.pair.get_result(moved.id).task == tasks.pair.using(priority=7)


def test_the_topic_guide_json_round_trip() -> None:
    from tests.testapp.guide_tasks import double_dictionary, process_data

    with pytest.raises(TypeError):
        process_data.enqueue(datetime.datetime.now())
    result = double_dictionary.enqueue((1, 2, 3))
    drain()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert "TypeError: unhashable type: 'list'" in result.errors[0].traceback
    assert result.errors[0].exception_class is TypeError


@pytest.mark.django_db(transaction=True)  # arefresh() reads on another thread's connection
def test_the_topic_guide_results_and_refresh() -> None:
    from tests.testapp.guide_tasks import calculate_meaning_of_life

    result = calculate_meaning_of_life.enqueue()
    with pytest.raises(ValueError, match="Task has not finished yet"):
        result.return_value  # noqa: B018
    drain()
    assert result.status == TaskResultStatus.READY
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 42
    asyncio.run(result.arefresh())
    assert result.is_finished
