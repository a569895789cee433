"""A progress bar for long bulk actions, drawn only on a terminal.

It writes to standard error, redrawing one line in place, so that standard output
stays clean for what the command reports; when standard error is not a terminal (a
pipe, a file, CI logs) it writes nothing at all.
"""

from __future__ import annotations

import time
from typing import TextIO

from django.core.management.base import OutputWrapper


class ProgressBar:
    """``verb [#########.........]  4,000/10,000  40%``, or a running count without a total."""

    width = 30
    #: Redraw at most this often: a terminal is slow to draw, the action is not.
    interval = 0.1

    def __init__(self, stream: OutputWrapper | TextIO, verb: str, total: int | None) -> None:
        self.stream = stream
        self.verb = verb
        self.total = total
        self.done = 0
        self.enabled = _is_terminal(stream)
        self._drawn_at = 0.0

    def advance(self, count: int) -> None:
        self.done += count
        now = time.monotonic()
        if self.enabled and (now - self._drawn_at >= self.interval or self.finished):
            self._drawn_at = now
            self._write("\r" + self.line())

    @property
    def finished(self) -> bool:
        return self.total is not None and self.done >= self.total

    def line(self) -> str:
        if not self.total:
            return f"{self.verb}: {self.done:,} jobs"
        share = min(self.done / self.total, 1.0)
        filled = round(share * self.width)
        bar = "#" * filled + "." * (self.width - filled)
        return f"{self.verb} [{bar}] {self.done:,}/{self.total:,} {share:4.0%}"

    def close(self) -> None:
        if self.enabled and self.done:
            self._write("\r" + self.line() + "\n")

    def _write(self, text: str) -> None:
        if isinstance(self.stream, OutputWrapper):
            # A command's own stderr would end every write with a newline.
            self.stream.write(text, ending="")
        else:
            self.stream.write(text)
        self.stream.flush()


def _is_terminal(stream: OutputWrapper | TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())
