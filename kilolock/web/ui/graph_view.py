"""The dependency graph section of a state's page: the drawing
(L{kilolock.web.ui.graph_layout}), what it shows, and the graph as text --
every node and every dependency, the ones the drawing leaves out as implied
included -- which the drawing names as its description."""

from __future__ import annotations

from typing import Any

from twisted.web.template import Tag, tags

from kilolock.web.ui.format import plural
from kilolock.web.ui.graph import Graph, Node
from kilolock.web.ui.graph_layout import draw, lay_out
from kilolock.web.ui.params import resource_url, state_url, with_query

#: The id of the graph's text alternative.
TEXT_ID = "graph-text"


def node_href(path: str, graph: Graph) -> Any:
    """Where a box leads: a resource's page, or the resources of a module."""

    def href(node: Node) -> str | None:
        if graph.level == "module":
            prefix = "" if node.name.startswith("(") else node.name + "."
            return with_query(state_url(path), {"address": prefix}) if prefix else None
        return resource_url(path, node.name)

    return href


def graph_section(graph: Graph, path: str) -> list[Any]:
    """The note, the drawing and the text alternative."""
    href = node_href(path, graph)
    drawn, implied = len(graph.edges), len(graph.all_edges) - len(graph.edges)
    what = "modules" if graph.level == "module" else "resources"
    note = [f"{plural(len(graph.nodes), what[:-1])}, "
            f"{plural(drawn, 'dependency', 'dependencies')} drawn"]
    if implied:
        note.append(f" ({implied} more implied by these and left out: Terraform records"
                    " every indirect dependency too; the text below lists them all)")
    note.append(". An arrow points from what is depended on to what depends on it.")
    if graph.level == "module":
        note.insert(0, "Drawn by module (too many resources to draw one by one): ")
    drawing = draw(graph, lay_out(graph), f"Dependency graph of {path}", TEXT_ID, href)
    return [tags.p(note, class_="note"),
            tags.div(drawing, class_="scroll graph-scroll"),
            text_alternative(graph, href)]


def text_alternative(graph: Graph, href: Any) -> Tag:
    """Each node with what it depends on: directly (drawn) and indirectly
    (the edges left out of the drawing)."""
    direct: dict[str, list[str]] = {}
    implied: dict[str, list[str]] = {}
    drawn = set(graph.edges)
    for source, target in graph.all_edges:
        (direct if (source, target) in drawn else implied).setdefault(target, []).append(source)
    for source, target in graph.edges:
        if (source, target) not in graph.all_edges:
            direct.setdefault(target, []).append(source)

    def name(node_name: str) -> Any:
        nodes = {node.name: node for node in graph.nodes}
        link = href(nodes[node_name]) if node_name in nodes else None
        code = tags.code(node_name)
        return tags.a(code, href=link) if link else code

    items = []
    for node in graph.nodes:
        parts: list[Any] = [name(node.name)]
        if node.count > 1:
            parts.append(f" ({node.count} instances)")
        elif not node.known:
            parts.append(" (not in this state's objects)")
        for label, found in (("depends on", direct), ("and, through those,", implied)):
            if found.get(node.name):
                parts.append(f" {label} ")
                for index, other in enumerate(sorted(found[node.name])):
                    parts += [", " if index else "", name(other)]
        if not direct.get(node.name):
            parts.append(" depends on nothing here")
        items.append(tags.li(parts))
    return tags.details(tags.summary("The graph as text: every node and what it depends on"),
                        tags.ul(items), class_="graph-text", id=TEXT_ID)
