"""The code the guides show runs, and the deployment files they show are valid.

``docs/coming-from/*.rst`` each port a small task module from another queue. The blocks
of the durable_jobs side carry a ``:name:`` starting with ``port-<guide>-`` and a
``:caption:`` naming their file: ``settings.py`` is executed for its settings, every
other file is written into a package on ``sys.path`` and imported, so its ``@job``
handlers register as in a project. The tests then enqueue and run the jobs with
:mod:`durable_jobs.testing`, on the test database, and check what they did: an API the
guides use that is renamed or changes meaning fails here.

``docs/deployment/*.rst`` show systemd units, a Dockerfile, Compose and Kubernetes YAML
and a Procfile. Their YAML must parse, their units must be well formed, every
``manage.py`` command line in them must parse with that command's own parser, each
worker's stop timeout must leave room for its shutdown grace, and the Kubernetes
probes, run as the kubelet runs them, must tell a live worker from a stopped one.
"""

from __future__ import annotations

import csv
import importlib
import io
import json
import re
import shlex
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import django
import pytest
import yaml
from django.contrib.auth import get_user_model
from django.contrib.sessions.backends.db import SessionStore
from django.contrib.sessions.models import Session
from django.core.cache import cache
from django.core.checks import run_checks
from django.core.management import get_commands, load_command_class
from django.utils import timezone

from durable_jobs import Scheduler, registry
from durable_jobs.backends.compat import TaskResultStatus
from durable_jobs.conf import DEFAULTS
from durable_jobs.models import Job, Node
from durable_jobs.schedules.sync import sync_schedules
from durable_jobs.testing import assert_enqueued, drain, enqueued_jobs
from tests.conftest import MANAGE_PY, WorkerProcesses, wait_for

DOCS = Path(__file__).resolve().parent.parent / "docs"
#: What a supervisor must wait beyond the shutdown grace (docs/deployment/index.rst).
HAND_BACK_SECONDS = 15

# -- reading code blocks out of reStructuredText ---------------------------------------------

DIRECTIVE = re.compile(r"^(?P<indent> *)\.\. code-block:: *(?P<language>\S+) *$")
OPTION = re.compile(r"^ +:(?P<key>[\w-]+): *(?P<value>.*)$")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    language: str
    caption: str
    name: str
    code: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(DOCS)}:{self.line}"


def code_blocks(page: Path) -> list[Block]:
    """Every ``.. code-block::`` of ``page``, with its options and dedented body."""
    lines = page.read_text().splitlines()
    blocks = []
    i = 0
    while i < len(lines):
        match = DIRECTIVE.match(lines[i])
        if not match:
            i += 1
            continue
        indent = len(match["indent"])
        options = {}
        j = i + 1
        while j < len(lines) and (option := OPTION.match(lines[j])):
            options[option["key"]] = option["value"].strip()
            j += 1
        body = []
        # The body: blank lines, and lines indented deeper than the directive.
        while j < len(lines) and (
            not lines[j].strip() or len(lines[j]) - len(lines[j].lstrip()) > indent
        ):
            body.append(lines[j])
            j += 1
        code = textwrap.dedent("\n".join(body)).strip("\n") + "\n"
        blocks.append(
            Block(
                page,
                i + 1,
                match["language"],
                options.get("caption", ""),
                options.get("name", ""),
                code,
            )
        )
        i = j
    return blocks


def test_code_blocks_reads_options_and_body(tmp_path: Path) -> None:
    page = tmp_path / "page.rst"
    page.write_text(
        "Title\n=====\n\n.. code-block:: python\n   :caption: app/jobs.py\n   :name: port-x-jobs\n"
        "\n   def f():\n       return 1\n\n   x = f()\n\nAfter.\n"
    )

    (block,) = code_blocks(page)

    assert (block.language, block.caption, block.name, block.line) == (
        "python",
        "app/jobs.py",
        "port-x-jobs",
        4,
    )
    assert block.code == "def f():\n    return 1\n\nx = f()\n"


# -- the ports -------------------------------------------------------------------------------


@dataclass
class Port:
    modules: dict[str, ModuleType]
    settings: dict[str, Any]
    handler_names: set[str]


