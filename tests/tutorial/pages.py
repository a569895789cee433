"""The tutorial's pages in reading order, as the code blocks and local links a reader meets.

Only what can be run is accepted: a ``console`` block (commands), or a ``python`` or
``ini`` block whose ``:caption:`` names the file it belongs to. Any other code block, a
literal block (a paragraph ending in ``::``), a doctest paragraph or a directive that
shows code (``literalinclude``, ``code``, ...) makes reading fail, so nothing in the
tutorial can be left unexecuted.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

#: The address ``manage.py runserver`` serves by default, as the tutorial writes it.
LOCAL_SITE = "http://127.0.0.1:8000"

#: Languages that are files, and so need a caption naming the file.
FILE_LANGUAGES = frozenset({"python", "ini"})
#: Options of ``code-block`` that change how a block looks, not what it says.
DISPLAY_OPTIONS = frozenset({"caption", "emphasize-lines"})
#: Directives that would show code no test runs.
UNRUNNABLE_DIRECTIVES = frozenset(
    {"code", "sourcecode", "literalinclude", "highlight", "parsed-literal", "doctest", "testcode"}
)

_DIRECTIVE = re.compile(r"^(?P<indent>\s*)\.\.\s+(?P<name>[\w:-]+)::\s*(?P<argument>.*)$")
_OPTION = re.compile(r"^\s+:(?P<name>[\w-]+):\s*(?P<value>.*)$")
_LINK = re.compile(re.escape(LOCAL_SITE) + r"[^\s<>`'\"]*")


class TutorialError(Exception):
    """The tutorial cannot be followed as it is written."""


@dataclass(frozen=True)
class CodeBlock:
    source: Path
    line: int
    language: str
    caption: str | None
    text: str
    #: The line of the page where ``text`` starts.
    text_line: int

    @property
    def where(self) -> str:
        return f"{self.source.parent.name}/{self.source.name}:{self.line}"


@dataclass(frozen=True)
class LocalLink:
    """An address of the development server that the text sends the reader to."""

    source: Path
    line: int
    url: str

    @property
    def where(self) -> str:
        return f"{self.source.parent.name}/{self.source.name}:{self.line}"

    @property
    def path(self) -> str:
        return self.url[len(LOCAL_SITE) :] or "/"


@dataclass
class Page:
    source: Path
    items: list[CodeBlock | LocalLink] = field(default_factory=list)


def read_tutorial(directory: Path) -> list[Page]:
    """``index.rst``, then the pages of its toctree, in that order."""
    index = directory / "index.rst"
    names = toctree_entries(index.read_text())
    if not names:
        raise TutorialError(f"{index}: no toctree lists the tutorial's pages")
    return [read_page(index)] + [read_page(directory / f"{name}.rst") for name in names]


def toctree_entries(text: str) -> list[str]:
    entries: list[str] = []
    lines = text.splitlines()
    for number, line in enumerate(lines):
        match = _DIRECTIVE.match(line)
        if not match or match["name"] != "toctree":
            continue
        for body in _body(lines, number + 1, len(match["indent"])):
            if body.strip() and not _OPTION.match(body):
                entries.append(body.strip())
    return entries


def read_page(path: Path) -> Page:
    page = Page(path)
    lines = path.read_text().splitlines()
    number = 0
    while number < len(lines):
        line = lines[number]
        where = f"{path.name}:{number + 1}"
        directive = _DIRECTIVE.match(line)
        if directive and directive["name"] == "code-block":
            block, number = _code_block(path, lines, number, directive)
            page.items.append(block)
            continue
        if directive and directive["name"] in UNRUNNABLE_DIRECTIVES:
            raise TutorialError(f"{where}: {directive['name']}:: shows code no test runs")
        if not directive and line.rstrip().endswith("::"):
            raise TutorialError(f"{where}: a literal block (::) is code no test runs")
        if line.lstrip().startswith(">>>"):
            raise TutorialError(f"{where}: a doctest paragraph is code no test runs")
        for url in _LINK.findall(line):
            page.items.append(LocalLink(path, number + 1, url.rstrip(".,;:)")))
        number += 1
    return page


def _code_block(
    path: Path, lines: list[str], number: int, directive: re.Match[str]
) -> tuple[CodeBlock, int]:
    where = f"{path.name}:{number + 1}"
    language = directive["argument"].strip()
    indent = len(directive["indent"])
    body = _body(lines, number + 1, indent)
    options: dict[str, str] = {}
    text_line = number + 2
    while body and (option := _OPTION.match(body[0])):
        options[option["name"]] = option["value"].strip()
        body = body[1:]
        text_line += 1
    while body and not body[0].strip():
        body = body[1:]
        text_line += 1
    unknown = set(options) - DISPLAY_OPTIONS
    if unknown:
        raise TutorialError(f"{where}: code-block options {sorted(unknown)} are not understood")
    caption = options.get("caption")
    if language in FILE_LANGUAGES and not caption:
        raise TutorialError(f"{where}: a {language} block needs a :caption: naming its file")
    if language not in FILE_LANGUAGES and language != "console":
        raise TutorialError(
            f"{where}: a {language!r} block cannot be run; use console, or a captioned "
            f"{' or '.join(sorted(FILE_LANGUAGES))} file"
        )
    text = textwrap.dedent("\n".join(body)).strip("\n")
    if not text:
        raise TutorialError(f"{where}: an empty code block")
    end = number + 1 + len(_body(lines, number + 1, indent))
    return CodeBlock(path, number + 1, language, caption, text + "\n", text_line), end


def _body(lines: list[str], start: int, indent: int) -> list[str]:
    """The lines of a directive's body: blank ones, or ones indented past the directive."""
    body: list[str] = []
    for line in lines[start:]:
        if line.strip() and len(line) - len(line.lstrip()) <= indent:
            break
        body.append(line)
    while body and not body[-1].strip():
        body.pop()
    return body
