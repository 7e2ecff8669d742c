"""The values a state marks sensitive, so that a page can refuse to show them
wherever they turn up.

The redacted diff (L{kilolock.tfstate.diff}) hides the paths a state lists in
C{sensitive_attributes} and the outputs marked sensitive.  Terraform does not
list every path that holds a sensitive value, though: C{terraform_data}'s
C{output} copies a sensitive C{input} unmarked.  So the diff page also masks
any value that contains one of these values.  Pure functions (run in a thread
for large states with the diff).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from kilolock.tfstate.redaction import REDACTED, redact, sensitive_paths

#: Shorter values are not hunted for elsewhere (C{"1"} or C{"true"} would
#: mask half a page); they are still hidden where they are marked.
MIN_LENGTH = 4


def _leaves(node: Any) -> Iterator[str]:
    if isinstance(node, dict) and set(node) == {"value", "type"}:
        yield from _leaves(node["value"])  # a dynamically-typed value: not its type
    elif isinstance(node, dict):
        for value in node.values():
            yield from _leaves(value)
    elif isinstance(node, list):
        for value in node:
            yield from _leaves(value)
    elif node is not None:
        yield node if isinstance(node, str) else json.dumps(node)


def _hidden(raw: Any, shown: Any) -> Iterator[str]:
    """The leaves of C{raw} where C{shown} (its redaction) is L{REDACTED}."""
    if shown == REDACTED and raw != REDACTED:
        yield from _leaves(raw)
    elif isinstance(raw, dict) and isinstance(shown, dict):
        for key, value in raw.items():
            yield from _hidden(value, shown.get(key))
    elif isinstance(raw, list) and isinstance(shown, list):
        for value, seen in zip(raw, shown, strict=False):
            yield from _hidden(value, seen)


def sensitive_values(raw: bytes) -> frozenset[str]:
    """Every value the state C{raw} marks sensitive, as text (strings as
    themselves, other scalars as JSON), of at least L{MIN_LENGTH} characters;
    nothing for what is not a readable v4 state."""
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return frozenset()
    if not isinstance(doc, dict):
        return frozenset()
    return sensitive_values_of(doc)


def sensitive_values_of(doc: dict[str, Any]) -> frozenset[str]:
    """L{sensitive_values} of a decoded state."""
    found: set[str] = set()
    outputs = doc.get("outputs")
    for output in outputs.values() if isinstance(outputs, dict) else ():
        if isinstance(output, dict) and output.get("sensitive"):
            found.update(_leaves(output.get("value")))
    for resource in doc.get("resources") or []:
        for instance in (resource.get("instances") or []) if isinstance(resource, dict) else []:
            attributes = instance.get("attributes") if isinstance(instance, dict) else None
            if not isinstance(attributes, dict):
                continue
            paths = sensitive_paths(instance.get("sensitive_attributes"))
            if paths:
                found.update(_hidden(attributes, redact(attributes, paths)))
    return frozenset(value for value in found if len(value) >= MIN_LENGTH)


def shows_secret(text: str, secrets: frozenset[str]) -> bool:
    """Whether C{text} contains any of C{secrets}."""
    return any(secret in text for secret in secrets)
