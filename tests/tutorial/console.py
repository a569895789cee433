"""Console blocks: the commands they show, and whether a command printed what is shown.

A command is a line starting with ``$ `` (continued by a trailing backslash); the lines
after it, up to the next command, are its output. A command shown without output is
not checked for output (its exit status still is). Shown output must match what the
command printed, line for line, once both are *normalized*: what changes from one run
to the next (dates and times, durations, generated node names, process ids) is
replaced by a placeholder, and runs of spaces, which only align columns, become one
space. In the shown output, a line ``...`` stands for any number of lines, and ``...``
inside a line for any text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tests.tutorial.pages import CodeBlock, TutorialError

PROMPT = "$ "
ELLIPSIS = "..."

#: (pattern, placeholder), applied in this order to the shown and to the printed output.
VOLATILE = [
    # 2026-12-02 20:06:01,078 (log records), 2026-12-02T20:06:00.241922+00:00 (ISO), and
    # 2026-12-03 08:00:00 CET (a local time with its zone's abbreviation: UTC, CET, CEST).
    (
        re.compile(
            r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d(?::\d\d(?:[.,]\d+)?)?(?:[+-]\d\d:\d\d|Z)?"
            r"(?: (?:UTC|GMT|[A-Z]{1,4}T)\b)?"
        ),
        "<time>",
    ),
    # A worker's generated name: steady-otter-3fa9c1.
    (re.compile(r"\b[a-z]+-[a-z]+-[0-9a-f]{6}\b"), "<node>"),
    (re.compile(r"\bpid \d+"), "pid <pid>"),
    # 7.338 ms, 0.815s, 30.0s, in 0.55s.
    (re.compile(r"\b\d+(?:\.\d+)? ?(?:ms|s)\b"), "<duration>"),
    # The rules of = that pytest draws to the width of the line around a summary.
    (re.compile(r"={3,}"), "==="),
]


@dataclass(frozen=True)
class Command:
    block: CodeBlock
    line: int
    text: str
    #: The output shown for it; empty when none is shown.
    output: tuple[str, ...]

    @property
    def where(self) -> str:
        return f"{self.block.where.rsplit(':', 1)[0]}:{self.line}"


def commands(block: CodeBlock) -> list[Command]:
    lines = block.text.splitlines()
    if not lines[0].startswith(PROMPT):
        raise TutorialError(f"{block.where}: a console block starts with a {PROMPT!r} command")
    found: list[Command] = []
    index = 0
    while index < len(lines):
        start = index
        text = lines[index][len(PROMPT) :]
        while text.endswith("\\"):
            index += 1
            if index == len(lines):
                raise TutorialError(f"{block.where}: a continued command has no next line")
            text = text[:-1].rstrip() + " " + lines[index].strip()
        index += 1
        output = []
        while index < len(lines) and not lines[index].startswith(PROMPT):
            output.append(lines[index])
            index += 1
        while output and not output[-1].strip():
            output.pop()
        found.append(Command(block, block.text_line + start, text.strip(), tuple(output)))
    return found


def normalize(text: str) -> list[str]:
    for pattern, placeholder in VOLATILE:
        text = pattern.sub(placeholder, text)
    lines = [" ".join(line.split()) for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def matches(shown: tuple[str, ...], printed: str) -> bool:
    """Whether ``printed`` is what ``shown`` shows (see the module's docstring)."""
    pattern = []
    for line in normalize("\n".join(shown)):
        if line == ELLIPSIS:
            pattern.append(r"(?:[^\n]*\n)*?")
        else:
            parts = [re.escape(part) for part in line.split(ELLIPSIS)]
            pattern.append("[^\n]*".join(parts) + r"\n")
    text = "".join(line + "\n" for line in normalize(printed))
    return re.fullmatch("".join(pattern), text) is not None


def check_output(command: Command, printed: str) -> None:
    if command.output and not matches(command.output, printed):
        raise TutorialError(
            f"{command.where}: `{command.text}` printed what the tutorial does not show.\n"
            f"--- shown (normalized) ---\n{chr(10).join(normalize(chr(10).join(command.output)))}\n"
            f"--- printed (normalized) ---\n{chr(10).join(normalize(printed))}\n"
            f"--- printed ---\n{printed}"
        )
