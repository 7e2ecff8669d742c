"""Geometry of the dependency graph's SVG, read back from the markup the
server sends: the boxes (rects) and the edges (paths of M, L and C
commands), and the check that no edge passes through a box it does not
connect."""

from __future__ import annotations

import re
from xml.etree import ElementTree

from attrs import frozen

SVG = "{http://www.w3.org/2000/svg}"
_NUMBER = r"-?\d+(?:\.\d+)?(?:e-?\d+)?"
_COMMAND = re.compile(rf"([MLC])((?:\s*{_NUMBER},{_NUMBER})+)")
_PAIR = re.compile(rf"({_NUMBER}),({_NUMBER})")


@frozen
class Rect:
    name: str
    x: float
    y: float
    width: float
    height: float

    def contains(self, x: float, y: float, inset: float = 0.5) -> bool:
        """Whether (x, y) is inside, C{inset} away from every side."""
        return (self.x + inset < x < self.x + self.width - inset
                and self.y + inset < y < self.y + self.height - inset)


@frozen
class Edge:
    source: str
    target: str
    points: tuple[tuple[float, float], ...]  # sampled along the path


def _sample(d: str, steps: int = 40) -> list[tuple[float, float]]:
    """Points along an SVG path of M, L and C commands."""
    points: list[tuple[float, float]] = []
    here = (0.0, 0.0)
    for command, numbers in _COMMAND.findall(d):
        pairs = [(float(x), float(y)) for x, y in _PAIR.findall(numbers)]
        if command == "M":
            here = pairs[0]
            points.append(here)
        elif command == "L":
            for target in pairs:
                points += [(here[0] + (target[0] - here[0]) * t / steps,
                            here[1] + (target[1] - here[1]) * t / steps)
                           for t in range(1, steps + 1)]
                here = target
        else:
            for start in range(0, len(pairs), 3):
                c1, c2, end = pairs[start:start + 3]
                for step in range(1, steps + 1):
                    t = step / steps
                    u = 1 - t
                    points.append((u**3 * here[0] + 3 * u**2 * t * c1[0] + 3 * u * t**2 * c2[0]
                                   + t**3 * end[0],
                                   u**3 * here[1] + 3 * u**2 * t * c1[1] + 3 * u * t**2 * c2[1]
                                   + t**3 * end[1]))
                here = end
    return points


def read_svg(markup: bytes | str) -> tuple[list[Rect], list[Edge]]:
    """The boxes (by node name) and the edges of a graph's SVG."""
    root = ElementTree.fromstring(markup)
    rects = []
    for node in root.iter():
        name = node.get("data-name")
        if name is None:
            continue
        rect = node.find(f"{SVG}rect")
        if rect is None:
            rect = node.find("rect")
        assert rect is not None, name
        rects.append(Rect(name, float(rect.get("x", 0)), float(rect.get("y", 0)),
                          float(rect.get("width", 0)), float(rect.get("height", 0))))
    edges = [Edge(path.get("data-from", ""), path.get("data-to", ""),
                  tuple(_sample(path.get("d", ""))))
             for path in root.iter() if path.get("class") == "edge"]
    return rects, edges


def crossings(rects: list[Rect], edges: list[Edge]) -> list[tuple[str, str, str]]:
    """(edge source, edge target, box) for every box an edge's path enters
    though the edge does not connect it."""
    found = []
    for edge in edges:
        for rect in rects:
            if rect.name in (edge.source, edge.target):
                continue
            if any(rect.contains(x, y) for x, y in edge.points):
                found.append((edge.source, edge.target, rect.name))
    return found


def overlapping_boxes(rects: list[Rect]) -> list[tuple[str, str]]:
    """Pairs of boxes that overlap."""
    return [(a.name, b.name) for index, a in enumerate(rects) for b in rects[index + 1:]
            if a.x < b.x + b.width and b.x < a.x + a.width
            and a.y < b.y + b.height and b.y < a.y + a.height]
