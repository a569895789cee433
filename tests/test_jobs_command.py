"""``manage.py jobs``: reads with --json, writes through the state machine, guarded bulk acts.

The in-process tests call the command as ``call_command`` does; the terminal tests run
``python -m django jobs`` in a subprocess on the test database, its standard streams on
a real pseudo-terminal (or on pipes), to see what a person (or a script) sees.
"""

from __future__ import annotations

import datetime
import io
import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.core.management import CommandError
from django.utils import timezone

from durable_jobs import Batch, enqueue_many
from durable_jobs.flow import queues
from durable_jobs.models import Attempt, Job, Node, Queue
from durable_jobs.states import State
from durable_jobs.testing import drain
from tests.conftest import ROOT, WorkerProcesses, command_output
from tests.test_admin import one_job_per_state
from tests.testapp import jobs

pytestmark = pytest.mark.django_db

STATES = ["queued", "leased", "completed", "retrying", "dead", "cancelled"]
#: The keys docs/reference/commands.rst lists for ``list --json``.
LIST_KEYS = {
    "id", "name", "queue", "state", "priority", "attempts", "max_retries", "payload",
    "idempotency_key", "created_at", "available_at", "attempted_at", "finished_at",
    "lease_expires_at", "node", "progress", "batch_id", "concurrency_key", "unique_in",
    "result", "last_error", "meta", "task",
}  # fmt: skip
ATTEMPT_KEYS = {
    "number", "outcome", "node", "started_at", "finished_at", "duration_ms", "error_class",
    "error_message", "traceback", "log",
}  # fmt: skip
OVERVIEW_KEYS = {
    "generated_at", "queues", "finished_windows", "throughput", "failure_rate", "nodes", "errors",
    "history",
}  # fmt: skip
QUEUE_KEYS = {
    "name", "paused", "paused_at", "rate", "global_concurrency", "waiting", "leased",
    "live_nodes",
}  # fmt: skip
BATCH_KEYS = {
    "id", "name", "status", "total", "done", "counts", "callback", "callback_job_id",
    "created_at", "finished_at",
}  # fmt: skip
ERROR_KEYS = {
    "error_class", "root_cause", "message", "count", "last_seen", "example_attempt",
    "example_job",
}  # fmt: skip


def run(*args: str) -> str:
    return command_output("jobs", *args)


def run_json(*args: str):
    return json.loads(run(*args, "--json"))


def parse_table(text: str, headers: list[str]) -> list[dict[str, str]]:
    """The rows of an aligned table, cut at the header's column offsets.

    Fails unless every column starts at the same offset on every row: two spaces
    before it, and its text (when it has any) right at the offset.
    """
    lines = text.splitlines()
    assert lines[0].split() == " ".join(headers).split(), lines[0]
    starts = [lines[0].index(h) for h in headers]
    rows = []
    for line in lines[1:]:
        if not line.strip():
            break  # what follows the table
        cells = []
        for i, start in enumerate(starts):
            end = starts[i + 1] if i + 1 < len(starts) else None
            cell = line[start:end].strip()
            if i and len(line) > start:
                assert line[start - 2 : start] == "  ", (headers[i], line)
            assert not cell or line[start] != " ", (headers[i], line)
            cells.append(cell)
        rows.append(dict(zip(headers, cells, strict=True)))
    return rows


def states() -> dict[int, str]:
    return dict(Job.objects.values_list("pk", "state"))


# -- reads -------------------------------------------------------------------------------------


