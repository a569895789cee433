"""Writing a file block into the site as a reader would: a new file, or an edit of one.

A block names its file with ``:caption:``. When the file does not exist yet, the block
is its content. A Python file that exists (``settings.py`` from ``startproject``, a
``views.py`` from ``startapp``, a ``jobs.py`` from an earlier step) is edited statement
by statement, the way the tutorial's text asks for it:

* an assignment to a name, a ``def`` or a ``class`` replaces the file's statement of the
  same name ("change ``INSTALLED_APPS`` to ...") with the comment lines just above it,
  or is added at the end of the file when there is none ("add ...");
* ``from module import names`` adds the names to the file's import from that module, or
  is added after the file's last import;
* anything else (a bare call, ``+=``, an ``if``) cannot be placed in an existing file
  without guessing, and fails.

Any other file (``pytest.ini``) is written whole.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from tests.tutorial.pages import CodeBlock, TutorialError


def write_block(directory: Path, block: CodeBlock) -> Path:
    """Write ``block`` into the file its caption names, relative to ``directory``."""
    assert block.caption is not None
    relative = Path(block.caption)
    if relative.is_absolute() or ".." in relative.parts:
        raise TutorialError(f"{block.where}: {block.caption!r} is not a path inside the site")
    path = directory / relative
    if block.language == "python":
        if path.suffix != ".py":
            raise TutorialError(f"{block.where}: a python block for {block.caption!r}")
        original = path.read_text() if path.exists() else ""
        try:
            text = merge_python(original, block.text)
        except TutorialError as error:
            raise TutorialError(f"{block.where}: {error}") from None
    else:
        text = block.text
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


@dataclass(frozen=True)
class _Statement:
    key: tuple[str, ...]
    node: ast.stmt
    first: int  # 0-based line where the statement starts, its comments included
    last: int  # 0-based line after its end

    def text(self, lines: list[str]) -> str:
        return "".join(lines[self.first : self.last])


def merge_python(original: str, addition: str) -> str:
    """``original`` with each top-level statement of ``addition`` put in its place."""
    if not original.strip():
        return addition
    additions = _lines(addition)
    merged = original
    for statement in _statements(addition, strict=True):
        merged = _put(merged, statement, statement.text(additions))
    try:
        ast.parse(merged)
    except SyntaxError as error:  # a mistake of the merge itself
        raise TutorialError(f"merging gave invalid Python: {error}") from None
    return merged


def _put(source: str, statement: _Statement, text: str) -> str:
    lines = _lines(source)
    statements = _statements(source, strict=False)
    found = next((s for s in statements if s.key == statement.key), None)
    node = statement.node
    if found is not None:
        if isinstance(node, ast.ImportFrom):
            assert isinstance(found.node, ast.ImportFrom)
            text = _union_import(found.node, node)
        return "".join([*lines[: found.first], text, *lines[found.last :]])
    if isinstance(node, ast.Import | ast.ImportFrom):
        imports = [s for s in statements if isinstance(s.node, ast.Import | ast.ImportFrom)]
        docstring = [s for s in statements if s.key == ("docstring",)]
        anchors = imports or docstring
        at = max(s.last for s in anchors) if anchors else 0
        return "".join([*lines[:at], text, *lines[at:]])
    # Two blank lines around a definition, one between other statements, as ruff formats.
    definitions = [node, *(s.node for s in statements[-1:])]
    blank_lines = 2 if any(isinstance(n, _DEFINITIONS) for n in definitions) else 1
    return source.rstrip("\n") + "\n" * (1 + blank_lines) + text


def _statements(source: str, *, strict: bool) -> list[_Statement]:
    """The top-level statements; ``strict``: refuse one that has no place (see ``_key``).
    An existing file may hold such statements: they are kept, and never matched."""
    try:
        tree = ast.parse(source)
    except SyntaxError as error:
        raise TutorialError(f"not valid Python: {error}") from None
    lines = _lines(source)
    statements = []
    for node in tree.body:
        first = min([node.lineno, *(d.lineno for d in _decorators(node))]) - 1
        while first > 0 and lines[first - 1].lstrip().startswith("#"):
            first -= 1
        assert node.end_lineno is not None
        key = _key(node) if strict else _key_or_none(node)
        statements.append(
            _Statement(key or ("unmatched", str(first)), node, first, node.end_lineno)
        )
    return statements


def _key(node: ast.stmt) -> tuple[str, ...]:
    match node:
        case ast.ImportFrom(module=module, level=level):
            return ("from", "." * level + (module or ""))
        case ast.Import(names=names):
            return ("import", *sorted(f"{a.name} as {a.asname}" for a in names))
        case ast.FunctionDef(name=name) | ast.AsyncFunctionDef(name=name) | ast.ClassDef(name=name):
            return ("name", name)
        case ast.Assign(targets=[ast.Name(id=name)]) | ast.AnnAssign(target=ast.Name(id=name)):
            return ("name", name)
        case ast.Expr(value=ast.Constant(value=str())) if node.lineno == 1:
            return ("docstring",)
    raise TutorialError(
        f"line {node.lineno}: only imports, definitions and assignments to a name can be "
        "put into an existing file"
    )


def _union_import(existing: ast.ImportFrom, added: ast.ImportFrom) -> str:
    names = [_alias(a) for a in existing.names]
    names += [name for name in map(_alias, added.names) if name not in names]
    return f"from {'.' * existing.level}{existing.module or ''} import {', '.join(names)}\n"


def _alias(alias: ast.alias) -> str:
    return f"{alias.name} as {alias.asname}" if alias.asname else alias.name


def _decorators(node: ast.stmt) -> list[ast.expr]:
    return node.decorator_list if isinstance(node, _DEFINITIONS) else []


def _key_or_none(node: ast.stmt) -> tuple[str, ...] | None:
    try:
        return _key(node)
    except TutorialError:
        return None


def _lines(source: str) -> list[str]:
    lines = source.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    return lines
