"""The matching rules of L{kilolock.core.model.ResourceQuery}, for every store.

Pure functions: the memory store matches rows with them; the PostgreSQL store
turns the same criteria into SQL (L{like_pattern}, L{attribute_steps}) and
its contract tests pin that both agree.
"""

from __future__ import annotations

import json
import re
from typing import Any

from attrs import frozen

from kilolock.core.errors import BadRequest
from kilolock.core.model import ResourceRow


@frozen
class ResourceQuery:
    """What L{IStateStore.query_resources} looks for across a tenant's states
    (current versions only).  Every criterion that is not None must match.

    C{address} is a pattern where C{*} matches any run of characters (and
    nothing else is special: C{[0]} and C{["key"]} are literal).
    C{module} is the exact module path (C{""} for the root module).
    C{attribute} is C{(path, value)}: the attribute at the dotted C{path}
    (C{tags.Name}) is a JSON scalar whose text is C{value} (strings as
    themselves, numbers and booleans as JSON spells them).  Redacted values
    read C{"(sensitive)"}, so a secret can never be found by guessing it.
    C{path_prefix} restricts the query to states whose path starts with it
    (a token scoped to one workspace/environment); C{state_path} to one state.
    """

    type: str | None = None
    address: str | None = None
    module: str | None = None
    attribute: tuple[str, str] | None = None
    path_prefix: str | None = None
    state_path: str | None = None
    limit: int = 1000


@frozen
class ResourceMatch:
    """One resource row found by a L{ResourceQuery}, with the state it is in."""

    state_path: str
    version: int
    resource: ResourceRow


#: The largest C{limit} a query may ask for.
MAX_LIMIT = 10000


def check_query(query: ResourceQuery) -> None:
    """Refuse a query a store cannot answer sensibly.

    @raise BadRequest: an empty attribute path, or a limit out of range.
    """
    if not 1 <= query.limit <= MAX_LIMIT:
        raise BadRequest(f"limit must be between 1 and {MAX_LIMIT}")
    if query.attribute is not None and not all(attribute_steps(query.attribute[0])):
        raise BadRequest("an attribute path is dot-separated names, e.g. tags.Name")


def address_regex(pattern: str) -> re.Pattern[str]:
    """C{pattern} with C{*} matching any run of characters, everything else
    literal, anchored at both ends."""
    return re.compile("".join(".*" if part == "*" else re.escape(part)
                              for part in re.split(r"(\*)", pattern)) + r"\Z", re.DOTALL)


def like_pattern(pattern: str) -> str:
    """C{pattern} as an SQL C{LIKE} pattern with C{\\} as the escape character."""
    escaped = pattern.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return escaped.replace("*", "%")


def attribute_steps(path: str) -> list[str]:
    """A dotted attribute path as its steps (C{tags.Name} -> C{["tags", "Name"]});
    a step that is a number also indexes a list."""
    return path.split(".")


def scalar_text(value: Any) -> str | None:
    """The text a JSON scalar is compared as (PostgreSQL's C{#>>}): strings as
    themselves, numbers and booleans as JSON spells them; None for null,
    objects and arrays (which never match)."""
    if value is None or isinstance(value, dict | list):
        return None
    if isinstance(value, str):
        return value
    return json.dumps(value)


def attribute_value(attributes: Any, steps: list[str]) -> Any:
    """Follow C{steps} into decoded attributes; None when the path is absent."""
    node = attributes
    for step in steps:
        if isinstance(node, dict):
            if step not in node:
                return None
            node = node[step]
        elif (isinstance(node, list) and step.isascii() and step.isdigit()
              and int(step) < len(node)):
            node = node[int(step)]
        else:
            return None
    return node


def row_matches(row: ResourceRow, query: ResourceQuery) -> bool:
    """Whether one resource row matches C{query} (the state criteria aside)."""
    if query.type is not None and row.type != query.type:
        return False
    if query.module is not None and row.module != query.module:
        return False
    if query.address is not None and not address_regex(query.address).match(row.address):
        return False
    if query.attribute is not None:
        path, wanted = query.attribute
        found = attribute_value(json.loads(row.attributes), attribute_steps(path))
        if scalar_text(found) != wanted:
            return False
    return True


def state_matches(path: str, query: ResourceQuery) -> bool:
    """Whether a state's path is within C{query}'s state criteria."""
    if query.state_path is not None and path != query.state_path:
        return False
    return query.path_prefix is None or path.startswith(query.path_prefix)