def test_stats_prints_the_overview_as_json_and_as_an_aligned_table() -> None:
    by_state = one_job_per_state()
    queues.pause("webhooks")
    Node.objects.create(
        name="node-gone", pid=9, last_heartbeat_at=timezone.now() - datetime.timedelta(hours=2)
    )

    stats = run_json("stats")

    assert set(stats) == OVERVIEW_KEYS
    assert datetime.datetime.fromisoformat(stats["generated_at"]) <= timezone.now()
    rows = {row["name"]: row for row in stats["queues"]}
    assert list(rows) == ["default", "emails", "webhooks"]
    for row in rows.values():
        assert set(row) == {"name", "paused", *STATES, "capped", "lag_seconds"}
    assert {s: rows["default"][s] for s in STATES} == {
        "queued": 1, "leased": 0, "completed": 1, "retrying": 1, "dead": 1, "cancelled": 1
    }  # fmt: skip
    assert {s: rows["emails"][s] for s in STATES} == dict.fromkeys(STATES, 0) | {"leased": 1}
    assert rows["default"]["capped"] == []
    assert rows["default"]["lag_seconds"] >= 0  # the queued job is available now
    assert rows["emails"]["lag_seconds"] is None
    assert [r["paused"] for r in rows.values()] == [False, False, True]
    assert set(stats["finished_windows"]) == {"completed", "dead", "cancelled"}
    assert not stats["finished_windows"]["dead"]["capped"]
    assert stats["throughput"]["total"] == 1
    assert len(stats["throughput"]["per_minute"]) == 60
    # always_fails failed once; the discarded job's attempt counts as a failure too.
    failures = stats["failure_rate"]
    assert (failures["failed"], failures["completed"]) == (2, 1)
    assert failures["rate"] == pytest.approx(2 / 3, abs=1e-4)
    assert [n["name"] for n in stats["nodes"]["live"]] == ["node-1"]
    assert stats["nodes"]["live"][0]["running"] == 1
    assert [n["name"] for n in stats["nodes"]["stale"]] == ["node-gone"]
    assert set(stats["errors"]) == {"since", "capped", "groups"}
    groups = [(g["error_class"], g["count"], g["example_job"]) for g in stats["errors"]["groups"]]
    assert groups == [  # newest first
        ("durable_jobs.exceptions.Discard", 1, by_state["dead"]),
        ("builtins.ValueError", 1, by_state["retrying"]),
    ]

    text = run("stats")
    headers = ["QUEUE", "STATUS", *(s.upper() for s in STATES), "LAG"]
    table = {row["QUEUE"]: row for row in parse_table(text, headers)}
    assert list(table) == ["default", "emails", "webhooks"]
    assert table["default"] | {"LAG": ""} == {
        "QUEUE": "default", "STATUS": "running", "QUEUED": "1", "LEASED": "0",
        "COMPLETED": "1", "RETRYING": "1", "DEAD": "1", "CANCELLED": "1", "LAG": "",
    }  # fmt: skip
    assert table["default"]["LAG"].endswith("s")
    assert (table["emails"]["LEASED"], table["emails"]["LAG"]) == ("1", "-")
    assert table["webhooks"]["STATUS"] == "paused"
    assert "Last hour: 1 completed (peak 1/min), 2 failed attempts, failure rate 66.7%." in text
    assert "Nodes: 1 live, 1 stale.\n\nAttempts per handler, last 24 hours:" in text
    history = text.split("Attempts per handler, last 24 hours:\n")[1]
    handlers = parse_table(history, ["HANDLER", "ATTEMPTS", "FAILED", "P50", "P95"])
    assert {(h["HANDLER"], h["ATTEMPTS"], h["FAILED"]) for h in handlers} == {
        ("tests.add", "1", "0"),
        ("tests.always_fails", "1", "1"),
        ("tests.canceller", "1", "0"),
        ("tests.discarder", "1", "1"),  # discarded: a failure, as in the failure rate
    }
    assert all(h["P50"].endswith("ms") and h["P95"].endswith("ms") for h in handlers)


