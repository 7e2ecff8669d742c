"""A state's dependency graph: what is drawn, from the projected
C{resource_dependencies} (L{kilolock.web.ui.graph_layout} lays it out and
draws it as SVG).

The nodes are resources as the configuration names them (the instances of
one resource, in every instance of its modules, are one node, with their
count: the level at which Terraform records dependencies); an edge points
from what is depended on to what depends on it.  Terraform stores
dependencies transitively (in a chain C{a -> b -> c} the state says C{c}
depends on C{a} too), so the edges drawn are the transitive
reduction: an edge is left out when a longer path already leads from its
start to its end.  The full list stays in L{Graph.all_edges} (the page's text
alternative lists it).  A graph of more than L{MAX_NODES} resources is drawn
by module instead (one node per module, the resources it holds counted);
with more than L{MAX_NODES} modules too, nothing is drawn and the page shows
the dependency list alone.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from attrs import frozen

from kilolock.core.model import DependencyRow, ResourceRow
from kilolock.tfstate.address import MAX_ADDRESS_LENGTH

#: The most nodes drawn.
MAX_NODES = 80
#: The longest label drawn (the whole name is in the node's tooltip).
MAX_LABEL = 44
_NUMBER_KEY = re.compile(r"\[[0-9]*\]")

#: What the root module is called in a graph drawn by module.
ROOT_MODULE = "(root module)"

__all__ = ["MAX_LABEL", "MAX_NODES", "Graph", "Node", "build_graph", "config_address",
           "module_of", "resource_of", "transitive_reduction"]


@frozen
class Node:
    """A box: a resource (or a module), how many instances it holds (0: a
    resource only depended on, with no object of its own), and whether the
    state holds it."""

    name: str
    label: str
    count: int
    known: bool = True


@frozen
class Graph:
    """What is drawn: C{level} is C{"resource"} or C{"module"}; C{edges}
    the transitive reduction of C{all_edges} (each a pair: what is depended
    on, what depends on it), both sorted."""

    level: str
    nodes: tuple[Node, ...]
    edges: tuple[tuple[str, str], ...]
    all_edges: tuple[tuple[str, str], ...] = ()


def resource_of(address: str) -> str:
    """The resource address of an instance address: C{a.b[0]} → C{a.b},
    C{module.m["x"].a.b["k]"]} → C{module.m["x"].a.b} (a trailing instance
    key is cut, whatever its quoted text holds)."""
    if not address.endswith("]"):
        return address
    position = len(address) - 2
    if address[position] == '"':  # a quoted key: find its opening quote
        position -= 1
        while position >= 0:
            if address[position] == '"':
                backslashes = 0
                while position - 1 - backslashes >= 0 and \
                        address[position - 1 - backslashes] == "\\":
                    backslashes += 1
                if backslashes % 2 == 0:
                    break
            position -= 1
        position -= 1
    else:
        while position >= 0 and address[position].isdigit():
            position -= 1
    if position >= 0 and address[position] == "[":
        return address[:position]
    return address


def config_address(address: str) -> str:
    """An instance address without any instance key, its modules' included:
    C{module.m["a"].t.n[0]} → C{module.m.t.n}, the resource as the
    configuration names it (and as Terraform records dependencies)."""
    if "[" not in address:
        return address
    if '"' not in address:  # keys are numbers only: one pass
        return _NUMBER_KEY.sub("", address)
    out: list[str] = []
    position = 0
    while position < len(address):
        char = address[position]
        if char != "[":
            out.append(char)
            position += 1
            continue
        position += 1
        if address.startswith('"', position):
            position += 1
            while position < len(address) and address[position] != '"':
                position += 2 if address[position] == "\\" else 1
            position += 1
        while position < len(address) and address[position] != "]":
            position += 1
        position += 1
    return "".join(out)


def module_of(address: str) -> str:
    """The module path of a resource address, instance keys left out
    (C{module.a["k"].module.b.t.n} → C{module.a.module.b}; C{""}: the root
    module)."""
    names: list[str] = []
    position = 0
    while address.startswith("module.", position):
        start = position + len("module.")
        end = start
        while end < len(address) and (address[end].isalnum() or address[end] in "_-"):
            end += 1
        if end == start:
            break
        names.append("module." + address[start:end])
        position = end
        if address.startswith("[", position):  # an instance key of the module
            if address.startswith('["', position):
                position += 2
                while position < len(address) and address[position] != '"':
                    position += 2 if address[position] == "\\" else 1
                position += 2  # the closing quote and bracket
            else:
                closing = address.find("]", position)
                if closing < 0:
                    break
                position = closing + 1
        if not address.startswith(".", position):
            break
        position += 1
    return ".".join(names)


def transitive_reduction(nodes: Iterable[str],
                         edges: Iterable[tuple[str, str]]) -> set[tuple[str, str]]:
    """The edges of C{edges} that no longer path replaces: C{(a, c)} goes
    when C{c} can be reached from C{a} through another node.  Every edge
    from a node on a cycle is kept."""
    successors: dict[str, set[str]] = {node: set() for node in nodes}
    for source, target in edges:
        successors.setdefault(source, set()).add(target)
        successors.setdefault(target, set())
    reach: dict[str, frozenset[str]] = {}

    def reachable(start: str) -> frozenset[str]:
        """Every node reachable from C{start} in one step or more."""
        if start not in reach:
            seen: set[str] = set()
            pending = list(successors[start])
            while pending:
                node = pending.pop()
                if node not in seen:
                    seen.add(node)
                    pending.extend(successors[node])
            reach[start] = frozenset(seen)
        return reach[start]

    kept = set()
    for source, targets in successors.items():
        # From a node on a cycle, a path through another successor may come
        # back through the node itself and use the very edge in question:
        # its edges all stay.  From any other node, none can.
        on_cycle = source in reachable(source)
        for target in targets:
            if on_cycle or not any(target in reachable(middle)
                                   for middle in targets if middle != target):
                kept.add((source, target))
    return kept


def build_graph(resources: Iterable[ResourceRow],
                dependencies: Iterable[DependencyRow]) -> Graph | None:
    """The graph to draw, or None when it is too large even by module."""
    counts: dict[str, int] = {}
    names: dict[str, str] = {}
    for row in resources:
        name = config_address(row.address)
        names[row.address] = name
        if row.deposed is None:
            counts[name] = counts.get(name, 0) + 1
        else:
            counts.setdefault(name, 0)
    edges = {(row.depends_on[:MAX_ADDRESS_LENGTH],
              names.get(row.address) or config_address(row.address)) for row in dependencies}
    edges = {(source, target) for source, target in edges if source != target}
    # An end of an edge may have no current object of its own (a resource
    # only depended on, or whose only object is deposed): a node still.
    ends = {name for edge in edges for name in edge}
    if len(counts.keys() | ends) <= MAX_NODES:
        nodes = [Node(name, name, count) for name, count in sorted(counts.items())]
        nodes += [Node(name, name, 0, known=False) for name in sorted(ends - set(counts))]
        return Graph("resource", tuple(nodes),
                     tuple(sorted(transitive_reduction(counts.keys() | ends, edges))),
                     tuple(sorted(edges)))
    modules: dict[str, int] = {}
    for name, count in counts.items():
        module = module_of(name) or ROOT_MODULE
        modules[module] = modules.get(module, 0) + count
    if len(modules) > MAX_NODES:
        return None
    module_edges = {(module_of(source) or ROOT_MODULE, module_of(target) or ROOT_MODULE)
                    for source, target in edges}
    module_edges = {(source, target) for source, target in module_edges
                    if source != target and source in modules and target in modules}
    return Graph("module", tuple(Node(name, name, count)
                                 for name, count in sorted(modules.items())),
                 tuple(sorted(transitive_reduction(modules, module_edges))),
                 tuple(sorted(module_edges)))
