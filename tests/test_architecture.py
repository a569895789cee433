"""The package's layering rules, checked by reading its source with ``ast``.

Nothing here imports ``durable_jobs`` or touches the database; the tests parse every module
under ``durable_jobs/`` (migrations aside) and check that:

* no two modules import each other, directly or round a loop, so every module can be
  understood, and imported, after the ones below it;
* the database engines (``durable_jobs/db/``) sit below the lifecycle: they may use the
  models and the lifecycle's vocabulary, never the flow control, handlers, worker or admin
  built on top of them;
* no module reaches into another module's private (``_name``) helpers;
* modules stay small enough to read in one sitting.

Every import statement counts wherever it is, including one inside a function, a method or
a ``try``, because a function-level import is still a dependency (it only hides the cycle
until that function runs). Only imports under ``if TYPE_CHECKING:`` are left out: they
never run.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import textwrap
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "durable_jobs"

#: What an engine may import from inside the package (a name allows its submodules too).
#: The engines are the bottom layer: they turn lifecycle decisions into SQL, so they may
#: know the models, the states and the SQL vocabulary of the lifecycle, settings, limits
#: and exceptions, and nothing that is built on top of them.
ENGINE_MAY_IMPORT = frozenset(
    {
        "durable_jobs.db",
        "durable_jobs.models",
        "durable_jobs.lifecycle.states",
        "durable_jobs.lifecycle.sql",
        "durable_jobs.conf",
        "durable_jobs.limits",
        "durable_jobs.exceptions",
    }
)

#: The layers the design names as never to be imported by an engine.
ENGINE_FORBIDDEN_BY_NAME = ("flow", "handlers", "worker", "admin")

MAX_LINES = 400

#: Modules held to less than MAX_LINES.
SMALLER_LIMITS = {
    "durable_jobs/worker/worker.py": 350,
}

#: Modules allowed past MAX_LINES: path -> (ceiling, why it may be longer).
LONG_MODULES = {
    "durable_jobs/models.py": (
        500,
        "the models and their documented indexes; splitting them would scatter the schema",
    ),
}


@dataclasses.dataclass(frozen=True)
class Import:
    """An import statement's edge from ``importer`` to ``imported``, both dotted module names.

    ``names`` are what ``from imported import ...`` takes that are not modules themselves
    (a submodule taken that way is an edge of its own).
    """

    importer: str
    imported: str
    lineno: int
    path: str  # the importing file, relative to the package's parent directory
    names: tuple[str, ...] = ()

    @property
    def where(self) -> str:
        return f"{self.path}:{self.lineno}"


def package_modules(root: Path) -> dict[str, Path]:
    """Every module of the package at ``root`` by dotted name, migrations left out."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if relative.parts[0] == "migrations":
            continue
        parts = [root.name, *relative.with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_statements(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement in ``tree`` except those under ``if TYPE_CHECKING:``."""
    pending = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            pending.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        pending.extend(ast.iter_child_nodes(node))


def _from_base(node: ast.ImportFrom, module: str, is_package: bool) -> str | None:
    """The absolute module a ``from ... import`` names, or None past the top level."""
    if not node.level:
        return node.module
    parts = module.split(".") if is_package else module.split(".")[:-1]
    keep = len(parts) - (node.level - 1)
    if keep <= 0:
        return None
    return ".".join([*parts[:keep], *([node.module] if node.module else [])])


def file_imports(module: str, root: Path, modules: dict[str, Path]) -> list[Import]:
    """The imports in ``module`` that land on another module of the package at ``root``."""
    path = modules[module]
    shown = path.relative_to(root.parent).as_posix()
    found = []
    for node in _import_statements(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        targets: dict[str, list[str]] = {}
        if isinstance(node, ast.Import):
            targets = {alias.name: [] for alias in node.names}
        elif (base := _from_base(node, module, path.name == "__init__.py")) is not None:
            for alias in node.names:
                if f"{base}.{alias.name}" in modules:
                    targets.setdefault(f"{base}.{alias.name}", [])
                else:
                    targets.setdefault(base, []).append(alias.name)
        found += [
            Import(module, target, node.lineno, shown, tuple(names))
            for target, names in targets.items()
            if target != module and (target == root.name or target.startswith(root.name + "."))
        ]
    return sorted(found, key=lambda imp: (imp.lineno, imp.imported))


@functools.cache
def package_imports(root: Path = PACKAGE) -> tuple[Import, ...]:
    """Every in-package import of the package at ``root``; parsed once per session."""
    modules = package_modules(root)
    return tuple(imp for module in modules for imp in file_imports(module, root, modules))


def strongly_connected(edges: Iterable[tuple[str, str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, iteratively, each sorted, in sorted order."""
    graph: dict[str, set[str]] = {}
    for source, target in edges:
        graph.setdefault(source, set()).add(target)
        graph.setdefault(target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []

    def enter(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)

    for start in sorted(graph):
        if start in index:
            continue
        enter(start)
        work = [(start, iter(sorted(graph[start])))]
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    enter(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while not component or component[-1] != node:
                        component.append(stack.pop())
                        on_stack.discard(component[-1])
                    components.append(sorted(component))
    return sorted(components)


def import_cycles(imports: Iterable[Import]) -> list[tuple[list[str], list[Import]]]:
    """Each cycle's modules with the import statements that run between them."""
    imports = list(imports)
    cycles = []
    for component in strongly_connected((imp.importer, imp.imported) for imp in imports):
        if len(component) > 1:
            members = set(component)
            inside = [i for i in imports if i.importer in members and i.imported in members]
            cycles.append((component, inside))
    return cycles


def private_name_imports(imports: Iterable[Import]) -> list[tuple[Import, list[str]]]:
    """``from other_module import _name`` statements with their ``_names`` (not dunders)."""
    found = []
    for imp in imports:
        private = [n for n in imp.names if n.startswith("_") and not n.startswith("__")]
        if private and imp.importer != imp.imported:
            found.append((imp, private))
    return found


def _within(module: str, allowed: Iterable[str]) -> bool:
    return any(module == name or module.startswith(name + ".") for name in allowed)


def test_no_import_cycles() -> None:
    report = []
    for modules, inside in import_cycles(package_imports()):
        report.append(f"cycle of {len(modules)}: {', '.join(modules)}")
        lines: dict[tuple[str, str, str], list[str]] = {}
        for imp in inside:
            lines.setdefault((imp.importer, imp.imported, imp.path), []).append(str(imp.lineno))
        report += [
            f"    {importer} -> {imported}  at {path}:{','.join(dict.fromkeys(numbers))}"
            for (importer, imported, path), numbers in lines.items()
        ]
    if report:
        pytest.fail(
            "import cycles; cut one edge (import) of each to break it:\n" + "\n".join(report),
            pytrace=False,
        )


def test_engines_import_only_models_and_the_lifecycle_vocabulary() -> None:
    offending = []
    for imp in package_imports():
        if not _within(imp.importer, ["durable_jobs.db"]) or _within(
            imp.imported, ENGINE_MAY_IMPORT
        ):
            continue
        line = f"    {imp.where}: {imp.importer} imports {imp.imported}"
        for layer in ENGINE_FORBIDDEN_BY_NAME:
            if _within(imp.imported, [f"durable_jobs.{layer}"]):
                line += f"  <- FORBIDDEN BY NAME: an engine must never import {layer}"
        offending.append(line)
    if offending:
        pytest.fail(
            "durable_jobs/db/ may import from the package only "
            + ", ".join(sorted(ENGINE_MAY_IMPORT))
            + ":\n"
            + "\n".join(offending),
            pytrace=False,
        )


def test_no_module_imports_another_modules_private_names() -> None:
    offending = [
        f"    {imp.where}: {imp.importer} imports {', '.join(names)} from {imp.imported}"
        for imp, names in private_name_imports(package_imports())
    ]
    if offending:
        pytest.fail(
            "a _name is private to its module; make it public (and documented) or move the "
            "code that needs it:\n" + "\n".join(offending),
            pytrace=False,
        )


def test_modules_stay_small() -> None:
    sizes = {
        path.relative_to(PACKAGE.parent).as_posix(): len(path.read_text("utf-8").splitlines())
        for path in package_modules(PACKAGE).values()
    }
    problems = []
    for shown, lines in sizes.items():
        ceiling = LONG_MODULES.get(shown, (SMALLER_LIMITS.get(shown, MAX_LINES), ""))[0]
        if lines > ceiling:
            problems.append(f"    {shown}: {lines} lines, more than {ceiling}")
    for shown in sorted(LONG_MODULES):
        if shown not in sizes:
            problems.append(f"    {shown}: no such module; remove it from LONG_MODULES")
        elif sizes[shown] <= MAX_LINES:
            problems.append(
                f"    {shown}: {sizes[shown]} lines, within {MAX_LINES}; "
                "remove it from LONG_MODULES"
            )
    if problems:
        pytest.fail("module sizes (see LONG_MODULES):\n" + "\n".join(problems), pytrace=False)


FAKE_PACKAGE = {
    "__init__.py": "__version__ = '1'\n",
    "_internal.py": "",
    "conf.py": "import json\n",
    "a.py": """\
        import os


        def f():
            from pkg import b
        """,
    "b.py": """\
        from typing import TYPE_CHECKING

        if TYPE_CHECKING:
            from pkg import c
        else:
            import pkg.d


        class K:
            def m(self):
                from . import a
        """,
    "c.py": """\
        import typing

        if typing.TYPE_CHECKING:
            import pkg.a
        try:
            from .sub.mod import thing
        except ImportError:
            pass
        import pkg.c
        from pkg import __version__, _internal
        """,
    "d.py": "import pkg.sub.mod as mod\n",
    "sub/__init__.py": "from .mod import _helper, VALUE\n",
    "sub/mod.py": "from .. import conf\n",
    "migrations/0001_initial.py": "from pkg import a\n",
}


def test_the_collector_counts_what_the_rules_say(tmp_path: Path) -> None:
    for name, source in FAKE_PACKAGE.items():
        (tmp_path / "pkg" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "pkg" / name).write_text(textwrap.dedent(source), encoding="utf-8")
    imports = package_imports(tmp_path / "pkg")
    # Not there: the TYPE_CHECKING imports (b -> c, c -> a), c importing itself, the
    # standard library, and the migration.
    assert {(i.importer, i.imported, i.lineno, i.names) for i in imports} == {
        ("pkg.a", "pkg.b", 5, ()),  # inside a function
        ("pkg.b", "pkg.d", 6, ()),  # the else of ``if TYPE_CHECKING``
        ("pkg.b", "pkg.a", 11, ()),  # relative, inside a method
        ("pkg.c", "pkg.sub.mod", 6, ("thing",)),  # relative, in a try
        ("pkg.c", "pkg", 10, ("__version__",)),
        ("pkg.c", "pkg._internal", 10, ()),  # a submodule, not a name
        ("pkg.d", "pkg.sub.mod", 1, ()),  # no edge to the parent pkg.sub
        ("pkg.sub", "pkg.sub.mod", 1, ("_helper", "VALUE")),  # relative, from an __init__
        ("pkg.sub.mod", "pkg.conf", 1, ()),  # two levels up
    }
    assert {i.where for i in imports if i.importer == "pkg.a"} == {"pkg/a.py:5"}
    assert [modules for modules, _ in import_cycles(imports)] == [["pkg.a", "pkg.b"]]
    assert [(i.importer, names) for i, names in private_name_imports(imports)] == [
        ("pkg.sub", ["_helper"])
    ]


@pytest.mark.parametrize(
    ("edges", "expected"),
    [
        ([("a", "b"), ("b", "c")], [["a"], ["b"], ["c"]]),
        ([("a", "b"), ("b", "a"), ("b", "c"), ("c", "d"), ("d", "c")], [["a", "b"], ["c", "d"]]),
        ([("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")], [["a", "b", "c"], ["d"]]),
    ],
)
def test_strongly_connected_components(
    edges: list[tuple[str, str]], expected: list[list[str]]
) -> None:
    assert strongly_connected(edges) == expected