def test_list_filters_and_prints_documented_json_and_an_aligned_table() -> None:
    now = timezone.now()
    old = jobs.noop.delay()
    Job.objects.filter(pk=old.pk).update(created_at=now - datetime.timedelta(days=10))
    hook = jobs.add.using(queue="webhooks").delay(a=1)
    failing = jobs.always_fails.delay()
    drain()
    batch = Batch("import").enqueue([jobs.batch_item.prepare(n=1), jobs.batch_item.prepare(n=2)])
    in_batch = sorted(batch.jobs.values_list("pk", flat=True))
    newest = jobs.add.delay(a=2)
    everything = sorted(states(), reverse=True)

    listing = run_json("list")
    assert [j["id"] for j in listing] == everything  # newest first
    for job in listing:
        assert set(job) == LIST_KEYS
    by_id = {j["id"]: j for j in listing}
    assert by_id[failing.pk]["state"] == "retrying"
    assert by_id[failing.pk]["last_error"].startswith("ValueError: cannot process")
    assert by_id[hook.pk]["result"] == 1
    assert by_id[in_batch[0]]["batch_id"] == batch.pk
    assert by_id[newest.pk]["payload"] == {"a": 2}

    def ids(*args: str) -> list[int]:
        return [j["id"] for j in run_json("list", *args)]

    assert ids("--state", "retrying") == [failing.pk]
    assert ids("--state", "retrying", "--state", "completed") == sorted(
        [failing.pk, hook.pk, old.pk], reverse=True
    )
    assert ids("--queue", "webhooks") == [hook.pk]
    assert ids("--name", "tests.add") == [newest.pk, hook.pk]
    assert ids("--batch", str(batch.pk)) == in_batch[::-1]
    assert ids("--since", "1d") == [pk for pk in everything if pk != old.pk]
    assert ids("--since", (now - datetime.timedelta(days=11)).isoformat()) == everything
    assert ids("--since", "30d", "--name", jobs.noop.name) == [old.pk]
    assert ids("--limit", "2") == everything[:2]
    assert ids("--limit", "0") == []
    for bad in (["--since", "2020-01-01T00:00:00"], ["--since", "yesterday"], ["--state", "x"]):
        with pytest.raises(CommandError):
            run("list", *bad)  # a naive time, no duration, no state

    # No subcommand: the list, as a table.
    headers = ["ID", "NAME", "QUEUE", "STATE", "ATTEMPTS", "CREATED (UTC)", "LAST ERROR"]
    rows = parse_table(run(), headers)
    assert [int(r["ID"]) for r in rows] == everything
    row = next(r for r in rows if r["ID"] == str(failing.pk))
    assert row == {
        "ID": str(failing.pk), "NAME": "tests.always_fails", "QUEUE": "default",
        "STATE": "retrying", "ATTEMPTS": "1/3",
        "CREATED (UTC)": f"{failing.created_at:%Y-%m-%d %H:%M:%S}",
        "LAST ERROR": "ValueError: cannot process",
    }  # fmt: skip
    assert run("list", "--queue", "nowhere").strip() == "Nothing to show."


def test_show_and_list_mask_secret_payload_keys() -> None:
    synced = jobs.sync_account.delay(account="acme", api_token="s3cr3t-token")
    (nested,) = Job.objects.bulk_create(
        [
            Job(
                name=jobs.noop.name,
                payload={"password": "hunter2", "nested": [{"api_token": "deep-secret"}], "n": 7},
            )
        ]
    )
    secrets = ("s3cr3t-token", "hunter2", "deep-secret")

    shown = run_json("show", str(synced.pk))
    assert shown["payload"] == {"account": "acme", "api_token": "********"}
    shown = run_json("show", str(nested.pk))
    assert shown["payload"] == {
        "password": "********",
        "nested": [{"api_token": "********"}],
        "n": 7,
    }
    outputs = [
        run("show", str(synced.pk)),
        run("show", str(synced.pk), "--json"),
        run("show", str(nested.pk)),
        run("show", str(nested.pk), "--json"),
        run("list", "--json"),
        run("list"),
    ]
    for output in outputs:
        for secret in secrets:
            assert secret not in output
    assert '"api_token": "********"' in outputs[0]
    assert '"password": "********"' in outputs[2]
    listed = {j["id"]: j["payload"] for j in json.loads(outputs[4])}
    assert listed[synced.pk]["api_token"] == listed[nested.pk]["password"] == "********"


def test_show_prints_every_field_aligned_and_every_attempt() -> None:
    job = jobs.flaky.using(idempotency_key="flaky-1").delay(fail_times=1)
    drain(with_scheduled=True)

    shown = run_json("show", str(job.pk))
    assert set(shown) == LIST_KEYS | {"attempts_detail"}
    assert (shown["state"], shown["result"], shown["idempotency_key"]) == (
        "completed", "ok", "flaky-1"
    )  # fmt: skip
    assert [a["outcome"] for a in shown["attempts_detail"]] == ["failed", "completed"]
    for attempt in shown["attempts_detail"]:
        assert set(attempt) == ATTEMPT_KEYS
    first = shown["attempts_detail"][0]
    assert (first["number"], first["error_class"]) == (1, "builtins.RuntimeError")
    assert "KeyError: 'root cause'" in first["error_message"]

    text = run("show", str(job.pk))
    head, *attempts = text.split("\nattempt ")
    lines = head.splitlines()
    assert [line.split()[0] for line in lines] == list(LIST_KEYS_IN_ORDER)
    width = max(len(k) for k in LIST_KEYS_IN_ORDER)
    for line in lines:
        assert line[width : width + 2] == "  ", line
        assert len(line) == width + 2 or line[width + 2] != " ", line
    assert f"{'state'.ljust(width)}  completed" in lines
    assert f"{'payload'.ljust(width)}  {json.dumps({'fail_times': 1})}" in lines
    assert attempts[0].startswith("1: failed on test-drain at ")
    assert "RuntimeError: failure 1" in attempts[0]
    assert "Traceback (most recent call last)" in attempts[0]
    assert attempts[1].startswith("2: completed on test-drain at ")
    with pytest.raises(CommandError, match="No job with id 999999"):
        run("show", "999999")


