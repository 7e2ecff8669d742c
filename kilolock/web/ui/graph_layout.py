"""Laying out and drawing a dependency graph (L{kilolock.web.ui.graph}) as
SVG on the server: no script, no layout library.  Deterministic (the same
graph is the same drawing) and linear enough for the L{MAX_NODES} a graph
has.

A layered (Sugiyama-style) layout:

  1. edges closing a cycle are turned round for the layout (drawn with
     their arrow at the start);
  2. each node goes one column right of the furthest node it depends on,
     then as far right as its nearest dependent allows (short edges);
  3. an edge spanning several columns passes each column between through a
     slot of its own (a dummy node), so it never crosses a box there;
  4. each column is ordered by the barycentres of its neighbours, sweeping
     down and up, keeping the order with the fewest crossings;
  5. each column's items are placed as close as their order and spacing
     allow to the centre of their neighbours (isotonic regression).

Every box of a column has the column's width, so an edge leaves a column
only from the right side of its own box and runs, between two columns, in
the gap between them: no edge's path crosses a box it does not connect.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import pairwise
from statistics import fmean

from attrs import frozen
from twisted.web.template import Tag

from kilolock.web.ui.graph import MAX_LABEL, Graph, Node

__all__ = ["Box", "Drawing", "Route", "draw", "label", "lay_out"]

_CHAR_WIDTH = 7.8
_BOX_HEIGHT = 26
_GAP_X = 72
_GAP_Y = 12
_SLOT_GAP = 8
_MARGIN = 12
_MIN_WIDTH = 60
_SWEEPS = 8
_PLACEMENTS = 6


@frozen
class Box:
    """Where a node is drawn."""

    node: Node
    x: float
    y: float
    width: float
    height: float


@frozen
class Route:
    """The path of one edge: from the right side of the box of what is
    depended on (or, for an edge turned round, of what depends on it)
    through its slots to the left side of the other box."""

    source: str
    target: str
    points: tuple[tuple[float, float], ...]
    #: Drawn against its direction (an edge closing a cycle).
    backwards: bool = False


@frozen
class Drawing:
    width: float
    height: float
    boxes: dict[str, Box]
    routes: tuple[Route, ...]


#: An item of a column: a node's name, or a slot (edge index, column).
_Item = str | tuple[int, int]


def label(node: Node) -> str:
    text = node.label if len(node.label) <= MAX_LABEL else node.label[:MAX_LABEL - 1] + "…"
    return f"{text} \u00d7{node.count}" if node.count > 1 else text


def _orient(graph: Graph) -> list[tuple[str, str, bool]]:
    """The edges with those closing a cycle turned round: (from, to,
    turned).  Depth first from each node in name order."""
    successors: dict[str, list[str]] = {node.name: [] for node in graph.nodes}
    for source, target in graph.edges:
        successors[source].append(target)
    state: dict[str, int] = {}  # 1: on the path, 2: done
    turned: set[tuple[str, str]] = set()
    for start in sorted(successors):
        if start in state:
            continue
        state[start] = 1
        stack = [(start, iter(sorted(successors[start])))]
        while stack:
            node, pending = stack[-1]
            following = next(pending, None)
            if following is None:
                state[node] = 2
                stack.pop()
            elif state.get(following) == 1:
                turned.add((node, following))
            elif following not in state:
                state[following] = 1
                stack.append((following, iter(sorted(successors[following]))))
    return [(target, source, True) if (source, target) in turned else (source, target, False)
            for source, target in graph.edges]


def _columns(names: Sequence[str], edges: Sequence[tuple[str, str, bool]]) -> dict[str, int]:
    """Each node's column: longest path from the nodes nothing points at,
    then moved right up to one column before its nearest successor; empty
    columns closed up."""
    predecessors: dict[str, list[str]] = {name: [] for name in names}
    successors: dict[str, list[str]] = {name: [] for name in names}
    for source, target, _ in edges:
        predecessors[target].append(source)
        successors[source].append(target)
    order: list[str] = []
    waiting = {name: len(predecessors[name]) for name in names}
    ready = sorted(name for name in names if waiting[name] == 0)
    while ready:
        name = ready.pop(0)
        order.append(name)
        for following in sorted(successors[name]):
            waiting[following] -= 1
            if waiting[following] == 0:
                ready.append(following)
        ready.sort()
    column: dict[str, int] = {}
    for name in order:
        column[name] = 1 + max((column[p] for p in predecessors[name]), default=-1)
    for name in reversed(order):
        if successors[name]:
            column[name] = max(column[name], min(column[s] for s in successors[name]) - 1)
    used = sorted(set(column.values()))
    renumbered = {old: new for new, old in enumerate(used)}
    return {name: renumbered[value] for name, value in column.items()}


def _crossings(upper: dict[_Item, int], lower: dict[_Item, int],
               links: Sequence[tuple[_Item, _Item]]) -> int:
    pairs = sorted((upper[a], lower[b]) for a, b in links)
    return sum(1 for i, (a1, b1) in enumerate(pairs) for a2, b2 in pairs[i + 1:]
               if a1 < a2 and b1 > b2)


def _order(columns: list[list[_Item]], links: list[list[tuple[_Item, _Item]]]) -> None:
    """Reorder each column (in place) by the barycentres of its neighbours,
    sweeping down and up; the order with the fewest crossings is kept."""

    def positions() -> list[dict[_Item, int]]:
        return [{item: index for index, item in enumerate(column)} for column in columns]

    def total() -> int:
        where = positions()
        return sum(_crossings(where[i], where[i + 1], links[i]) for i in range(len(links)))

    best, best_count = [list(column) for column in columns], total()
    for sweep in range(_SWEEPS):
        downward = sweep % 2 == 0
        steps = range(1, len(columns)) if downward else range(len(columns) - 2, -1, -1)
        for index in steps:
            where = positions()
            neighbours: dict[_Item, list[int]] = {}
            if downward:
                for above, below in links[index - 1]:
                    neighbours.setdefault(below, []).append(where[index - 1][above])
            else:
                for above, below in links[index]:
                    neighbours.setdefault(above, []).append(where[index + 1][below])
            current = where[index]
            columns[index].sort(key=lambda item: (
                fmean(neighbours[item]) if item in neighbours else current[item],
                current[item]))
        count = total()
        if count < best_count:
            best, best_count = [list(column) for column in columns], count
    columns[:] = best


def _isotonic(targets: list[float], gaps: list[float]) -> list[float]:
    """Positions as close as possible (least squares) to C{targets}, in
    order, each at least C{gaps[i]} below the one before (pool adjacent
    violators on the positions less their cumulative gaps)."""
    offsets = [0.0]
    for gap in gaps:
        offsets.append(offsets[-1] + gap)
    blocks: list[list[float]] = []  # [mean, weight]
    for target, offset in zip(targets, offsets, strict=True):
        blocks.append([target - offset, 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            mean, weight = blocks.pop()
            blocks[-1] = [(blocks[-1][0] * blocks[-1][1] + mean * weight)
                          / (blocks[-1][1] + weight), blocks[-1][1] + weight]
    values = [mean for mean, weight in blocks for _ in range(int(weight))]
    return [value + offset for value, offset in zip(values, offsets, strict=True)]


def lay_out(graph: Graph) -> Drawing:
    """Where each box and each edge of C{graph} goes."""
    nodes = {node.name: node for node in graph.nodes}
    names = sorted(nodes)
    edges = _orient(graph)
    column_of = _columns(names, edges)
    count = max(column_of.values(), default=-1) + 1
    columns: list[list[_Item]] = [[] for _ in range(count)]
    for name in names:
        columns[column_of[name]].append(name)
    chains: list[list[_Item]] = []
    for index, (source, target, _) in enumerate(edges):
        chain: list[_Item] = [source]
        for between in range(column_of[source] + 1, column_of[target]):
            slot = (index, between)
            columns[between].append(slot)
            chain.append(slot)
        chains.append([*chain, target])
    links: list[list[tuple[_Item, _Item]]] = [[] for _ in range(max(count - 1, 0))]
    column_of_item: dict[_Item, int] = {name: column for name, column in column_of.items()}
    for chain in chains:
        for item in chain[1:-1]:
            assert isinstance(item, tuple)
            column_of_item[item] = item[1]
        for above, below in pairwise(chain):
            links[column_of_item[above]].append((above, below))
    _order(columns, links)

    height = {item: (_BOX_HEIGHT if isinstance(item, str) else 0.0)
              for column in columns for item in column}

    def gap(above: _Item, below: _Item) -> float:
        if isinstance(above, str) and isinstance(below, str):
            return height[above] + _GAP_Y
        return height[above] + _SLOT_GAP

    centre: dict[_Item, float] = {}
    for column in columns:
        top = 0.0
        for index, item in enumerate(column):
            if index:
                top += gap(column[index - 1], item)
            centre[item] = top + height[item] / 2
    neighbours: dict[_Item, tuple[list[_Item], list[_Item]]] = {
        item: ([], []) for column in columns for item in column}
    for column_links in links:
        for above, below in column_links:
            neighbours[below][0].append(above)
            neighbours[above][1].append(below)
    for placement in range(_PLACEMENTS):
        side = placement % 2  # 0: towards the column before, 1: the column after
        for column in (columns if side == 0 else columns[::-1]):
            targets = [fmean(centre[n] for n in neighbours[item][side])
                       if neighbours[item][side] else centre[item] for item in column]
            tops = [target - height[item] / 2 for target, item in zip(targets, column,
                                                                       strict=True)]
            gaps = [gap(above, below) for above, below in pairwise(column)]
            for item, top in zip(column, _isotonic(tops, gaps), strict=True):
                centre[item] = top + height[item] / 2
    lowest = min((centre[item] - height[item] / 2 for item in centre), default=0.0)
    widths = [max([len(label(nodes[item])) * _CHAR_WIDTH + 20 for item in column
                   if isinstance(item, str)] + [_MIN_WIDTH]) for column in columns]
    lefts: list[float] = []
    x = float(_MARGIN)
    for width in widths:
        lefts.append(x)
        x += width + _GAP_X
    boxes: dict[str, Box] = {}
    for index, column in enumerate(columns):
        for item in column:
            if isinstance(item, str):
                boxes[item] = Box(nodes[item], lefts[index],
                                  round(centre[item] - height[item] / 2 - lowest + _MARGIN, 1),
                                  widths[index], _BOX_HEIGHT)

    def y_of(item: _Item) -> float:
        return round(centre[item] - lowest + _MARGIN, 1)

    ports = _ports(chains, boxes, y_of)
    routes = []
    for index, ((source, target, turned), chain) in enumerate(zip(edges, chains, strict=True)):
        start, end = boxes[source], boxes[target]
        points = [(start.x + start.width, ports[(index, "out")])]
        for item in chain[1:-1]:
            assert isinstance(item, tuple)
            left = lefts[item[1]]
            points += [(left, y_of(item)), (left + widths[item[1]], y_of(item))]
        points.append((end.x, ports[(index, "in")]))
        routes.append(Route(target if turned else source, source if turned else target,
                            tuple(points), turned))
    bottom = max((box.y + box.height for box in boxes.values()), default=0.0)
    slots = [y_of(item) for column in columns for item in column if not isinstance(item, str)]
    return Drawing(width=round(x - _GAP_X + _MARGIN, 1),
                   height=round(max([bottom, *slots]) + _MARGIN, 1),
                   boxes=boxes, routes=tuple(routes))


def _ports(chains: list[list[_Item]], boxes: dict[str, Box],
           y_of: Callable[[_Item], float]) -> dict[tuple[int, str], float]:
    """Where each edge leaves and enters its boxes: spread along the side,
    in the order of where the edge goes next (fewer crossings at the box)."""
    leaving: dict[str, list[tuple[float, int]]] = {}
    entering: dict[str, list[tuple[float, int]]] = {}
    for index, chain in enumerate(chains):
        source, target = chain[0], chain[-1]
        assert isinstance(source, str) and isinstance(target, str)
        following, previous = chain[1], chain[-2]
        leaving.setdefault(source, []).append((_centre_y(following, boxes, y_of), index))
        entering.setdefault(target, []).append((_centre_y(previous, boxes, y_of), index))
    ports: dict[tuple[int, str], float] = {}
    for side, found in (("out", leaving), ("in", entering)):
        for name, edges in found.items():
            box = boxes[name]
            for rank, (_, index) in enumerate(sorted(edges)):
                ports[(index, side)] = round(box.y + box.height * (rank + 1) / (len(edges) + 1),
                                             1)
    return ports


def _centre_y(item: _Item, boxes: dict[str, Box], y_of: Callable[[_Item], float]) -> float:
    if isinstance(item, str):
        return boxes[item].y + boxes[item].height / 2
    return y_of(item)


def path_data(points: Sequence[tuple[float, float]]) -> str:
    """The SVG path through C{points}: across a gap between columns a curve
    whose control points stay in the gap (so the curve does too), across a
    column (a slot) a straight line."""
    (x, y), *rest = points
    parts = [f"M{x:g},{y:g}"]
    for index, (next_x, next_y) in enumerate(rest):
        if index % 2 == 0:  # across a gap
            bend = (next_x - x) / 2
            parts.append(f"C{x + bend:g},{y:g} {next_x - bend:g},{next_y:g}"
                         f" {next_x:g},{next_y:g}")
        else:  # through a slot of a column
            parts.append(f"L{next_x:g},{next_y:g}")
        x, y = next_x, next_y
    return " ".join(parts)


def draw(graph: Graph, drawing: Drawing, title: str, described_by: str,
         href: Callable[[Node], str | None]) -> Tag:
    """The SVG of C{drawing}: a group named C{title} and described by the
    element C{described_by} (the graph as text); each box a link to
    C{href(node)} when it has one (so the keyboard reaches every node)."""
    svg = Tag("svg")(role="group", viewBox=f"0 0 {drawing.width:g} {drawing.height:g}",
                     width=f"{drawing.width:g}", height=f"{drawing.height:g}",
                     class_="graph", **{"aria-labelledby": "graph-title",
                                        "aria-describedby": described_by,
                                        "data-level": graph.level})
    svg(Tag("title")(title, id="graph-title"),
        Tag("defs")(Tag("marker")(Tag("path")(d="M0,0 L8,4 L0,8 z", class_="arrowhead"),
                                  id="arrow", markerWidth="8", markerHeight="8", refX="8",
                                  refY="4", orient="auto-start-reverse")))
    edges = Tag("g")(class_="edges", **{"aria-hidden": "true"})
    for route in drawing.routes:
        arrow = {"marker-start" if route.backwards else "marker-end": "url(#arrow)"}
        edges(Tag("path")(d=path_data(route.points), class_="edge",
                          **{"data-from": route.source, "data-to": route.target}, **arrow))
    svg(edges)
    for name in sorted(drawing.boxes):
        box = drawing.boxes[name]
        node = box.node
        link = href(node)
        count = f" ({node.count} instances)" if node.count > 1 else ""
        kind = "node" if node.known else "node external"
        group = (Tag("a")(href=link, class_=kind, **{"data-name": node.name})
                 if link is not None else
                 Tag("g")(class_=kind, **{"data-name": node.name}))
        group(Tag("title")(node.name + count),
              Tag("rect")(x=f"{box.x:g}", y=f"{box.y:g}", width=f"{box.width:g}",
                          height=f"{box.height:g}", rx="4"),
              Tag("text")(label(node), x=f"{box.x + 10:g}", y=f"{box.y + 17:g}"))
        svg(group)
    return svg
