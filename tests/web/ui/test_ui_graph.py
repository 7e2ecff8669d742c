"""The dependency graph of the state page: which nodes and edges are drawn,
at which level, and the SVG it becomes (pure functions)."""

from __future__ import annotations

from twisted.web.template import flattenString

from kilolock.core.model import DependencyRow, ResourceRow
from kilolock.web.ui.graph import MAX_NODES, build_graph, draw, layers, module_of, resource_of


def row(address: str, module: str = "") -> ResourceRow:
    return ResourceRow(address=address, module=module, mode="managed", type="t", name="n",
                       provider="p", index_key=None, deposed=None, attributes="{}")


def test_instances_are_one_node_and_edges_point_to_dependents() -> None:
    """Instances of a resource are one node counted; an edge goes from what
    is depended on to what depends on it; an unknown target is drawn dashed."""
    graph = build_graph([row("a.x[0]"), row("a.x[1]"), row("b.y")],
                        [DependencyRow("b.y", "a.x"), DependencyRow("b.y", "data.c.z")])
    assert graph is not None and graph.level == "resource"
    assert {(node.name, node.count, node.known) for node in graph.nodes} == {
        ("a.x", 2, True), ("b.y", 1, True), ("data.c.z", 0, False)}
    assert graph.edges == (("a.x", "b.y"), ("data.c.z", "b.y"))
    assert [[node.name for node in column] for column in layers(graph)] == [
        ["a.x", "data.c.z"], ["b.y"]]


def test_a_cycle_is_drawn_without_looping() -> None:
    graph = build_graph([row("a.a"), row("b.b")],
                        [DependencyRow("a.a", "b.b"), DependencyRow("b.b", "a.a")])
    assert graph is not None
    assert sum(len(column) for column in layers(graph)) == 2


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
    assert resource_of('module.a["k"].t.n[3]') == 'module.a["k"].t.n'
    assert module_of('module.a["k"].module.b.t.n') == "module.a.module.b"
    assert module_of("t.n") == ""


def test_the_svg_has_a_labelled_node_per_resource() -> None:
    """The drawing: an SVG with a title, a group per node and a path per
    edge; names are escaped."""
    graph = build_graph([row("a.x"), row("b.<y>")], [DependencyRow("b.<y>", "a.x")])
    assert graph is not None
    result: list[bytes] = []
    flattenString(None, draw(graph, "Dependencies")).addCallback(result.append)
    svg = result[0]
    assert svg.startswith(b'<svg role="img"')
    assert svg.count(b'<g class="node"') == 2
    assert svg.count(b'class="edge"') == 1
    assert b"<y>" not in svg and b"b.&lt;y&gt;" in svg