#: ``show``'s field order: job_to_dict's.
LIST_KEYS_IN_ORDER = (
    "id", "name", "queue", "state", "priority", "attempts", "max_retries", "payload",
    "idempotency_key", "created_at", "available_at", "attempted_at", "finished_at",
    "lease_expires_at", "node", "progress", "batch_id", "concurrency_key", "unique_in",
    "result", "last_error", "meta", "task",
)  # fmt: skip


def test_errors_groups_failures_by_error() -> None:
    failing = [jobs.always_fails.delay().pk for _ in range(2)]
    flaky = jobs.flaky.delay(fail_times=1)
    drain(with_scheduled=True)
    assert set(Job.objects.filter(pk__in=failing).values_list("state", flat=True)) == {"dead"}

    found = run_json("errors")
    assert set(found) == {"since", "capped", "groups"}
    assert found["capped"] is False
    groups = found["groups"]  # newest first: always_fails ran its retries last
    assert [g["error_class"] for g in groups] == ["builtins.ValueError", "builtins.RuntimeError"]
    for group in groups:
        assert set(group) == ERROR_KEYS
    value_error, runtime_error = groups
    assert value_error["count"] == 6  # 2 jobs x 3 attempts
    assert value_error["root_cause"] == "KeyError: 'missing'"
    assert value_error["message"] == "ValueError: cannot process"
    # The example job is the job of the example attempt (the group's newest).
    assert value_error["example_job"] in failing
    assert (
        Attempt.objects.get(pk=value_error["example_attempt"]).job_id == value_error["example_job"]
    )
    assert (runtime_error["count"], runtime_error["example_job"]) == (1, flaky.pk)
    assert runtime_error["message"] == "RuntimeError: failure 1"
    assert runtime_error["root_cause"] == "KeyError: 'root cause'"
    limited = run_json("errors", "--limit", "1")["groups"]
    assert [g["error_class"] for g in limited] == ["builtins.ValueError"]

    headers = ["COUNT", "LAST SEEN", "ERROR", "ROOT CAUSE", "EXAMPLE JOB"]
    assert parse_table(run("errors"), headers) == [
        {"COUNT": "6", "LAST SEEN": value_error["last_seen"][:19],
         "ERROR": "builtins.ValueError", "ROOT CAUSE": "KeyError: 'missing'",
         "EXAMPLE JOB": str(value_error["example_job"])},
        {"COUNT": "1", "LAST SEEN": runtime_error["last_seen"][:19],
         "ERROR": "builtins.RuntimeError", "ROOT CAUSE": "KeyError: 'root cause'",
         "EXAMPLE JOB": str(flaky.pk)},
    ]  # fmt: skip

    # Older failures are left out unless --since reaches them.
    Attempt.objects.filter(job_id__in=failing).update(
        finished_at=timezone.now() - datetime.timedelta(days=3)
    )
    assert [g["error_class"] for g in run_json("errors")["groups"]] == ["builtins.RuntimeError"]
    assert [g["error_class"] for g in run_json("errors", "--since", "2h")["groups"]] == [
        "builtins.RuntimeError"
    ]
    assert len(run_json("errors", "--since", "4d")["groups"]) == 2
    Attempt.objects.all().delete()
    assert run("errors").strip() == "Nothing to show."


