"""The house rules of the source tree, checked on every run: the resource
tree renders C{render_LOCK}/C{render_UNLOCK} itself, modules stay small, and
no module of C{kilolock/} imports itself back (function-level imports count;
imports under C{if TYPE_CHECKING:} do not run and do not count)."""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.paths import REPO

PACKAGE = REPO / "kilolock"

#: The size a module should stay under, and the one it must.
SOFT_LINES = 500
HARD_LINES = 600


def modules() -> dict[str, Path]:
    """Every module of the package by dotted name (packages by their name)."""
    found: dict[str, Path] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _type_checking_blocks(tree: ast.Module) -> set[int]:
    """The ids of the statements guarded by C{if TYPE_CHECKING:}."""
    guarded: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and (
                (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
                or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING")):
            for inner in node.body:
                guarded.update(id(each) for each in ast.walk(inner))
    return guarded


def imported_names(path: Path, name: str) -> Iterator[str]:
    """Every dotted name the module at C{path} imports at run time, wherever
    the import stands (module level, in a function, in a class)."""
    tree = ast.parse(path.read_text(), str(path))
    guarded = _type_checking_blocks(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if id(node) in guarded:
            continue
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def import_graph() -> dict[str, set[str]]:
    """Module → the package modules it makes Python import (a submodule's
    import runs its parent packages too)."""
    known = modules()
    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        for target in imported_names(path, name):
            parts = target.split(".")
            for end in range(1, len(parts) + 1):
                candidate = ".".join(parts[:end])
                if candidate in known and candidate != name:
                    graph[name].add(candidate)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in sorted(graph[node]):
            if successor not in index:
                visit(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component: list[str] = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_in_the_package() -> None:
    """No module of kilolock imports, directly or through others, a module
    that imports it back."""
    assert cycles(import_graph()) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    """The checker itself: a two-module loop and a three-module loop are
    found, a chain is not."""
    assert cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_function_level_and_relative_imports_are_read(tmp_path: Path) -> None:
    """An import inside a function counts; one under TYPE_CHECKING does not."""
    source = tmp_path / "mod.py"
    source.write_text("from typing import TYPE_CHECKING\n"
                      "if TYPE_CHECKING:\n    import kilolock.hidden\n"
                      "def f():\n    from kilolock.web import paths\n"
                      "    from . import sibling\n")
    names = set(imported_names(source, "kilolock.store.mod"))
    assert {"kilolock.web", "kilolock.web.paths", "kilolock.store",
            "kilolock.store.sibling"} <= names
    assert "kilolock.hidden" not in names


@pytest.mark.parametrize("name", sorted(modules()))
def test_modules_stay_small(name: str) -> None:
    """No module over the hard limit of lines (one concept per module)."""
    lines = len(modules()[name].read_text().splitlines())
    assert lines <= HARD_LINES, f"{name} has {lines} lines (soft limit {SOFT_LINES})"


def _method_names() -> Iterator[tuple[str, str, str]]:
    """(module, class, method) for every method of every class in the package."""
    for name, path in modules().items():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                        yield name, node.name, item.name


def test_the_resource_tree_renders_lock_and_unlock_itself() -> None:
    """The design card's words hold: render_LOCK and render_UNLOCK stand next
    to render_GET in the web package, and no do_METHOD handler is left."""
    methods = {method for module, _, method in _method_names() if module.startswith(
        "kilolock.web")}
    assert {"render_GET", "render_POST", "render_PUT", "render_DELETE", "render_LOCK",
            "render_UNLOCK"} <= methods
    assert sorted(f"{module}.{cls}.{method}" for module, cls, method in _method_names()
                  if method.startswith("do_") and method[3:].isupper()) == []


#: The resources of kilolock/web that define C{render}, and why.  An error
#: page has no method to dispatch: it answers every method with its one error,
#: as twisted.web's own error pages do.
RENDER_DEFINED_BY = {"kilolock.web.resource.ErrorPage"}


def _subclasses(cls: type) -> Iterator[type]:
    for subclass in cls.__subclasses__():
        yield subclass
        yield from _subclasses(subclass)


def test_no_resource_dispatches_methods_itself() -> None:
    """twisted.web's Resource.render dispatches every method to render_<METHOD>
    (its allowedMethods, its UnsupportedMethod): no resource under
    kilolock/web defines render, the error page aside."""
    from twisted.web.resource import Resource

    for name in modules():
        if name.startswith("kilolock.web"):
            importlib.import_module(name)
    defining = {f"{cls.__module__}.{cls.__qualname__}" for cls in _subclasses(Resource)
                if cls.__module__.startswith("kilolock.web") and "render" in vars(cls)}
    assert defining == RENDER_DEFINED_BY
