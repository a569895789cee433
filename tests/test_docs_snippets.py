"""The migration guides and the deployment page show code that must stay true.

Each ``code-block`` of ``docs/coming-from/`` and ``docs/deployment/`` is checked by its
language: Python parses, and every name it imports from ``durable_jobs`` exists (so a
renamed API breaks this test, not a reader's port); YAML parses (Compose, Kubernetes);
``ini`` (systemd units) parses with every ``runworker`` option it uses known to the
command. Every ``manage.py runworker`` option shown anywhere on these pages exists.
"""

from __future__ import annotations

import ast
import configparser
import importlib
import re
from pathlib import Path

import pytest
import yaml
from django.core.management import load_command_class

DOCS = Path(__file__).resolve().parent.parent / "docs"
PAGES = sorted([*DOCS.glob("coming-from/*.rst"), *DOCS.glob("deployment/*.rst")])
BLOCK = re.compile(r"^\.\. code-block:: (\w+)\n((?:   :.*\n)*)\n((?:(?:   .*)?\n)+)", re.M)


def blocks(language: str) -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        for match in BLOCK.finditer(page.read_text()):
            if match.group(1) == language:
                code = "\n".join(line[3:] for line in match.group(3).splitlines())
                found.append((f"{page.relative_to(DOCS)}:{code.splitlines()[0]}", code))
    return found


def test_the_pages_have_blocks_of_each_kind() -> None:
    assert len(PAGES) == 5
    assert len(blocks("python")) >= 10
    assert len(blocks("yaml")) == 2
    assert len(blocks("ini")) == 1


@pytest.mark.parametrize(("where", "code"), blocks("python"))
def test_python_blocks_parse_and_import_only_what_exists(where: str, code: str) -> None:
    tree = ast.parse(code, filename=where)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("durable_jobs"):
            module = importlib.import_module(node.module or "")
            for alias in node.names:
                assert hasattr(module, alias.name), f"{where}: {node.module}.{alias.name}"


@pytest.mark.parametrize(("where", "code"), blocks("yaml"))
def test_yaml_blocks_parse(where: str, code: str) -> None:
    assert isinstance(yaml.safe_load(code), dict), where


@pytest.mark.parametrize(("where", "code"), blocks("ini"))
def test_systemd_units_parse_and_stop_after_the_grace(where: str, code: str) -> None:
    unit = configparser.ConfigParser(interpolation=None, strict=True)
    unit.read_string(code)
    service = unit["Service"]
    assert service["KillSignal"] == "SIGTERM"
    assert int(service["TimeoutStopSec"]) > 30  # SHUTDOWN_GRACE_SECONDS' default


def runworker_options() -> set[str]:
    parser = load_command_class("durable_jobs", "runworker").create_parser("manage.py", "runworker")
    return {option for action in parser._actions for option in action.option_strings}


def test_every_runworker_option_shown_exists() -> None:
    known = runworker_options()
    shown: set[str] = set()
    for page in PAGES:
        for line in page.read_text().splitlines():
            if "runworker" in line:
                shown.update(re.findall(r"(?<![\w-])--[a-z][a-z-]*", line.split("runworker", 1)[1]))
    assert shown, "no runworker option found on the pages"
    assert shown <= known, shown - known
