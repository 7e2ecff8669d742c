"""A state's dependency graph as SVG, drawn on the server from the projected
C{resource_dependencies}: no script, no layout library.

The nodes are resources (instances of one resource are one node, with their
count); an edge points from what is depended on to what depends on it.  The
layout is layered: a node stands one column right of the furthest thing it
depends on, and each column is sorted by name.  A graph of more than
L{MAX_NODES} resources is drawn by module instead (one node per module, the
resources it holds counted); with more than L{MAX_NODES} modules too,
nothing is drawn and the page shows the dependency list alone.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from attrs import frozen
from twisted.web.template import Tag

from kilolock.core.model import DependencyRow, ResourceRow

#: The most nodes drawn.
MAX_NODES = 80
#: The longest label drawn (the whole name is in the node's tooltip).
MAX_LABEL = 44

_INDEX = re.compile(r"\[[^\[\]]*\]$")
_MODULE_STEP = re.compile(r'module\.([A-Za-z0-9_-]+)(?:\[(?:"(?:[^"\\]|\\.)*"|\d+)\])?\.')
_CHAR_WIDTH = 7.2
_ROW = 34
_BOX_HEIGHT = 24
_GAP = 64
_MARGIN = 12


@frozen
class Node:
    name: str
    label: str
    count: int
    known: bool = True


@frozen
class Graph:
    """What is drawn: C{level} is C{"resource"} or C{"module"}."""

    level: str
    nodes: tuple[Node, ...]
    edges: tuple[tuple[str, str], ...]


def resource_of(address: str) -> str:
    """The resource address of an instance address: C{a.b[0]} → C{a.b}."""
    return _INDEX.sub("", address)


def module_of(address: str) -> str:
    """The module path of a resource address, instance keys left out
    (C{module.a["k"].module.b.t.n} → C{module.a.module.b}; C{""}: the root
    module)."""
    names = []
    position = 0
    while (found := _MODULE_STEP.match(address, position)) is not None:
        names.append(f"module.{found.group(1)}")
        position = found.end()
    return ".".join(names)


def build_graph(resources: Iterable[ResourceRow],
                dependencies: Iterable[DependencyRow]) -> Graph | None:
    """The graph to draw, or None when it is too large even by module."""
    counts: dict[str, int] = {}
    for row in resources:
        if row.deposed is None:
            name = resource_of(row.address)
            counts[name] = counts.get(name, 0) + 1
    edges = {(row.depends_on, resource_of(row.address)) for row in dependencies}
    edges = {(source, target) for source, target in edges if source != target}
    # An end of an edge may have no current object of its own (a resource
    # only depended on, or whose only object is deposed): a node still.
    ends = {name for edge in edges for name in edge}
    if len(counts.keys() | ends) <= MAX_NODES:
        nodes = [Node(name, name, count) for name, count in counts.items()]
        nodes += [Node(name, name, 0, known=False) for name in sorted(ends - set(counts))]
        return Graph("resource", tuple(nodes), tuple(sorted(edges)))
    modules: dict[str, int] = {}
    for name, count in counts.items():
        module = module_of(name) or "(root module)"
        modules[module] = modules.get(module, 0) + count
    if len(modules) > MAX_NODES:
        return None
    module_edges = {(module_of(source) or "(root module)", module_of(target) or "(root module)")
                    for source, target in edges}
    module_edges = {(source, target) for source, target in module_edges
                    if source != target and source in modules and target in modules}
    return Graph("module", tuple(Node(name, name, count) for name, count in modules.items()),
                 tuple(sorted(module_edges)))


def layers(graph: Graph) -> list[list[Node]]:
    """The columns: each node one right of the furthest node it depends on
    (an edge closing a cycle is not followed)."""
    depends_on: dict[str, list[str]] = {node.name: [] for node in graph.nodes}
    for source, target in graph.edges:
        depends_on[target].append(source)
    depth: dict[str, int] = {}

    def visit(name: str, path: frozenset[str]) -> int:
        if name in depth:
            return depth[name]
        below = [visit(source, path | {name}) for source in depends_on[name]
                 if source not in path]
        depth[name] = 1 + max(below) if below else 0
        return depth[name]

    for node in graph.nodes:
        visit(node.name, frozenset())
    columns: list[list[Node]] = [[] for _ in range(max(depth.values(), default=-1) + 1)]
    for node in sorted(graph.nodes, key=lambda node: node.name):
        columns[depth[node.name]].append(node)
    return columns


def _label(node: Node) -> str:
    label = node.label if len(node.label) <= MAX_LABEL else node.label[:MAX_LABEL - 1] + "…"
    return f"{label} \u00d7{node.count}" if node.count > 1 else label


def draw(graph: Graph, title: str) -> Tag:
    """The SVG of C{graph}, labelled C{title} for assistive technology."""
    columns = layers(graph)
    width = int(max((len(_label(node)) for node in graph.nodes), default=4) * _CHAR_WIDTH) + 20
    where: dict[str, tuple[int, int]] = {}
    for column, nodes in enumerate(columns):
        for row, node in enumerate(nodes):
            where[node.name] = (_MARGIN + column * (width + _GAP), _MARGIN + row * _ROW)
    total_width = _MARGIN * 2 + max(len(columns), 1) * (width + _GAP) - _GAP
    total_height = _MARGIN * 2 + max((len(nodes) for nodes in columns), default=1) * _ROW
    svg = Tag("svg")(role="img", viewBox=f"0 0 {total_width} {total_height}",
                     width=str(total_width), height=str(total_height),
                     class_="graph", **{"aria-labelledby": "graph-title",
                                        "data-level": graph.level})
    svg(Tag("title")(title, id="graph-title"),
        Tag("defs")(Tag("marker")(Tag("path")(d="M0,0 L8,4 L0,8 z", class_="arrowhead"),
                                  id="arrow", markerWidth="8", markerHeight="8", refX="8",
                                  refY="4", orient="auto")))
    for source, target in graph.edges:
        (x1, y1), (x2, y2) = where[source], where[target]
        start_x, start_y = x1 + width, y1 + _BOX_HEIGHT // 2
        end_x, end_y = x2, y2 + _BOX_HEIGHT // 2
        bend = max(20, (end_x - start_x) // 2)
        svg(Tag("path")(d=f"M{start_x},{start_y} C{start_x + bend},{start_y}"
                          f" {end_x - bend},{end_y} {end_x},{end_y}",
                        class_="edge", **{"marker-end": "url(#arrow)"}))
    for node in graph.nodes:
        x, y = where[node.name]
        group = Tag("g")(class_="node" if node.known else "node external",
                         **{"data-name": node.name})
        count = f" ({node.count} instances)" if node.count > 1 else ""
        group(Tag("title")(node.name + count),
              Tag("rect")(x=str(x), y=str(y), width=str(width), height=str(_BOX_HEIGHT),
                          rx="4"),
              Tag("text")(_label(node), x=str(x + 8), y=str(y + 16)))
        svg(group)
    return svg