def test_why_explains_a_waiting_job_and_a_finished_one() -> None:
    queues.pause("webhooks")
    waiting = jobs.noop.using(queue="webhooks").delay()
    done = jobs.add.delay(a=1)
    drain()

    why = run_json("why", str(waiting.pk))
    assert set(why) == {"id", "state", "reasons"}
    assert (why["id"], why["state"]) == (waiting.pk, "queued")
    assert [r["code"] for r in why["reasons"]] == ["queue_paused", "no_live_node"]
    for reason in why["reasons"]:
        assert set(reason) == {"code", "message", "detail"}
    assert why["reasons"][0]["detail"] == {"queue": "webhooks"}

    lines = run("why", str(waiting.pk)).splitlines()
    assert lines[0] == f"Job {waiting.pk} ({jobs.noop.name}, queue webhooks, queued):"
    assert lines[1].startswith("- Queue 'webhooks' is paused since ")
    assert lines[1].endswith("Resume it with `manage.py jobs resume webhooks`.")
    assert lines[2].startswith("- No live worker serves queue 'webhooks'.")

    assert [r["code"] for r in run_json("why", str(done.pk))["reasons"]] == ["finished"]
    assert "It completed; it will not run again." in run("why", str(done.pk))
    with pytest.raises(CommandError, match="No job with id 999999"):
        run("why", "999999")


def test_queues_lists_every_queue_with_limits_and_counts() -> None:
    one_job_per_state()
    queues.set_limits("webhooks", rate="30/1m", global_concurrency=5)
    queues.pause("webhooks")

    data = run_json("queues")
    assert [q["name"] for q in data] == ["default", "emails", "webhooks"]
    for queue in data:
        assert set(queue) == QUEUE_KEYS
    default, emails, webhooks = data
    assert (default["waiting"], default["leased"], default["live_nodes"]) == (2, 0, 0)
    assert (emails["waiting"], emails["leased"], emails["live_nodes"]) == (0, 1, 1)
    assert (default["paused"], default["paused_at"], default["rate"]) == (False, None, "")
    assert default["global_concurrency"] is None
    assert (webhooks["paused"], webhooks["rate"], webhooks["global_concurrency"]) == (
        True, "30/1m", 5
    )  # fmt: skip
    assert datetime.datetime.fromisoformat(webhooks["paused_at"]) <= timezone.now()

    headers = ["QUEUE", "STATUS", "RATE", "GLOBAL CONCURRENCY", "WAITING", "LEASED", "NODES"]
    assert parse_table(run("queues"), headers) == [
        {"QUEUE": "default", "STATUS": "running", "RATE": "-", "GLOBAL CONCURRENCY": "-",
         "WAITING": "2", "LEASED": "0", "NODES": "0"},
        {"QUEUE": "emails", "STATUS": "running", "RATE": "-", "GLOBAL CONCURRENCY": "-",
         "WAITING": "0", "LEASED": "1", "NODES": "1"},
        {"QUEUE": "webhooks", "STATUS": "paused", "RATE": "30/1m", "GLOBAL CONCURRENCY": "5",
         "WAITING": "0", "LEASED": "0", "NODES": "0"},
    ]  # fmt: skip


def test_batches_with_progress_open_filter_and_limit() -> None:
    finished = Batch("import", on_complete=jobs.batch_done.prepare(label="x")).enqueue(
        [jobs.batch_item.prepare(n=1), jobs.batch_item.prepare(n=2, fail=True)]
    )
    drain()
    opened = Batch("export").enqueue([jobs.batch_item.prepare(n=i) for i in range(3)])

    data = run_json("batches")
    assert [b["id"] for b in data] == [opened.pk, finished.pk]
    for batch in data:
        assert set(batch) == BATCH_KEYS
    new, old = data
    assert (new["name"], new["status"], new["total"], new["done"]) == ("export", "open", 3, 0)
    assert new["counts"] == {"queued": 3}
    assert (new["callback"], new["callback_job_id"], new["finished_at"]) == (None, None, None)
    assert (old["status"], old["total"], old["done"]) == ("finished", 2, 2)
    assert old["counts"] == {"completed": 1, "dead": 1}
    assert old["callback"] == "tests.batch_done"
    assert Job.objects.get(pk=old["callback_job_id"]).name == "tests.batch_done"
    assert old["finished_at"] is not None

    assert [b["id"] for b in run_json("batches", "--open")] == [opened.pk]
    assert [b["id"] for b in run_json("batches", "--limit", "1")] == [opened.pk]
    headers = ["ID", "NAME", "DONE", "STATUS", "COUNTS", "CALLBACK JOB"]
    assert parse_table(run("batches"), headers) == [
        {"ID": str(opened.pk), "NAME": "export", "DONE": "0/3", "STATUS": "open",
         "COUNTS": "queued 3", "CALLBACK JOB": "-"},
        {"ID": str(finished.pk), "NAME": "import", "DONE": "2/2", "STATUS": "finished",
         "COUNTS": "completed 1, dead 1", "CALLBACK JOB": str(old["callback_job_id"])},
    ]  # fmt: skip


