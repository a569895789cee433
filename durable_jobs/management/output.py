"""Output shared by the management commands: aligned tables for people, JSON for scripts."""

from __future__ import annotations

import json
import re
from typing import Any, cast

from django.core.management.base import OutputWrapper

#: C0 and C1 control characters but newline and tab: an escape sequence in an error
#: message (text a job's client may have chosen) could otherwise drive the terminal.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` with its control characters shown as ``\\xNN``; newlines and tabs kept."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


class PrintableOutput:
    """A command's output that writes every message through :func:`printable`. JSON
    output is unchanged by it: ``json.dumps`` already escapes control characters."""

    def __init__(self, wrapped: OutputWrapper) -> None:
        self._wrapped = wrapped

    def write(self, msg: str = "", style_func: Any = None, ending: str | None = None) -> None:
        self._wrapped.write(printable(msg), style_func, ending)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._wrapped, name)


def printable_output(stdout: OutputWrapper) -> OutputWrapper:
    return cast(OutputWrapper, PrintableOutput(stdout))


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