@pytest.fixture
def install_port(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> Iterator[Callable[[str], Port]]:
    """Install the durable_jobs side of ``docs/coming-from/<guide>.rst``: its settings
    (in place of the suite's, for the test), then its modules. Undone after the test."""
    registered_before = set(registry.all_handlers())
    packages: set[str] = set()

    def install(guide: str) -> Port:
        blocks = [
            b
            for b in code_blocks(DOCS / "coming-from" / f"{guide}.rst")
            if b.name.startswith(f"port-{guide}-")
        ]
        assert blocks, f"no port-{guide}-* blocks in docs/coming-from/{guide}.rst"
        namespace: dict[str, Any] = {}
        files = []
        for block in blocks:
            if block.caption == "settings.py":
                exec(compile(block.code, block.where, "exec"), namespace)
                continue
            path = tmp_path / block.caption
            path.parent.mkdir(parents=True, exist_ok=True)
            (path.parent / "__init__.py").touch()
            code = block.code
            if django.VERSION < (6, 0):
                # The guides import Django's own framework; Django 5.2 has the backport.
                code = code.replace("from django.tasks import", "from django_tasks import")
            path.write_text(code)
            files.append(block.caption)
        namespace.pop("__builtins__", None)
        for name, value in namespace.items():
            if name.isupper():
                setattr(settings, name, value)
        monkeypatch.syspath_prepend(str(tmp_path))
        modules = {}
        for file in files:
            module = file.removesuffix(".py").replace("/", ".")
            assert module.split(".")[0] not in sys.modules, f"{module} would shadow a module"
            packages.add(module.split(".")[0])
            modules[module] = importlib.import_module(module)
        return Port(modules, namespace, set(registry.all_handlers()) - registered_before)

    yield install
    for module in list(sys.modules):
        if module.split(".")[0] in packages:
            del sys.modules[module]
    for name in set(registry.all_handlers()) - registered_before:
        del registry._handlers[name]


def assert_checks_pass(port: Port, extra_names: tuple[str, ...] = ()) -> None:
    """``manage.py check`` has nothing to say about the port's settings and handlers."""
    names = (*port.handler_names, *port.settings["DURABLE_JOBS"].get("SCHEDULES", {}), *extra_names)
    problems = [
        m
        for m in run_checks()
        if m.id
        and m.id.startswith("durable_jobs.")
        and (m.is_serious() or any(repr(name) in m.msg for name in names))
    ]
    assert problems == []


def create_user(username: str, **fields: Any) -> Any:
    return get_user_model().objects.create_user(username, f"{username}@example.com", **fields)


@pytest.mark.django_db
def test_celery_port(install_port: Callable[[str], Port], mailoutbox: list) -> None:
    port = install_port("celery")
    assert_checks_pass(port)
    accounts = port.modules["accounts.jobs"]
    ann = create_user("ann")
    bob = create_user("bob", is_active=False)

    welcome_ann = accounts.send_welcome_email.delay(user_id=ann.pk)
    welcome_bob = accounts.send_welcome_email.delay(user_id=bob.pk)
    welcome_nobody = accounts.send_welcome_email.delay(user_id=ann.pk + 1000)

    assert welcome_ann.queue == "emails"
    assert drain() == {"completed": 1, "snoozed": 1, "discarded": 1}
    assert [(m.subject, m.to) for m in mailoutbox] == [("Welcome!", ["ann@example.com"])]
    welcome_bob.refresh_from_db()
    assert welcome_bob.state == "queued"
    assert welcome_bob.available_at > timezone.now() + timedelta(minutes=9)
    welcome_nobody.refresh_from_db()
    assert welcome_nobody.state == "dead"
    assert welcome_nobody.last_error.endswith(f"user {ann.pk + 1000} no longer exists")

    # Still unconfirmed two days later: the snoozing stops.
    Job.objects.filter(pk=welcome_bob.pk).update(created_at=timezone.now() - timedelta(days=3))
    assert drain(with_scheduled=True) == {"cancelled": 1}

    # The weekly report, from the declared schedule: one count per day, then the mail.
    get_user_model().objects.update(date_joined=timezone.now() - timedelta(days=2))
    sync_schedules()
    assert Scheduler().tick(timezone.now() + timedelta(days=8)).enqueued == 1
    assert drain() == {"completed": 9}
    report = mailoutbox[-1]
    assert (report.subject, report.body, report.to) == (
        "Signups last week",
        "2 new accounts.",
        ["team@example.com"],
    )


@pytest.mark.django_db
def test_django_q2_port(install_port: Callable[[str], Port], mailoutbox: list) -> None:
    port = install_port("django-q2")
    assert_checks_pass(port)
    newsletter = port.modules["newsletter.jobs"]
    readers = [create_user(f"reader{n}") for n in range(3)]
    create_user("lapsed", is_active=False)

    newsletter.mail_issue(7)
    readers[2].delete()  # gone before the send: that job fails until it is dead

    assert drain(with_scheduled=True) == {"completed": 3, "failed": 3}
    *sends, report = mailoutbox
    assert sorted(m.to[0] for m in sends) == ["reader0@example.com", "reader1@example.com"]
    assert (report.subject, report.body) == ("Issue 7 sent", "2 sent, 1 failed.")

    # The nightly schedule clears expired sessions, and only those.
    expired, fresh = SessionStore(), SessionStore()
    expired.create()
    fresh.create()
    Session.objects.filter(pk=expired.session_key).update(
        expire_date=timezone.now() - timedelta(days=1)
    )
    sync_schedules()
    assert Scheduler().tick(timezone.now() + timedelta(days=2)).enqueued == 1
    assert drain() == {"completed": 1}
    assert list(Session.objects.values_list("pk", flat=True)) == [fresh.session_key]


@pytest.mark.django_db
def test_rq_port(install_port: Callable[[str], Port]) -> None:
    port = install_port("rq")
    assert_checks_pass(port)
    exports = port.modules["exports.jobs"]
    for name in ("ann", "bob", "cid"):
        create_user(name)
    cache.delete("export:e1")

    export = exports.export_users.delay(export_id="e1")

    assert (export.queue, export.max_retries, export.timeout) == ("exports", 3, 600)
    assert drain() == {"completed": 1}
    export.refresh_from_db()
    assert (export.result, export.progress) == (3, 100)
    rows = list(csv.reader(io.StringIO(cache.get("export:e1"))))
    assert [row[1:] for row in rows] == [
        ["ann", "ann@example.com"],
        ["bob", "bob@example.com"],
        ["cid", "cid@example.com"],
    ]
    forget = assert_enqueued(exports.forget_export, export_id="e1")
    assert forget.available_at > timezone.now() + timedelta(hours=23)

    # Run again (as a retry would): still one clean-up.
    exports.export_users.delay(export_id="e1")
    assert drain() == {"completed": 1}
    assert enqueued_jobs(exports.forget_export) == [forget]

    assert drain(with_scheduled=True) == {"completed": 1}
    assert cache.get("export:e1") is None


@pytest.mark.django_db
def test_django_tasks_port(install_port: Callable[[str], Port], mailoutbox: list) -> None:
    port = install_port("django-tasks")
    assert_checks_pass(port, extra_names=("default",))
    tasks = port.modules["notifications.tasks"]
    ann = create_user("ann")
    create_user("bob")
    create_user("cid", is_active=False)

    result = tasks.send_notification.enqueue(ann.pk, "Hello", "A message.")

    job = Job.objects.get(pk=int(result.id))
    assert (job.queue, job.max_retries, job.timeout) == ("emails", 3, 60)
    assert drain() == {"completed": 1}
    result.refresh()
    assert (result.status, result.return_value) == (
        TaskResultStatus.SUCCESSFUL,
        "ann@example.com",
    )
    assert [(m.subject, m.to) for m in mailoutbox] == [("Hello", ["ann@example.com"])]

    # The daily digest, from the schedule that names the Task: one mail per active user.
    sync_schedules()
    assert Scheduler().tick(timezone.now() + timedelta(days=2)).enqueued == 1
    assert drain() == {"completed": 3}
    assert sorted(m.to[0] for m in mailoutbox[1:]) == ["ann@example.com", "bob@example.com"]


# -- the deployment files --------------------------------------------------------------------


def deployment_blocks(*languages: str) -> list[Block]:
    blocks = [
        b
        for page in sorted((DOCS / "deployment").glob("*.rst"))
        for b in code_blocks(page)
        if b.language in languages
    ]
    assert blocks, f"no {languages} blocks in docs/deployment"
    return blocks


def yaml_documents() -> list[tuple[Block, Any]]:
    return [
        (block, document)
        for block in deployment_blocks("yaml")
        for document in yaml.safe_load_all(block.code)
    ]


def test_yaml_blocks_parse() -> None:
    kinds = sorted(d.get("kind", "compose") for _, d in yaml_documents())

    assert kinds == ["Deployment", "Deployment", "Job", "compose"]


#: The sections and directives the units use, as systemd spells them (systemd.unit(5),
#: systemd.service(5), systemd.exec(5), systemd.kill(5)).
SYSTEMD_DIRECTIVES = {
    "Unit": {"Description", "After", "Wants", "Requires", "Documentation", "OnFailure"},
    "Service": {
        "Type",
        "User",
        "Group",
        "WorkingDirectory",
        "Environment",
        "EnvironmentFile",
        "ExecStart",
        "KillSignal",
        "KillMode",
        "TimeoutStopSec",
        "Restart",
        "RestartSec",
    },
    "Timer": {"OnCalendar", "Persistent"},
    "Install": {"WantedBy"},
}


def parse_unit(block: Block) -> dict[str, dict[str, str]]:
    """A systemd unit file as sections of directives; fails on anything malformed."""
    sections: dict[str, dict[str, str]] = {}
    current = None
    for number, line in enumerate(block.code.splitlines(), 1):
        where = f"{block.where} (line {number} of {block.caption})"
        if not line.strip() or line.lstrip().startswith(("#", ";")):
            continue
        if header := re.fullmatch(r"\[(\w+)\]", line):
            current = header[1]
            assert current in SYSTEMD_DIRECTIVES, f"{where}: unknown section [{current}]"
            assert current not in sections, f"{where}: [{current}] twice"
            sections[current] = {}
            continue
        key, equals, value = line.partition("=")
        assert current is not None, f"{where}: a directive before any section: {line!r}"
        assert equals, f"{where}: not Key=Value: {line!r}"
        assert key in SYSTEMD_DIRECTIVES[current], f"{where}: {key}= is not a [{current}] directive"
        sections[current][key] = value
    return sections


def units(suffix: str = ".service") -> list[tuple[Block, dict[str, dict[str, str]]]]:
    return [(b, parse_unit(b)) for b in deployment_blocks("ini") if b.caption.endswith(suffix)]


def test_parse_unit_refuses_a_misspelt_directive() -> None:
    block = Block(DOCS / "x.rst", 1, "ini", "x.service", "", "[Service]\nTimeoutStopSecs=45\n")

    with pytest.raises(AssertionError, match="TimeoutStopSecs= is not a \\[Service\\] directive"):
        parse_unit(block)


def test_systemd_units_are_well_formed() -> None:
    found = units()

    assert sorted(b.caption.rsplit("/", 1)[-1] for b, _ in found) == [
        "durable-health.service",
        "durable-scheduler.service",
        "durable-worker-reports.service",
        "durable-worker@.service",
    ]
    for block, unit in found:
        # A oneshot service is started by its timer: it has nothing to install.
        oneshot = unit["Service"]["Type"] == "oneshot"
        assert set(unit) == {"Unit", "Service"} | (set() if oneshot else {"Install"}), block.where
        assert unit["Service"]["ExecStart"].startswith("/"), block.where  # no shell
        assert unit["Service"].get("KillSignal", "SIGTERM") == "SIGTERM", block.where


def test_every_oneshot_service_has_its_timer() -> None:
    services = {b.caption: u for b, u in units() if u["Service"]["Type"] == "oneshot"}
    timers = {b.caption: u for b, u in units(".timer")}

    assert sorted(timers) == sorted(c.removesuffix(".service") + ".timer" for c in services)
    for caption, timer in timers.items():
        assert set(timer) == {"Unit", "Timer", "Install"}, caption
        assert timer["Timer"]["OnCalendar"], caption
        assert timer["Install"] == {"WantedBy": "timers.target"}, caption


def manage_py(argv: list[str]) -> list[str] | None:
    """The part of a command line after ``manage.py``, up to a shell operator; inside
    ``sh -c "..."`` too."""
    if argv[:2] == ["sh", "-c"]:
        argv = shlex.split(argv[2])
    if "manage.py" not in argv:
        return None
    rest = argv[argv.index("manage.py") + 1 :]
    for operator in ("&&", "||", "|", ";", ">"):
        if operator in rest:
            rest = rest[: rest.index(operator)]
    return rest


def parse_command(argv: list[str]) -> dict[str, Any]:
    """Parse ``manage.py`` arguments with the named command's own parser."""
    name, *args = argv
    app = get_commands()[name]
    command = app if not isinstance(app, str) else load_command_class(app, name)
    parser = command.create_parser("manage.py", name)
    return vars(parser.parse_args(args))


def container_commands() -> Iterator[tuple[str, list[str], dict[str, Any]]]:
    """(where, command line, its container or service) of every YAML command and probe."""
    for block, document in yaml_documents():
        if "services" in document:  # Compose
            for name, service in document["services"].items():
                if isinstance(service.get("command"), list):
                    yield f"{block.where} service {name}", service["command"], service
            continue
        pod = document["spec"]["template"]["spec"]
        for container in pod["containers"]:
            where = f"{block.where} {document['kind']} {document['metadata']['name']}"
            yield where, container["command"] + container.get("args", []), pod
            for kind, probe in probes(container):
                yield f"{where} {kind} probe", probe, pod


def probes(container: dict[str, Any]) -> Iterator[tuple[str, list[str]]]:
    """(liveness or readiness, its command) of each exec probe of a container."""
    for kind in ("liveness", "readiness"):
        probe = container.get(f"{kind}Probe", {}).get("exec")
        if probe:
            yield kind, probe["command"]


def command_lines() -> list[tuple[str, list[str]]]:
    """Every ``manage.py`` command line the deployment pages (and the ports' own console
    blocks) show: YAML commands and probes, ``ExecStart=``, the Procfile, the
    Dockerfile's ``CMD`` and ``$`` lines of console blocks."""
    lines = [(where, argv) for where, argv, _ in container_commands()]
    lines += [(b.where, shlex.split(u["Service"]["ExecStart"])) for b, u in units()]
    for block in deployment_blocks("text"):
        if block.caption == "Procfile":
            lines += [(block.where, shlex.split(line.partition(":")[2])) for line in procfile()]
    for block in deployment_blocks("dockerfile"):
        lines += [(block.where, json.loads(line[4:])) for line in dockerfile_cmds(block)]
    consoles = deployment_blocks("console") + [
        b
        for page in sorted((DOCS / "coming-from").glob("*.rst"))
        for b in code_blocks(page)
        if b.language == "console" and "(" not in b.caption  # not the other queue's side
    ]
    for block in consoles:
        for line in block.code.splitlines():
            if line.startswith("$ "):
                lines.append((block.where, shlex.split(line[2:])))
    return [(where, rest) for where, argv in lines if (rest := manage_py(argv)) is not None]


def procfile() -> list[str]:
    (block,) = [b for b in deployment_blocks("text") if b.caption == "Procfile"]
    return block.code.splitlines()


def dockerfile_cmds(block: Block) -> list[str]:
    return [line for line in block.code.splitlines() if line.startswith("CMD ")]


def test_every_manage_py_command_line_parses() -> None:
    lines = command_lines()

    names = {argv[0] for _, argv in lines}
    assert {"runworker", "schedules", "migrate", "jobs"} <= names
    for where, argv in lines:
        try:
            parse_command(argv)
        except Exception as exc:
            raise AssertionError(f"{where}: manage.py {shlex.join(argv)}: {exc}") from None


def test_parse_command_refuses_a_command_that_does_not_exist() -> None:
    with pytest.raises(Exception, match="frobnicate"):
        parse_command(["jobs", "frobnicate"])


def test_dockerfile_commands_are_in_exec_form() -> None:
    for block in deployment_blocks("dockerfile"):
        cmds = dockerfile_cmds(block)
        assert cmds, block.where
        for line in cmds:
            assert isinstance(json.loads(line[4:]), list), f"{block.where}: {line}"


def shutdown_grace(argv: list[str]) -> float:
    grace = parse_command(argv)["shutdown_grace"]
    return float(DEFAULTS["SHUTDOWN_GRACE_SECONDS"] if grace is None else grace)


def seconds(value: str | int) -> float:
    """``45``, ``"45"`` or ``"45s"``."""
    return float(str(value).removesuffix("s"))


def test_every_worker_is_given_time_to_hand_its_jobs_back() -> None:
    checked = []
    for block, unit in units():
        argv = manage_py(shlex.split(unit["Service"]["ExecStart"]))
        if argv and argv[0] == "runworker":
            stop = seconds(unit["Service"]["TimeoutStopSec"])
            checked.append((block.where, stop, shutdown_grace(argv)))
    for where, argv, holder in container_commands():
        argv = manage_py(argv)  # type: ignore[assignment]
        if argv and argv[0] == "runworker":
            if "containers" in holder:  # a pod's spec
                assert "preStop" not in json.dumps(holder), where  # it would count too
                stop = seconds(holder["terminationGracePeriodSeconds"])
            else:  # a Compose service
                stop = seconds(holder["stop_grace_period"])
            checked.append((where, stop, shutdown_grace(argv)))
    for line in procfile():
        argv = manage_py(shlex.split(line.partition(":")[2]))
        if argv and argv[0] == "runworker":
            checked.append(("Procfile (Heroku stops dynos after 30 s)", 30, shutdown_grace(argv)))

    assert len(checked) == 5  # two units, Compose, Kubernetes, the Procfile
    for where, stop, grace in checked:
        assert stop >= grace + HAND_BACK_SECONDS, f"{where}: stop timeout {stop}, grace {grace}"


def probed_container() -> tuple[Block, dict[str, Any]]:
    """The one container of the deployment pages with probes (the worker's), and its block."""
    (found,) = [
        (block, container)
        for block, document in yaml_documents()
        if "template" in document.get("spec", {})
        for container in document["spec"]["template"]["spec"]["containers"]
        if any(probes(container))
    ]
    return found


def kubelet_expand(command: list[str], env: list[dict[str, Any]]) -> list[str]:
    """``command`` as the kubelet runs an exec probe: ``$(VAR)`` replaced by the literal
    ``value`` of the container's ``env`` entry ``VAR`` (an entry with ``valueFrom`` only
    gives ""), kept as written when there is no such entry; ``$$`` is one ``$``
    (Kubernetes' ``ExpandContainerCommandOnlyStatic``)."""
    static = {entry["name"]: entry.get("value", "") for entry in env}

    def expand(match: re.Match[str]) -> str:
        if match[0] == "$$":
            return "$"
        return static.get(match[1], match[0])

    return [re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", expand, arg) for arg in command]


def test_kubelet_expand_leaves_downward_api_variables_empty() -> None:
    env = [{"name": "POD_NAME", "valueFrom": {"fieldRef": {}}}, {"name": "MODE", "value": "x"}]

    assert kubelet_expand(["--node", "$(POD_NAME)", "$(MODE)", "$(NONE)", "$$(MODE)"], env) == [
        "--node",
        "",
        "x",
        "$(NONE)",
        "$(MODE)",
    ]


@pytest.mark.django_db(transaction=True)
def test_the_probes_tell_a_live_worker_from_a_gone_one(
    durable_worker: Callable[..., Any], tmp_path: Path
) -> None:
    """Each probe of the Kubernetes page, run as the kubelet runs it: expanded, then
    executed in the container's working directory (a project with manage.py), with the
    pod's environment. Its exit status is the probe's result."""
    pod_name = "shop-worker-7d9f8-x2x4q"
    block, container = probed_container()
    found = dict(probes(container))
    assert set(found) == {"liveness", "readiness"}, block.where
    (tmp_path / "manage.py").write_text(MANAGE_PY)
    env = {
        **WorkerProcesses(tmp_path).env(),
        "DURABLE_JOBS_LOG_LEVEL": "WARNING",
        "POD_NAME": pod_name,  # the downward API sets it in the container
        # "python" is this interpreter, as in the image.
        "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
    }

    def probe_exit_codes() -> set[int]:
        codes = set()
        for kind, command in found.items():
            argv = kubelet_expand(command, container["env"])
            result = subprocess.run(
                argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
            )
            assert result.stderr == "", f"{block.where} {kind} probe: {result.stderr}"
            codes.add(result.returncode)
        return codes

    worker = durable_worker("default:1", name=pod_name)
    wait_for(lambda: Node.objects.filter(name=pod_name).exists())
    assert probe_exit_codes() == {0}

    worker.stop()  # a clean stop deletes the node
    wait_for(lambda: not Node.objects.filter(name=pod_name).exists())
    assert probe_exit_codes() == {1}

    # A node that stopped beating (a frozen or killed worker).
    Node.objects.create(
        name=pod_name, pid=1, last_heartbeat_at=timezone.now() - timedelta(minutes=5)
    )
    assert probe_exit_codes() == {1}


def test_the_probe_written_without_a_shell_would_pass_an_empty_node_name() -> None:
    """Why the probes go through sh: ``--node $(POD_NAME)`` reaches the command empty."""
    _, container = probed_container()
    argv = kubelet_expand(["python", "manage.py", "jobs", "health", "--node", "$(POD_NAME)"],
                          container["env"])  # fmt: skip

    assert argv[-2:] == ["--node", ""]
    with pytest.raises(Exception, match=r"node name is empty.*through a shell"):
        parse_command(manage_py(argv) or [])
