"""The rows of a version's resource and output tables (a state's page, a
version's page): addresses as links to each resource's page, providers and
types as Terraform writes them, sensitive outputs masked."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from twisted.web.template import Tag, tags

from kilolock.core.model import OutputRow, ResourceRow
from kilolock.web.ui import format
from kilolock.web.ui.params import resource_url
from kilolock.web.ui.values import masked, value_tag


def resource_rows(path: str, rows: Sequence[ResourceRow], version: int | None) -> list[Tag]:
    """A table row per resource instance of the state at C{path} (in
    C{version}, None: the current one)."""
    if not rows:
        return [tags.tr(tags.td("No resources.", colspan="5"))]
    # Attribute values are on each resource's page, masked there: a table
    # of thousands of rows names resources, it does not show them.
    # Few elements a row: a page shows hundreds of rows.
    return [tags.tr(tags.th(tags.a(row.address, href=resource_url(path, row.address, version),
                                   class_="address"),
                            scope="row", **{"data-label": "Address"}),
                    tags.td(row.type, class_="mono", **{"data-label": "Type"}),
                    tags.td(row.module, class_="mono", **{"data-label": "Module"})
                    if row.module else tags.td("(root)", class_="quiet",
                                               **{"data-label": "Module"}),
                    tags.td(format.provider(row.provider), **{"data-label": "Provider"}),
                    tags.td(f"deposed ({row.deposed})" if row.deposed else "current",
                            **{"data-label": "Object"}))
            for row in rows]


def output_rows(outputs: Sequence[OutputRow], secrets: frozenset[str]) -> list[Tag]:
    """A table row per output: its name, its type as Terraform writes it,
    its value (a sensitive output's is never read: the projection holds
    none)."""
    if not outputs:
        return [tags.tr(tags.td("No outputs.", colspan="3"))]
    rows = []
    for output in outputs:
        value: Any = (masked() if output.sensitive or output.value is None
                      else value_tag(json.loads(output.value), secrets))
        rows.append(tags.tr(tags.th(tags.code(output.name), scope="row"),
                            tags.td(tags.code(format.cty_type(output.type), class_="type")),
                            tags.td(value)))
    return rows
