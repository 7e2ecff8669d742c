"""How a page shows a value of a state (an attribute, an output): as
Terraform writes it (strings quoted, numbers and booleans bare, collections
as JSON), masked where it is sensitive -- a path the state marks sensitive
(redacted to L{REDACTED} by the projection), or any value holding a value
marked sensitive elsewhere in the state (L{kilolock.web.ui.secrets}).
Masked values are never sent."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from twisted.web.template import Tag, tags

from kilolock.tfstate.diff import format_path
from kilolock.tfstate.redaction import REDACTED
from kilolock.web.ui.secrets import shows_secret

#: Rows an object's attributes are flattened into at most (the rest is one
#: row holding the remainder as JSON).
MAX_ROWS = 400
#: How deep objects are flattened into paths; deeper ones are shown whole.
MAX_DEPTH = 6


#: Characters that change how the text around them is shown -- bidirectional
#: overrides, embeddings and isolates, marks, zero-width ones -- which a page
#: shows as their escapes, so that a value reads as what it holds.
_INVISIBLE = re.compile("[\u061c\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")


def visible(text: str) -> str:
    """C{text} with the characters of L{_INVISIBLE} as C{\\uXXXX}."""
    return _INVISIBLE.sub(lambda found: f"\\u{ord(found.group()):04x}", text)


def masked(what: str = "(sensitive)") -> Tag:
    return tags.span(what, class_="masked")


def _is_wrapper(node: Any) -> bool:
    return isinstance(node, dict) and set(node) == {"value", "type"}


def value_tag(value: Any, secrets: frozenset[str]) -> Any:
    """One value, shown (or masked, whole, when any part of it is)."""
    if value == REDACTED:
        return masked()
    if isinstance(value, dict | list):
        text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)
        if f'"{REDACTED}"' in text or shows_secret(text, secrets):
            return masked()
        return tags.pre(visible(text), class_="value")
    if shows_secret(value if isinstance(value, str) else json.dumps(value), secrets):
        return masked()
    return tags.code(visible(json.dumps(value, ensure_ascii=False)), class_="value")


def flatten(value: Any, path: tuple[str | int, ...] = (),
            depth: int = 0) -> Iterator[tuple[str, Any]]:
    """(path, leaf) pairs of an attribute tree: objects by key, lists of
    objects by position, anything else (scalars, lists of scalars, empty
    collections, what lies deeper than L{MAX_DEPTH}) as one leaf."""
    if _is_wrapper(value):
        value = value["value"]
    if isinstance(value, dict) and value and depth < MAX_DEPTH:
        for key in sorted(value):
            yield from flatten(value[key], (*path, key), depth + 1)
    elif (isinstance(value, list) and value and depth < MAX_DEPTH
          and any(isinstance(item, dict) for item in value)):
        for index, item in enumerate(value):
            yield from flatten(item, (*path, index), depth + 1)
    else:
        yield format_path(path) or "(the whole value)", value


def attribute_rows(attributes: Any, secrets: frozenset[str]) -> list[Tag]:
    """The rows of an attribute table: path, value (masked where sensitive)."""
    rows = []
    for count, (path, value) in enumerate(flatten(attributes)):
        if count >= MAX_ROWS:
            rows.append(tags.tr(tags.td("… more attributes (the version's JSON view has"
                                        " them all)", colspan="2")))
            break
        rows.append(tags.tr(tags.th(tags.code(path), scope="row"),
                            tags.td(value_tag(value, secrets))))
    return rows or [tags.tr(tags.td("No attributes.", colspan="2"))]