# -- writes ------------------------------------------------------------------------------------

WRITES = [
    # verb, the states it moves from, the state they move to (None: deleted), why the
    # others are skipped.
    ("retry", {"dead", "cancelled", "retrying"}, "queued", "not dead, cancelled or retrying"),
    ("cancel", {"queued", "leased", "retrying"}, "cancelled", "already finished"),
    ("discard", {"queued", "retrying"}, "dead", "running or finished"),
    ("delete", {"queued", "completed", "retrying", "dead", "cancelled"}, None,
     "running: cancel them first"),
]  # fmt: skip


@pytest.mark.parametrize(("verb", "sources", "target", "why"), WRITES)
def test_write_by_ids_moves_the_allowed_states_and_skips_the_others(
    verb, sources, target, why
) -> None:
    by_state = one_job_per_state()
    before = states()

    output = run(verb, *(str(pk) for pk in by_state.values()), "--yes")

    assert output == f"{verb}: {len(sources)} changed, {6 - len(sources)} skipped ({why}).\n"
    if target is None:
        expected = {pk: s for pk, s in before.items() if s not in sources}
        assert set(Attempt.objects.values_list("job_id", flat=True)) <= set(expected)
    else:
        expected = {pk: target if s in sources else s for pk, s in before.items()}
    assert states() == expected


def test_text_output_escapes_control_characters_json_keeps_the_text() -> None:
    hostile = "boom\x1b[2J\x1b]0;owned\x07\rdone"
    job = jobs.raises_text.delay(text=hostile)
    drain()
    for args in (("show", str(job.pk)), ("list",), ("errors",)):
        output = run(*args)
        assert not [c for c in "\x1b\x07\r" if c in output], args
        assert "boom\\x1b[2J" in output, args
    shown = run_json("show", str(job.pk))
    assert shown["last_error"] == f"ValueError: {hostile}"
    schedules_output = command_output("schedules", "list")
    assert "\x1b" not in schedules_output


def test_run_makes_delayed_and_retrying_jobs_available_now_and_skips_the_others() -> None:
    by_state = one_job_per_state()  # its queued job is available already: skipped
    delayed = jobs.add.using(run_in=datetime.timedelta(hours=1)).delay(a=9)
    retrying = Job.objects.get(pk=by_state["retrying"])
    assert retrying.available_at > timezone.now()  # waiting for its backoff
    before = states()
    started = timezone.now()

    output = run("run", *(str(pk) for pk in [*by_state.values(), delayed.pk]), "--yes")

    assert output == "run: 2 changed, 5 skipped (not waiting for a later time).\n"
    assert states() == {**before, retrying.pk: "queued"}
    for pk in (delayed.pk, retrying.pk):
        job = Job.objects.get(pk=pk)
        assert started <= job.available_at <= timezone.now()
    # Available now means a worker takes them at once.
    counts = drain(queue="default")
    assert Job.objects.get(pk=delayed.pk).state == State.COMPLETED
    assert counts["completed"] >= 1


def test_run_all_takes_filters() -> None:
    later = [jobs.add.using(run_in=datetime.timedelta(days=1)).delay(a=i) for i in range(3)]
    other = jobs.add.using(queue="emails", run_in=datetime.timedelta(days=1)).delay(a=4)
    with pytest.raises(CommandError, match="`jobs run --all` needs at least one filter"):
        run("run", "--all", "--yes")
    assert run("run", "--all", "--queue", "default", "--yes") == "run: 3 changed.\n"
    now = timezone.now()
    assert all(Job.objects.get(pk=j.pk).available_at <= now for j in later)
    assert Job.objects.get(pk=other.pk).available_at > now


