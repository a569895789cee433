"""Output shared by the management commands: aligned tables for people, JSON for scripts."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import OutputWrapper


def emit_json(stdout: OutputWrapper, data: Any) -> None:
    stdout.write(json.dumps(data, indent=2, default=str))


def table(stdout: OutputWrapper, headers: list[str], rows: list[list[str]]) -> None:
    """Columns padded to their widest cell; a short notice when there are no rows."""
    if not rows:
        stdout.write("Nothing to show.")
        return
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows, strict=False)]
    for row in [headers, *rows]:
        stdout.write("  ".join(str(x).ljust(w) for x, w in zip(row, widths, strict=False)).rstrip())
