"""The environment the tutorial's commands run in, and the virtualenv the tutorial makes.

Commands run in bash with a clean environment: nothing of this test run
(``DJANGO_SETTINGS_MODULE``, ``PYTHONPATH``, ``DATABASE_URL``, ``PYTEST_*``) reaches them,
so the site reads its own settings and its own SQLite database, whichever database the
suite itself runs on. Until the tutorial activates its virtualenv, ``python`` is the
interpreter running this test.

The tutorial's ``pip install`` commands run for real, with one difference from a reader's
machine: the distributions they would fetch from a package index (Django, croniter,
pytest, ...) are taken from this test's own environment. Before each ``pip install``, the
distributions it asks for and everything they require are linked into a directory on
the virtualenv's path, with their console scripts (``django-admin``), so pip finds them
installed and fetches none. What pip builds and installs is the package itself, from its
checkout, as the tutorial says.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterable
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.tutorial.pages import TutorialError

#: Where the tutorial tells the reader to put their checkout's path.
CHECKOUT_PLACEHOLDER = "/path/to/django-durable-jobs"
PROJECT = "django-durable-jobs"
#: What pip needs to build the package from a checkout; the tests and docs are not part of it.
PACKAGE_FILES = ("pyproject.toml", "README.md", "LICENSE", "durable_jobs")

_LEAKS = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "DATABASE_URL")
_LEAKING_PREFIXES = ("DJANGO_", "DURABLE_JOBS", "PYTEST_")


def command_environment(shims: Path) -> dict[str, str]:
    """A reader's shell: this process's environment without what belongs to the test run."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in _LEAKS and not key.startswith(_LEAKING_PREFIXES)
    }
    write_python_shims(shims)
    env["PATH"] = os.pathsep.join([str(shims), env.get("PATH", os.defpath)])
    # Output in the order a terminal shows it, tables and pytest's lines at a fixed width.
    env.update(PYTHONUNBUFFERED="1", COLUMNS="80", PIP_NO_INPUT="1")
    return env


def write_python_shims(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("python", "python3"):
        shim = directory / name
        shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
        shim.chmod(0o755)


def copy_checkout(root: Path, destination: Path) -> Path:
    """The package's files from ``root``, where pip can build them without writing its
    ``build/`` and ``*.egg-info`` into the checkout under test."""
    destination.mkdir(parents=True)
    for name in PACKAGE_FILES:
        source = root / name
        if source.is_dir():
            shutil.copytree(
                source, destination / name, ignore=shutil.ignore_patterns("__pycache__")
            )
        else:
            shutil.copy2(source, destination / name)
    return destination


def checkout_requirements(checkout: Path) -> list[str]:
    project = tomllib.loads((checkout / "pyproject.toml").read_text())["project"]
    return list(project.get("dependencies", []))


class Virtualenv:
    """A virtualenv the tutorial created, and the dependencies linked into it.

    The links live in ``dependencies``, a directory outside the virtualenv: pip treats
    what is outside the environment as not its own, and never uninstalls it, which would
    delete the files of this test's environment through the links.
    """

    def __init__(self, path: Path, dependencies: Path) -> None:
        self.path = path
        self.python = path / "bin" / "python"
        if not self.python.exists():
            raise TutorialError(f"{path} is not a virtualenv: it has no bin/python")
        site_packages = subprocess.run(
            [self.python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
            capture_output=True,
            text=True,
            check=True,
            env={"PATH": os.defpath},
        ).stdout.strip()
        if dependencies.is_relative_to(path):
            raise TutorialError(f"{dependencies} must be outside the virtualenv {path}")
        self.dependencies = dependencies
        self.dependencies.mkdir()
        Path(site_packages, "linked-dependencies.pth").write_text(f"{self.dependencies}\n")

    def link(self, requirements: Iterable[str]) -> None:
        """Link the distributions ``requirements`` need, with their console scripts."""
        for dist in _closure(requirements):
            self._link_files(dist)
            self._write_scripts(dist)

    def _link_files(self, dist: importlib.metadata.Distribution) -> None:
        if dist.files is None:
            raise TutorialError(f"{dist.metadata['Name']} lists no files to link")
        tops = {file.parts[0] for file in dist.files}
        for top in sorted(tops - {"..", "__pycache__"}):
            if top.endswith(".pth"):
                continue
            link = self.dependencies / top
            if not link.exists():
                link.symlink_to(Path(str(dist.locate_file(top))))

    def _write_scripts(self, dist: importlib.metadata.Distribution) -> None:
        for entry in dist.entry_points.select(group="console_scripts"):
            attribute = entry.attr.split(".")[0]
            script = self.path / "bin" / entry.name
            script.write_text(
                f"#!{self.python}\nimport sys\nfrom {entry.module} import {attribute}\n\n"
                f'if __name__ == "__main__":\n    sys.exit({entry.attr}())\n'
            )
            script.chmod(0o755)


def _closure(requirements: Iterable[str]) -> list[importlib.metadata.Distribution]:
    """The installed distributions ``requirements`` resolve to, with what they require."""
    found: dict[str, importlib.metadata.Distribution] = {}
    waiting = [Requirement(r) for r in requirements]
    while waiting:
        requirement = waiting.pop()
        name = canonicalize_name(requirement.name)
        if name == PROJECT:
            raise TutorialError(f"{PROJECT} itself must be installed from its checkout")
        if name in found:
            continue
        try:
            dist = importlib.metadata.distribution(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            raise TutorialError(
                f"{requirement.name} is not installed where this test runs, so the "
                "tutorial's virtualenv cannot have it"
            ) from None
        if not requirement.specifier.contains(dist.version, prereleases=True):
            raise TutorialError(f"{requirement} is wanted; {dist.version} is installed")
        found[name] = dist
        extras = {"", *requirement.extras}
        for line in dist.requires or []:
            needed = Requirement(line)
            if needed.marker is None or any(needed.marker.evaluate({"extra": e}) for e in extras):
                waiting.append(needed)
    return list(found.values())