def test_write_all_needs_a_filter_and_acts_on_exactly_the_matching_jobs(monkeypatch) -> None:
    enqueue_many(jobs.add.using(queue="webhooks").prepare(a=i) for i in range(3))
    enqueue_many(jobs.add.prepare(a=i) for i in range(2))
    noop = jobs.noop.delay()
    batch = Batch("b").enqueue([jobs.noop.prepare(), jobs.noop.prepare()])
    before = states()

    for verb in ("retry", "cancel", "discard", "delete"):
        with pytest.raises(CommandError, match=f"`jobs {verb} --all` needs at least one filter"):
            run(verb, "--all", "--yes")
        with pytest.raises(CommandError, match="Give job ids, or --all with filters"):
            run(verb, str(noop.pk), "--all", "--state", "queued", "--yes")
        with pytest.raises(CommandError, match="Give job ids, or --all with filters"):
            run(verb, "--yes")
    # Standard input is no terminal: without --yes there is no one to ask, even with
    # a "y" waiting on it.
    monkeypatch.setattr(sys, "stdin", io.StringIO("y\n"))
    with pytest.raises(CommandError, match="Refusing to cancel 3 jobs without --yes"):
        run("cancel", "--all", "--queue", "webhooks")
    with pytest.raises(CommandError, match="Refusing to delete 1 jobs without --yes"):
        run("delete", str(noop.pk))
    assert states() == before

    assert run("cancel", "--all", "--queue", "webhooks", "--yes") == "cancel: 3 changed.\n"
    webhooks = set(Job.objects.filter(queue="webhooks").values_list("pk", flat=True))
    assert {pk for pk, s in states().items() if s == "cancelled"} == webhooks
    assert run("discard", "--all", "--batch", str(batch.pk), "--yes") == "discard: 2 changed.\n"
    assert set(Job.objects.filter(state="dead").values_list("batch_id", flat=True)) == {batch.pk}
    out = run("retry", "--all", "--state", "dead", "--state", "cancelled", "--yes")
    assert out == "retry: 5 changed.\n"
    assert run("cancel", "--all", "--name", jobs.noop.name, "--yes") == "cancel: 3 changed.\n"
    assert set(Job.objects.filter(state="cancelled").values_list("name", flat=True)) == {
        jobs.noop.name
    }
    assert run("delete", "--all", "--since", "1h", "--state", "cancelled", "--yes") == (
        "delete: 3 changed.\n"
    )
    assert sorted(Job.objects.values_list("name", "state")) == [("tests.add", "queued")] * 5
    assert run("delete", "--all", "--since", "1h", "--yes") == "delete: 5 changed.\n"
    assert not Job.objects.exists()


def test_prune_deletes_old_finished_jobs_only() -> None:
    now = timezone.now()
    finished = [jobs.add.delay(a=1), jobs.discarder.delay(), jobs.canceller.delay()]
    recent = jobs.add.delay(a=2)
    drain()
    waiting = jobs.add.delay(a=3)
    Job.objects.filter(pk__in=[j.pk for j in finished]).update(
        finished_at=now - datetime.timedelta(days=30)
    )
    Job.objects.filter(pk=recent.pk).update(finished_at=now - datetime.timedelta(days=3))
    Job.objects.filter(pk=waiting.pk).update(created_at=now - datetime.timedelta(days=60))

    assert run("prune", "--days", "40") == "Pruned 0 finished jobs.\n"
    assert run("prune") == "Pruned 3 finished jobs.\n"  # PRUNE_AFTER_DAYS: 7
    assert not Attempt.objects.filter(job_id__in=[j.pk for j in finished]).exists()
    assert sorted(states()) == sorted([recent.pk, waiting.pk])
    assert run("prune", "--days", "1") == "Pruned 1 finished jobs.\n"
    assert list(states()) == [waiting.pk]


def test_pause_and_resume_one_queue_or_all() -> None:
    assert run("pause", "webhooks") == (
        "Queue 'webhooks' paused: no new starts on any node; running jobs finish.\n"
    )
    assert Queue.objects.get(name="webhooks").paused
    assert run("pause", "webhooks") == "Queue 'webhooks' was already paused.\n"
    assert run("pause", "--all") == "paused: default, emails.\n"
    assert run("pause", "--all") == "paused: nothing to change.\n"
    assert set(Queue.objects.filter(paused=True).values_list("name", flat=True)) == {
        "default", "emails", "webhooks"
    }  # fmt: skip
    assert run("resume", "emails") == "Queue 'emails' resumed.\n"
    assert run("resume", "emails") == "Queue 'emails' was not paused.\n"
    assert run("resume", "--all") == "resumed: default, webhooks.\n"
    assert run("resume", "--all") == "resumed: nothing to change.\n"
    assert not Queue.objects.filter(paused=True).exists()
    for verb in ("pause", "resume"):
        with pytest.raises(CommandError, match="Give one queue, or --all"):
            run(verb)
        with pytest.raises(CommandError, match="Give one queue, or --all"):
            run(verb, "webhooks", "--all")
    assert not Queue.objects.filter(paused=True).exists()


