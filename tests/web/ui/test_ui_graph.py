"""The dependency graph of the state page: which nodes and edges are drawn
(the transitive reduction of what Terraform stores), at which level, the
layout (no edge through a box it does not connect, no box on another), and
the SVG it becomes with its text alternative."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.web.template import flattenString

from kilolock.core.model import DependencyRow, ResourceRow
from kilolock.web.ui.graph import (
    MAX_NODES,
    Graph,
    Node,
    build_graph,
    module_of,
    resource_of,
    transitive_reduction,
)
from kilolock.web.ui.graph_layout import draw, lay_out
from kilolock.web.ui.graph_view import graph_section
from tests.support.svg_geometry import crossings, overlapping_boxes, read_svg


def row(address: str, module: str = "") -> ResourceRow:
    return ResourceRow(address=address, module=module, mode="managed", type="t", name="n",
                       provider="p", index_key=None, deposed=None, attributes="{}")


def flat(tag: object) -> bytes:
    result: list[bytes] = []
    flattenString(None, tag).addCallback(result.append)
    return result[0]


def svg_of(graph: Graph) -> bytes:
    return flat(draw(graph, lay_out(graph), "Dependencies", "graph-text", lambda node: None))


def test_instances_are_one_node_and_edges_point_to_dependents() -> None:
    """Instances of a resource are one node counted; an edge goes from what
    is depended on to what depends on it; an unknown target is drawn dashed."""
    graph = build_graph([row("a.x[0]"), row("a.x[1]"), row("b.y")],
                        [DependencyRow("b.y", "a.x"), DependencyRow("b.y", "data.c.z")])
    assert graph is not None and graph.level == "resource"
    assert {(node.name, node.count, node.known) for node in graph.nodes} == {
        ("a.x", 2, True), ("b.y", 1, True), ("data.c.z", 0, False)}
    assert graph.edges == (("a.x", "b.y"), ("data.c.z", "b.y"))


def test_the_edges_drawn_are_the_transitive_reduction() -> None:
    """A chain a -> b -> c -> d stored as Terraform stores it (every
    indirect dependency too) is drawn as its three links; the full list is
    kept for the text alternative."""
    resources = [row(name) for name in ("t.a", "t.b", "t.c", "t.d")]
    stored = [DependencyRow("t.b", "t.a"), DependencyRow("t.c", "t.b"),
              DependencyRow("t.c", "t.a"), DependencyRow("t.d", "t.c"),
              DependencyRow("t.d", "t.b"), DependencyRow("t.d", "t.a")]
    graph = build_graph(resources, stored)
    assert graph is not None
    assert graph.edges == (("t.a", "t.b"), ("t.b", "t.c"), ("t.c", "t.d"))
    assert len(graph.all_edges) == 6


def test_the_reported_drawing_keeps_every_edge_off_other_boxes() -> None:
    """The state of the report: `vault -> final` ran under the `item x3`
    box (reading as `vault -> item`) and `base -> final` hid behind it.
    Now `base -> final` is implied (left out), and `vault -> final` passes
    the column of `item` through a slot of its own."""
    resources = [row("t.base"), row("t.vault"), row("t.item[0]"), row("t.item[1]"),
                 row("t.item[2]"), row("t.final")]
    stored = [DependencyRow(f"t.item[{i}]", "t.base") for i in range(3)] + [
        DependencyRow("t.final", "t.item"), DependencyRow("t.final", "t.base"),
        DependencyRow("t.final", "t.vault")]
    graph = build_graph(resources, stored)
    assert graph is not None
    assert graph.edges == (("t.base", "t.item"), ("t.item", "t.final"), ("t.vault", "t.final"))
    rects, edges = read_svg(svg_of(graph))
    assert crossings(rects, edges) == []
    assert overlapping_boxes(rects) == []
    assert {(edge.source, edge.target) for edge in edges} == set(graph.edges)


def test_a_cycle_is_drawn_without_looping() -> None:
    """Two resources naming each other: both drawn, both edges drawn (one
    turned round for the layout, its arrow at its start), nothing crossed."""
    graph = build_graph([row("a.a"), row("b.b")],
                        [DependencyRow("a.a", "b.b"), DependencyRow("b.b", "a.a")])
    assert graph is not None and len(graph.edges) == 2
    drawing = lay_out(graph)
    assert len(drawing.boxes) == 2 and sum(route.backwards for route in drawing.routes) == 1
    svg = svg_of(graph)
    assert svg.count(b"marker-start") == 1 and svg.count(b"marker-end") == 1


def test_large_graphs_are_drawn_by_module_then_not_at_all() -> None:
    """Over MAX_NODES resources: one node per module with its count; over
    MAX_NODES modules: nothing (the page lists the dependencies)."""
    many = [row(f"module.m{index % 3}.t.r{index}", f"module.m{index % 3}")
            for index in range(MAX_NODES + 1)]
    deps = [DependencyRow("module.m1.t.r1", "module.m0.t.r0")]
    graph = build_graph(many, deps)
    assert graph is not None and graph.level == "module"
    assert sorted(node.name for node in graph.nodes) == ["module.m0", "module.m1", "module.m2"]
    assert graph.edges == (("module.m0", "module.m1"),)
    modules = [row(f"module.m{index}.t.r", f"module.m{index}") for index in range(MAX_NODES + 1)]
    assert build_graph(modules, []) is None


def test_addresses_name_their_resource_and_module() -> None:
    """Instance keys are cut whatever their quoted text holds (brackets,
    escaped quotes); module keys are left out of the module path."""
    assert resource_of('module.a["k"].t.n[3]') == 'module.a["k"].t.n'
    assert resource_of('t.n["a]b"]') == "t.n"
    assert resource_of('t.n["say \\"hi\\" ]"]') == "t.n"
    assert resource_of("t.n") == "t.n"
    assert module_of('module.a["k"].module.b.t.n') == "module.a.module.b"
    assert module_of('module.a["x.y]"].t.n') == "module.a"
    assert module_of("t.n") == ""


def test_the_svg_names_its_nodes_and_escapes_them() -> None:
    """The drawing: a group labelled by its title and described by the
    text alternative, a box per node (a link when it has a page), a path
    per edge hidden from assistive technology; names are escaped."""
    graph = build_graph([row("a.x"), row("b.<y>")], [DependencyRow("b.<y>", "a.x")])
    assert graph is not None
    svg = flat(draw(graph, lay_out(graph), "Dependencies", "graph-text",
                    lambda node: f"/ui/r?{node.name}"))
    assert svg.startswith(b'<svg role="group"')
    assert b'aria-describedby="graph-text"' in svg
    assert svg.count(b'<a href="/ui/r?') == 2
    assert svg.count(b'class="edge"') == 1
    assert b'<g class="edges" aria-hidden="true">' in svg
    assert b"<y>" not in svg and b"b.&lt;y&gt;" in svg


def test_the_text_alternative_lists_every_node_and_dependency() -> None:
    """Under the drawing: each node with what it depends on directly and,
    through those, indirectly (the edges the drawing leaves out)."""
    resources = [row(name) for name in ("t.a", "t.b", "t.c")]
    graph = build_graph(resources, [DependencyRow("t.b", "t.a"), DependencyRow("t.c", "t.b"),
                                    DependencyRow("t.c", "t.a")])
    assert graph is not None
    page = flat(graph_section(graph, "app")).decode()
    text = page[page.index('id="graph-text"'):]
    assert "3 resources, 2 dependencies drawn (1 more implied" in page
    assert "<code>t.c</code></a> depends on <a" in text
    assert "and, through those, <a href=\"/ui/states/app/-/resource?address=t.a\">" in text
    assert "<code>t.a</code></a> depends on nothing here" in text


@st.composite
def dags(draw_: st.DrawFn) -> Graph:
    """Graphs of up to 40 nodes whose edges go from a lower-numbered node
    to a higher one (no cycle), with labels of any length."""
    count = draw_(st.integers(1, 40))
    names = [f"t.{draw_(st.text('abcdefghij_', min_size=1, max_size=40))}{index}"
             for index in range(count)]
    pairs = draw_(st.lists(st.tuples(st.integers(0, count - 1), st.integers(0, count - 1)),
                           max_size=120))
    edges = {(names[a], names[b]) for a, b in pairs if a < b}
    kept = transitive_reduction(names, edges)
    return Graph("resource", tuple(Node(name, name, 1) for name in names),
                 tuple(sorted(kept)), tuple(sorted(edges)))


@settings(max_examples=60, deadline=None)
@given(dags())
def test_no_edge_ever_crosses_a_box_it_does_not_connect(graph: Graph) -> None:
    """For any graph: every drawn edge is a path from its source's box to
    its target's, entering no other box; no two boxes overlap; the same
    graph is the same drawing."""
    svg = svg_of(graph)
    rects, edges = read_svg(svg)
    assert crossings(rects, edges) == []
    assert overlapping_boxes(rects) == []
    assert {(edge.source, edge.target) for edge in edges} == set(graph.edges)
    assert svg == svg_of(graph)


@settings(max_examples=60, deadline=None)
@given(dags())
def test_the_reduction_keeps_every_dependency_reachable(graph: Graph) -> None:
    """Every stored dependency is still implied by the edges drawn (a path
    of them), and no drawn edge is implied by the others."""
    successors: dict[str, set[str]] = {}
    for source, target in graph.edges:
        successors.setdefault(source, set()).add(target)

    def reaches(start: str, goal: str, skip: tuple[str, str] | None = None) -> bool:
        pending, seen = [start], set()
        while pending:
            node = pending.pop()
            for following in successors.get(node, ()):
                if (node, following) == skip or following in seen:
                    continue
                if following == goal:
                    return True
                seen.add(following)
                pending.append(following)
        return False

    for source, target in graph.all_edges:
        assert reaches(source, target)
    for edge in graph.edges:
        assert not reaches(*edge, skip=edge)
