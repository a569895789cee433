"""The virtualenvs the comparison runs its peers and its chart in, one per system.

Each peer is installed from PyPI, at pinned versions, into a virtualenv of its own
under ``benchmarks/.venvs/`` (ignored by git), so that no peer's dependencies meet
durable_jobs' or another peer's. A virtualenv is created on first use and reinstalled
only when its requirements change: a stamp file inside it records what was installed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from benchmarks import harness

VENVS_DIR = harness.REPO / "benchmarks" / ".venvs"
#: Written inside a virtualenv once its requirements are installed.
STAMP = ".peers-requirements"
#: Seconds allowed to create and fill one virtualenv from PyPI.
INSTALL_TIMEOUT = 900


def python_of(name: str) -> Path:
    return VENVS_DIR / name / "bin" / "python"


def _stamp_text(requirements: Sequence[str], base_python: str) -> str:
    # The base interpreter's version is part of the stamp: a new Python means a new venv.
    version = subprocess.run(
        [base_python, "-c", "import sys; print(sys.version)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    body = "\n".join([version, *sorted(requirements)])
    return hashlib.sha256(body.encode()).hexdigest() + "\n" + body + "\n"


def ensure(name: str, requirements: Sequence[str], *, base_python: str | None = None) -> Path:
    """The interpreter of virtualenv ``name`` with ``requirements`` installed; creates or
    refreshes the virtualenv when its stamp does not match."""
    base = base_python or os.environ.get("PEERS_BASE_PYTHON") or shutil.which("python3")
    if base is None:
        raise SystemExit("python3 not found: pass PEERS_BASE_PYTHON=/path/to/python3.11")
    path = VENVS_DIR / name
    stamp = _stamp_text(requirements, base)
    stamp_file = path / STAMP
    if stamp_file.exists() and stamp_file.read_text() == stamp and python_of(name).exists():
        return python_of(name)
    harness.log(f"[venv] installing {name}: {' '.join(requirements)}")
    shutil.rmtree(path, ignore_errors=True)
    VENVS_DIR.mkdir(parents=True, exist_ok=True)
    subprocess.run([base, "-m", "venv", str(path)], check=True, timeout=INSTALL_TIMEOUT)
    pip = [str(python_of(name)), "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(
        [*pip, "install", *requirements],
        check=True,
        timeout=INSTALL_TIMEOUT,
        stdout=sys.stderr,  # standard output is for results
    )
    stamp_file.write_text(stamp)
    return python_of(name)