# -- on a terminal, and on pipes ---------------------------------------------------------------


def command_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a subprocess on this test's database (as conftest's workers)."""
    env = WorkerProcesses(tmp_path).env()
    env["DURABLE_JOBS_LOG_LEVEL"] = "WARNING"
    return env


def on_terminal(
    env: dict[str, str], *args: str, answer: str | None = None, timeout: float = 60
) -> tuple[int, str]:
    """Run ``jobs args`` with stdin, stdout and stderr on a pseudo-terminal; return its
    exit status and everything it wrote there. ``answer`` is typed at the [y/N] prompt."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "django", "jobs", *args],
        cwd=ROOT,
        env=env,
        stdin=slave,
        stdout=slave,
        stderr=slave,
    )
    os.close(slave)
    output = b""
    deadline = time.monotonic() + timeout
    try:
        while True:
            if answer is not None and b"[y/N] " in output:
                os.write(master, answer.encode())
                answer = None
            if time.monotonic() > deadline:
                proc.kill()
                raise AssertionError(f"jobs {args} did not finish: {output!r}")
            ready, _, _ = select.select([master], [], [], 0.2)
            if not ready:
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: every end of the terminal is closed, the process is gone
                break
            if not chunk:
                break
            output += chunk
    finally:
        os.close(master)
    return proc.wait(timeout=30), output.decode()


def on_pipes(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "django", "jobs", *args],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


def dead_jobs(count: int) -> None:
    now = timezone.now()
    Job.objects.bulk_create(
        (
            Job(name="tests.add", state=State.DEAD, attempts=1, finished_at=now)
            for _ in range(count)
        ),
        batch_size=500,
    )


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)
def test_bulk_retry_draws_a_progress_bar_on_a_terminal_only(tmp_path: Path) -> None:
    env = command_env(tmp_path)
    dead_jobs(2500)

    status, output = on_terminal(env, "retry", "--all", "--state", "dead", "--yes")

    assert status == 0, output
    # The first chunk of 1,000 is drawn at once, the last one always; then the report.
    assert "\rretry [" + "#" * 12 + "." * 18 + "] 1,000/2,500  40%" in output
    assert "\rretry [" + "#" * 30 + "] 2,500/2,500 100%\r\n" in output
    assert output.endswith("retry: 2500 changed.\r\n")
    assert Job.objects.filter(state=State.QUEUED).count() == 2500

    Job.objects.update(state=State.DEAD)
    piped = on_pipes(env, "retry", "--all", "--state", "dead", "--yes")

    assert piped.returncode == 0, piped.stderr
    assert piped.stdout == "retry: 2500 changed.\n"
    assert piped.stderr == ""  # no bar, no carriage return
    assert Job.objects.filter(state=State.QUEUED).count() == 2500


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)
def test_prune_shows_a_running_count_on_a_terminal_only(tmp_path: Path) -> None:
    env = command_env(tmp_path)
    dead_jobs(1500)
    Job.objects.update(finished_at=timezone.now() - datetime.timedelta(days=30))

    status, output = on_terminal(env, "prune", "--days", "7")

    assert status == 0, output
    assert "\rpruned: 1,500 jobs\r\n" in output
    assert output.endswith("Pruned 1500 finished jobs.\r\n")
    assert not Job.objects.exists()

    dead_jobs(1500)
    Job.objects.update(finished_at=timezone.now() - datetime.timedelta(days=30))
    piped = on_pipes(env, "prune", "--days", "7")
    assert (piped.returncode, piped.stdout, piped.stderr) == (0, "Pruned 1500 finished jobs.\n", "")
    assert not Job.objects.exists()


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)
def test_a_bulk_action_asks_on_a_terminal(tmp_path: Path) -> None:
    env = command_env(tmp_path)
    enqueue_many(jobs.add.prepare(a=i) for i in range(3))

    status, output = on_terminal(env, "cancel", "--all", "--state", "queued", answer="n\n")
    assert status == 1, output
    assert "Cancel 3 jobs? [y/N] " in output
    assert "Nothing changed." in output
    assert Job.objects.filter(state=State.QUEUED).count() == 3

    status, output = on_terminal(env, "cancel", "--all", "--state", "queued", answer="y\n")
    assert status == 0, output
    assert "Cancel 3 jobs? [y/N] " in output
    assert output.endswith("cancel: 3 changed.\r\n")
    assert Job.objects.filter(state=State.CANCELLED).count() == 3
