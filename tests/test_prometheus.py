"""durable_jobs.contrib.prometheus: the database gauges, the counters, the view, the worker's port.

Everything is real: the view is scraped through Django's test client and parsed with
prometheus_client's own parser; ``runworker --metrics-port`` is a real subprocess scraped
over HTTP while it runs; the missing-extra cases run Python processes in which
``prometheus_client`` cannot be imported.
"""

from __future__ import annotations

import datetime
import json
import re
import signal
import socket
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from collections import Counter
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from durable_jobs import enqueue_many
from durable_jobs.contrib.prometheus.collector import NODES, DatabaseCollector
from durable_jobs.contrib.prometheus.server import MetricsServer
from durable_jobs.lifecycle.states import UNFINISHED
from durable_jobs.maintenance.rescuer import rescue_expired
from durable_jobs.models import Attempt, Job, Node, Outcome
from durable_jobs.overview import FINISHED_WINDOW
from durable_jobs.states import State
from durable_jobs.testing import drain
from tests.conftest import ROOT, WorkerProcesses, logs_of, wait_until
from tests.testapp import jobs, tasks

INSTALL = 'pip install "django-durable-jobs[prometheus]"'
#: The content type of the text format, as prometheus_client answers without an Accept.
TEXT_FORMAT = choose_encoder("")[1]

#: Samples by metric name, each a mapping of its labels (as a sorted tuple) to its value.
Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]


def parse(text: str) -> Samples:
    """Every sample of an exposition, parsed by prometheus_client's own parser."""
    found: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def labels(**values: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(values.items()))


@pytest.fixture
def metrics_url(settings: Any) -> str:
    settings.ROOT_URLCONF = "tests.prometheus_urls"
    return "/metrics/"


@pytest.fixture
def staff_client(db: None) -> Client:
    client = Client()
    client.force_login(User.objects.create_user("ops", is_staff=True))
    return client


# -- the database gauges, through the view ------------------------------------------------------


def expected_jobs(now: datetime.datetime) -> dict[tuple[str, str], int]:
    """Jobs per (queue, state) as the gauge defines them, counted here without the overview."""
    counts: Counter[tuple[str, str]] = Counter()
    for queue, state, finished_at in Job.objects.values_list("queue", "state", "finished_at"):
        if state in UNFINISHED or finished_at >= now - FINISHED_WINDOW:
            counts[queue, state] += 1
    return counts


@pytest.mark.django_db
def test_the_view_reports_jobs_lag_and_nodes_as_the_database_has_them(
    metrics_url: str, staff_client: Client
) -> None:
    now = timezone.now()
    for i in range(3):
        jobs.add.delay(a=i)
    late = jobs.add.using(queue="emails").delay(a=9)
    Job.objects.filter(pk=late.pk).update(available_at=now - datetime.timedelta(seconds=120))
    jobs.add.using(queue="webhooks", run_in=datetime.timedelta(hours=1)).delay(a=1)
    live = Node.objects.create(name="node-live", pid=10, queues={"default": 2}, concurrency=2)
    for name in ("node-gone-1", "node-gone-2"):
        Node.objects.create(name=name, pid=11, last_heartbeat_at=now - datetime.timedelta(hours=2))
    running = jobs.add.delay(a=5)
    Job.objects.filter(pk=running.pk).update(state=State.LEASED, leased_by=live)
    finished = [jobs.add.using(queue=q).delay(a=1) for q in ("default", "default", "webhooks")]
    for job, state, ago in zip(
        finished,
        [State.COMPLETED, State.DEAD, State.CANCELLED],
        [datetime.timedelta(minutes=5), datetime.timedelta(hours=1), datetime.timedelta(hours=2)],
        strict=True,
    ):
        Job.objects.filter(pk=job.pk).update(state=state, finished_at=now - ago)
    # Finished a month ago: outside the window of the finished states.
    old = jobs.add.delay(a=1)
    Job.objects.filter(pk=old.pk).update(
        state=State.COMPLETED, finished_at=now - datetime.timedelta(days=30)
    )

    response = staff_client.get(metrics_url)

    assert response.status_code == 200
    # What prometheus_client's own servers answer a request without an Accept header.
    assert response["Content-Type"] == TEXT_FORMAT
    found = parse(response.content.decode())
    expected = expected_jobs(timezone.now())
    queues = {"default", "emails", "webhooks"}
    assert found["durable_jobs_jobs"] == {
        labels(queue=q, state=s.value): float(expected[q, s.value]) for q in queues for s in State
    }
    # The figures above, spelled out: what the rows were made to be.
    assert expected["default", State.QUEUED] == 3
    assert expected["default", State.LEASED] == 1
    assert expected["default", State.COMPLETED] == 1  # the month-old one is not counted
    assert expected["webhooks", State.CANCELLED] == 1
    lag = found["durable_jobs_queue_lag_seconds"]
    assert set(lag) == {labels(queue=q) for q in queues}
    assert 120 <= lag[labels(queue="emails")] < 120 + 60
    # Only a job due in an hour waits in webhooks: it is not late.
    assert lag[labels(queue="webhooks")] == 0
    assert found["durable_jobs_nodes"] == {labels(status="live"): 1, labels(status="stale"): 2}


@pytest.mark.django_db
def test_the_view_answers_openmetrics_when_asked(metrics_url: str, staff_client: Client) -> None:
    Node.objects.create(name="node-live", pid=10, queues={"default": 2}, concurrency=2)

    response = staff_client.get(
        metrics_url, headers={"Accept": "application/openmetrics-text; version=1.0.0"}
    )

    assert response["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
    nodes = next(f for f in openmetrics_families(response.content.decode()) if f.name == NODES)
    assert {s.labels["status"]: s.value for s in nodes.samples} == {"live": 1, "stale": 0}


@pytest.mark.django_db
def test_registering_the_collector_reads_no_rows() -> None:
    registry = CollectorRegistry(auto_describe=True)
    with CaptureQueriesContext(connection) as queries:
        registry.register(DatabaseCollector())
    assert queries.captured_queries == []
    # Collecting does read them.
    assert registry.get_sample_value("durable_jobs_nodes", {"status": "live"}) == 0


# -- who may read the view -------------------------------------------------------------------


@pytest.mark.django_db
def test_the_view_answers_staff_only_by_default(metrics_url: str) -> None:
    anonymous = Client().get(metrics_url)
    member = Client()
    member.force_login(User.objects.create_user("member"))
    inactive = Client()
    inactive.force_login(User.objects.create_user("left", is_staff=True, is_active=False))

    assert anonymous.status_code == 403
    assert "METRICS_PUBLIC" in anonymous.content.decode()
    assert member.get(metrics_url).status_code == 403
    assert inactive.get(metrics_url).status_code == 403
    assert Client().post(metrics_url).status_code == 405


@pytest.mark.django_db
def test_metrics_public_opens_the_view(metrics_url: str, settings: Any) -> None:
    settings.DURABLE_JOBS = {**settings.DURABLE_JOBS, "METRICS_PUBLIC": True}

    response = Client().get(metrics_url)

    assert response.status_code == 200
    assert "durable_jobs_nodes" in parse(response.content.decode())


# -- the process counters -------------------------------------------------------------------

ATTEMPTS = "durable_jobs_attempts_total"
DURATIONS = "durable_jobs_attempt_duration_seconds_count"
ENQUEUED = "durable_jobs_enqueued_total"


def process_samples() -> Samples:
    """This process's samples on the default registry (the counters live there)."""
    found: Samples = {}
    for family in REGISTRY.collect():
        for sample in family.samples:
            found.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return found


def increase(before: Samples, after: Samples, name: str) -> dict[tuple, float]:
    """How much each series of ``name`` grew between two readings (unchanged ones left out)."""
    old, new = before.get(name, {}), after.get(name, {})
    return {key: value - old.get(key, 0) for key, value in new.items() if value != old.get(key, 0)}


def rows_by(*fields: str, queryset: Any) -> dict[tuple, float]:
    """Rows counted per value of ``fields``, keyed like a sample's sorted labels."""
    counts = Counter(queryset.values_list(*fields))
    return {
        tuple(sorted(zip(labels_of(fields), key, strict=True))): float(n)
        for key, n in counts.items()
    }


def labels_of(fields: tuple[str, ...]) -> list[str]:
    return [field.removeprefix("job__") for field in fields]


@pytest.mark.django_db
def test_each_new_job_is_counted_once_by_the_process_that_enqueued_it() -> None:
    before = process_samples()

    jobs.add.delay(a=1)
    enqueue_many([jobs.add.prepare(a=2), jobs.noop.prepare(), jobs.add.prepare(a=3)])
    enqueue_many([jobs.add.using(queue="emails").prepare(a=4)])
    first = jobs.add.using(idempotency_key="once").delay(a=5)
    assert jobs.add.using(idempotency_key="once").delay(a=5).pk == first.pk  # not new
    tasks.add.enqueue(1)  # the django.tasks backend
    tasks.send_email.enqueue("ops@example.com")

    assert Job.objects.count() == 8
    assert increase(before, process_samples(), ENQUEUED) == rows_by(
        "queue", "name", queryset=Job.objects.all()
    )


@pytest.mark.django_db
def test_each_finished_attempt_is_counted_by_outcome_and_timed() -> None:
    for i in range(3):
        jobs.add.delay(a=i)
    jobs.always_fails.delay()  # fails, and waits for its retry
    jobs.snoozer.delay(seconds=3600)
    jobs.canceller.delay()
    jobs.discarder.using(queue="emails").delay()
    before = process_samples()

    assert drain() == {"completed": 3, "failed": 1, "snoozed": 1, "cancelled": 1, "discarded": 1}

    after = process_samples()
    attempts = Attempt.objects.all()
    assert increase(before, after, ATTEMPTS) == rows_by(
        "job__queue", "job__name", "outcome", queryset=attempts
    )
    assert increase(before, after, DURATIONS) == rows_by(
        "job__queue", "job__name", queryset=attempts
    )


@pytest.mark.django_db
def test_a_lost_attempt_is_counted_by_the_rescuer_and_not_timed() -> None:
    job = jobs.add.delay(a=1)
    crashed = Node.objects.create(name="crashed-node", pid=1)
    Job.objects.filter(pk=job.pk).update(
        state=State.LEASED,
        attempts=1,
        leased_by=crashed,
        lease_token="00000000-0000-0000-0000-000000000001",
        lease_expires_at=timezone.now() - datetime.timedelta(seconds=1),
        attempted_at=timezone.now() - datetime.timedelta(minutes=10),
    )
    before = process_samples()

    assert rescue_expired(node="rescuer") == 1

    after = process_samples()
    lost = labels(queue="default", name="tests.add", outcome=Outcome.LOST)
    assert increase(before, after, ATTEMPTS) == {lost: 1}
    assert increase(before, after, DURATIONS) == {}


# -- the worker's metrics server ---------------------------------------------------------------


def get(url: str) -> tuple[int, str, str]:
    """Status, content type and body of a GET over real HTTP."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read().decode()


def test_the_server_serves_the_default_registry_at_metrics_until_closed() -> None:
    server = MetricsServer(0)
    try:
        status, content_type, body = get(server.url)
        missing, _, hint = get(server.url.replace("/metrics", "/other"))
    finally:
        server.close()

    assert server.url == f"http://127.0.0.1:{server.port}/metrics"
    assert status == 200
    assert content_type == TEXT_FORMAT
    # The default registry: the process metrics of prometheus_client come along.
    assert "python_info" in parse(body)
    assert missing == 404
    assert "/metrics" in hint
    assert not server.thread.is_alive()
    # The port is free again.
    with socket.create_server(("127.0.0.1", server.port)):
        pass


def test_runworker_refuses_a_port_in_use_with_a_message(tmp_path: Any) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = run_manage("runworker", "--metrics-port", str(port), "--burst")

    assert result.returncode != 0
    assert f"--metrics-port {port}" in result.stderr
    assert "already in use" in result.stderr
    assert "Traceback" not in result.stderr


def test_metrics_host_needs_metrics_port() -> None:
    result = run_manage("runworker", "--metrics-host", "0.0.0.0", "--burst")

    assert result.returncode != 0
    assert "--metrics-host needs --metrics-port" in result.stderr


def run_manage(*args: str, prelude: str = "") -> subprocess.CompletedProcess[str]:
    """``manage.py args`` in a fresh Python, after ``prelude`` (run before Django starts)."""
    return run_python(
        f"""
        from django.core.management import execute_from_command_line
        execute_from_command_line(["manage.py", *{list(args)!r}])
        """,
        prelude=prelude,
    )


def run_python(
    script: str, prelude: str = "", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``script`` in a fresh Python on the test settings and database, after ``prelude``."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(prelude) + textwrap.dedent(script)],
        cwd=ROOT,
        env={**WorkerProcesses(ROOT).env(), **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


# -- a real runworker, scraped over HTTP ------------------------------------------------------


def metrics_url_of(workers: WorkerProcesses, proc: subprocess.Popen[bytes]) -> str:
    """The URL a ``--metrics-port 0`` worker logged that it serves."""
    found = wait_until(
        lambda: re.search(r"serving metrics at (http://[^\s\"]+)", workers.log(proc)),
        workers,
        timeout=30,
        alive=[proc],
        what="the worker's metrics URL in its log",
    )
    return found.group(1)


def worker_counters(url: str) -> tuple[dict[tuple, float], dict[tuple, float]]:
    """The attempts counter and the duration histogram's counts a worker serves."""
    status, _, body = get(url)
    assert status == 200
    found = parse(body)
    return found.get(ATTEMPTS, {}), found.get(DURATIONS, {})


@pytest.mark.subprocess
@pytest.mark.timeout(150)
@pytest.mark.django_db(transaction=True)
def test_runworker_metrics_port_serves_counters_matching_the_attempts_it_ran(
    worker_processes: WorkerProcesses,
) -> None:
    # A job whose worker died: the new worker's rescuer records its attempt as lost
    # (its retries spent, it goes dead).
    crashed = Node.objects.create(
        name="crashed-node", pid=1, last_heartbeat_at=timezone.now() - datetime.timedelta(hours=1)
    )
    orphan = jobs.noop.delay()
    Job.objects.filter(pk=orphan.pk).update(
        state=State.LEASED,
        attempts=1,
        max_retries=0,
        leased_by=crashed,
        lease_token="00000000-0000-0000-0000-000000000001",
        lease_expires_at=timezone.now() - datetime.timedelta(seconds=1),
        attempted_at=timezone.now() - datetime.timedelta(minutes=10),
    )
    for i in range(3):
        jobs.add.delay(a=i)  # completed
    retried = jobs.fixed_backoff.delay()  # fails four times, 1 s and 2 s apart: dead
    jobs.snoozer.delay(seconds=3600)  # snoozed once
    jobs.canceller.delay()
    jobs.discarder.using(queue="emails").delay()

    proc = worker_processes.start("--queues", "default,emails", "--metrics-port", "0")
    url = metrics_url_of(worker_processes, proc)
    assert url.startswith("http://127.0.0.1:")
    wait_until(
        lambda: (
            Attempt.objects.count() == 11
            and Job.objects.filter(pk=retried.pk, state=State.DEAD).exists()
        ),
        worker_processes,
        timeout=60,
        alive=[proc],
        what="every job's attempts recorded",
    )
    attempts = Attempt.objects.all()
    expected = rows_by("job__queue", "job__name", "outcome", queryset=attempts)
    timed = rows_by("job__queue", "job__name", queryset=attempts.exclude(outcome=Outcome.LOST))
    # The counters follow each outcome's commit: wait for the last one to be counted.
    wait_until(
        lambda: worker_counters(url) == (expected, timed),
        worker_processes,
        timeout=10,
        alive=[proc],
        what=f"counters equal to the attempts {expected}, last served {worker_counters(url)}",
    )

    assert expected == {
        labels(queue="default", name="tests.add", outcome="completed"): 3,
        labels(queue="default", name="tests.fixed_backoff", outcome="failed"): 4,
        labels(queue="default", name="tests.snoozer", outcome="snoozed"): 1,
        labels(queue="default", name="tests.canceller", outcome="cancelled"): 1,
        labels(queue="emails", name="tests.discarder", outcome="discarded"): 1,
        labels(queue="default", name="tests.testapp.jobs.noop", outcome="lost"): 1,
    }
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0, logs_of(worker_processes, [proc])
    # The server stopped with the worker.
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(url, timeout=5)


# -- other processes -----------------------------------------------------------------------

ENQUEUE_TWICE = """
import django
django.setup()
from durable_jobs.contrib.prometheus import metrics
from tests.testapp import jobs

jobs.add.delay(a=1)
jobs.add.using(queue="emails").delay(a=2)
"""

SCRAPE_THE_VIEW = """
import django
django.setup()
from django.test import Client
from django.test.utils import override_settings
from django.conf import settings

with override_settings(
    ROOT_URLCONF="tests.prometheus_urls",
    DURABLE_JOBS={**settings.DURABLE_JOBS, "METRICS_PUBLIC": True},
):
    print(Client().get("/metrics/").content.decode())
"""


@pytest.mark.subprocess
@pytest.mark.django_db(transaction=True)
def test_in_multiprocess_mode_the_view_sums_every_process_counters(tmp_path: Any) -> None:
    directory = tmp_path / "prometheus"
    directory.mkdir()
    env = {"PROMETHEUS_MULTIPROC_DIR": str(directory)}
    for _ in range(3):  # three web processes, say, each enqueuing two jobs
        assert run_python(ENQUEUE_TWICE, env=env).returncode == 0

    scraped = run_python(SCRAPE_THE_VIEW, env=env)

    assert scraped.returncode == 0, scraped.stderr
    found = parse(scraped.stdout)
    assert found[ENQUEUED] == {
        labels(queue="default", name="tests.add"): 3,
        labels(queue="emails", name="tests.add"): 3,
    }
    # The database gauges come along, once.
    assert found["durable_jobs_jobs"][labels(queue="emails", state="queued")] == 3


def test_the_app_connects_the_counters_when_django_starts(tmp_path: Any) -> None:
    (tmp_path / "with_prometheus_app.py").write_text(
        "from tests.settings import *\n"
        'INSTALLED_APPS = [*INSTALLED_APPS, "durable_jobs.contrib.prometheus"]\n'
    )
    result = run_python(
        """
        import sys
        import django
        django.setup()
        from durable_jobs import signals
        # Each receiver is listed under its (dispatch_uid, sender) key.
        connected = signals.job_enqueued.receivers + signals.attempt_finished.receivers
        print(sorted(key[0] for key, *_ in connected))
        print("durable_jobs.contrib.prometheus.metrics" in sys.modules)
        """,
        env={
            "DJANGO_SETTINGS_MODULE": "with_prometheus_app",
            "PYTHONPATH": f"{ROOT}:{tmp_path}",
        },
    )

    assert result.returncode == 0, result.stderr
    receivers, imported = result.stdout.splitlines()[-2:]
    assert "durable_jobs.prometheus.enqueued" in receivers
    assert "durable_jobs.prometheus.attempts" in receivers
    assert imported == "True"


# -- without the extra ---------------------------------------------------------------------

#: Run first in a Python where prometheus_client cannot be imported (as if not installed).
WITHOUT_PROMETHEUS = """
import sys
sys.modules["prometheus_client"] = None
"""


def test_without_the_extra_metrics_port_names_it() -> None:
    result = run_manage("runworker", "--metrics-port", "0", "--burst", prelude=WITHOUT_PROMETHEUS)

    assert result.returncode == 1
    assert INSTALL in result.stderr
    assert "CommandError: --metrics-port" in result.stderr
    assert "Traceback" not in result.stderr


def test_without_the_extra_resolving_the_view_names_it() -> None:
    result = run_python(
        """
        import django
        django.setup()
        from django.core.exceptions import ImproperlyConfigured
        from django.test.utils import override_settings
        from django.urls import resolve

        with override_settings(ROOT_URLCONF="tests.prometheus_urls"):
            try:
                resolve("/metrics/")
            except ImproperlyConfigured as exc:
                print("refused:", exc)
        """,
        prelude=WITHOUT_PROMETHEUS,
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("refused: durable_jobs.contrib.prometheus needs")
    assert INSTALL in result.stdout


@pytest.mark.django_db(transaction=True)
def test_durable_jobs_and_a_worker_without_the_option_never_import_prometheus_client() -> None:
    ids = [jobs.add.delay(a=1).pk, jobs.always_fails.delay().pk]

    result = run_python(
        """
        import json, sys
        import django
        django.setup()
        import durable_jobs, durable_jobs.signals
        from django.core.management import call_command

        call_command("runworker", "--burst", "--queues", "default")
        print(json.dumps(sorted(m for m in sys.modules if m.startswith("prometheus_client"))))
        """
    )

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == []
    # The worker did run the jobs (and so sent its signals) in that process.
    assert Attempt.objects.filter(job_id__in=ids).count() == 2


# -- the guide ---------------------------------------------------------------------------------


def test_the_guide_names_only_real_metrics_and_its_yaml_parses() -> None:
    import yaml

    guide = (ROOT / "docs" / "howto" / "prometheus.rst").read_text()
    blocks = re.findall(r"\.\. code-block:: yaml\n(?:   :\w+:.*\n)*\n((?:   .*\n|\n)+)", guide)
    documents = [yaml.safe_load(textwrap.dedent(block)) for block in blocks]
    exported = (
        {family.name for family in DatabaseCollector().describe()}
        | {  # what a worker's counters are called in the exposition
            name.removesuffix("_total") for name in (ATTEMPTS, ENQUEUED)
        }
        | {"durable_jobs_attempt_duration_seconds"}
    )

    rules = next(d for d in documents if isinstance(d, dict) and "groups" in d)
    used = {
        re.sub(r"_(total|bucket|count|sum)$", "", name)
        for group in rules["groups"]
        for rule in group["rules"]
        for name in re.findall(r"durable_jobs_\w+", rule["expr"])
    }
    tabled = set(re.findall(r"\* - ``(durable_jobs_\w+)``", guide))

    assert len(documents) >= 5
    assert used <= exported
    assert {"durable_jobs_queue_lag_seconds", "durable_jobs_jobs", "durable_jobs_nodes"} <= used
    assert {re.sub(r"_total$", "", name) for name in tabled} == exported
