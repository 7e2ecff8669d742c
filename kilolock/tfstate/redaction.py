"""Redacting the sensitive attributes of a state's instance.  Pure functions,
no Twisted, no I/O.

Every path in an instance's C{sensitive_attributes} is replaced by the string
L{REDACTED}.  Terraform (1.15.5 and every v4 writer since 0.15) writes that as
a list of paths, each a list of steps C{{"type": "get_attr", "value": "name"}}
or C{{"type": "index", "value": {"value": 0, "type": "number"}}} (map keys
have C{"type": "string"}; set elements are indexed by the element value).

A value of a dynamically-typed attribute (e.g. C{terraform_data.input}) is
stored wrapped as C{{"value": ..., "type": ...}}; paths do not mention that
wrapper, so redaction looks through it.  When a path cannot be followed
precisely (a set element, an unknown step kind, a type mismatch) the nearest
enclosing value is redacted instead; a malformed C{sensitive_attributes}
redacts every attribute.  A path to a value that is absent or null redacts
nothing.  Only what Terraform marks is redacted: e.g. C{terraform_data.output}
holds an unmarked copy of a sensitive C{input}, and Terraform itself shows it
in clear.
"""

from __future__ import annotations

from typing import Any

from kilolock.tfstate.values import is_json_integer

__all__ = ["REDACTED", "SensitivePath", "redact", "redact_flat", "sensitive_paths"]

#: What a sensitive attribute value is replaced with.
REDACTED = "(sensitive)"

# Path steps, parsed: (_ATTR, name), (_INDEX, int or str) or (_OPAQUE, None).
_ATTR = 0
_INDEX = 1
_OPAQUE = 2
_Step = tuple[int, Any]

#: One parsed path of C{sensitive_attributes}.
SensitivePath = list[_Step]

_COLLECTION_KINDS = ("list", "set", "map", "tuple")


def sensitive_paths(raw: Any) -> list[SensitivePath]:
    """Parse C{sensitive_attributes}; anything unreadable becomes a path that
    redacts from the point where it stops making sense."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        return [[(_OPAQUE, None)]]
    return [_path(steps) for steps in raw]


def _path(steps: Any) -> SensitivePath:
    if not isinstance(steps, list):
        return [(_OPAQUE, None)]
    path: SensitivePath = []
    for step in steps:
        parsed = _step(step)
        path.append(parsed)
        if parsed[0] == _OPAQUE:
            break
    return path


def _step(step: Any) -> _Step:
    if not isinstance(step, dict):
        return (_OPAQUE, None)
    kind = step.get("type")
    value = step.get("value")
    if kind == "get_attr" and isinstance(value, str):
        return (_ATTR, value)
    if kind == "index" and isinstance(value, dict):
        key, key_type = value.get("value"), value.get("type")
        if key_type == "number" and is_json_integer(key):
            return (_INDEX, key)
        if key_type == "number" and isinstance(key, float) and key.is_integer():
            return (_INDEX, int(key))
        if key_type == "string" and isinstance(key, str):
            return (_INDEX, key)
    return (_OPAQUE, None)  # a set element, or a step kind we do not know


def redact(attrs: dict[str, Any], paths: list[SensitivePath]) -> dict[str, Any]:
    """Return C{attrs} with each path's value replaced by L{REDACTED}, copying
    only the containers along the redacted paths."""
    result: dict[str, Any] = attrs
    for path in paths:
        redacted = _redact_path(result, path)
        if not isinstance(redacted, dict):  # the whole object was sensitive
            return {key: REDACTED for key in attrs}
        result = redacted
    return result


def _redact_path(root: Any, path: SensitivePath) -> Any:
    trail: list[tuple[Any, Any]] = []  # (container, key) pairs walked through
    node = root
    i = 0
    while i < len(path):
        kind, key = path[i]
        if _is_wrapper_for(node, kind, key):
            trail.append((node, "value"))
            node = node["value"]
            continue
        if node is None:
            return root  # nothing stored below a null
        if isinstance(node, dict) and kind in (_ATTR, _INDEX) and isinstance(key, str):
            if key not in node:
                return root
        elif isinstance(node, list) and kind == _INDEX and isinstance(key, int):
            if not 0 <= key < len(node):
                return root
        else:
            break  # cannot follow precisely: redact this whole value
        trail.append((node, key))
        node = node[key]
        i += 1
    replacement: Any = REDACTED
    for container, key in reversed(trail):
        copy = dict(container) if isinstance(container, dict) else list(container)
        copy[key] = replacement
        replacement = copy
    return replacement


def _is_wrapper_for(node: Any, kind: int, key: Any) -> bool:
    """Is C{node} the C{{"value", "type"}} encoding of a dynamically-typed value
    that the step C{(kind, key)} reaches into?"""
    if not isinstance(node, dict) or len(node) != 2 or "value" not in node:
        return False
    type_ = node.get("type")
    if not isinstance(type_, list) or len(type_) < 2 or not isinstance(type_[0], str):
        return False
    if kind == _ATTR:
        return type_[0] == "object" and isinstance(type_[1], dict) and key in type_[1]
    return type_[0] in _COLLECTION_KINDS


def redact_flat(flat: dict[str, Any], paths: list[SensitivePath]) -> dict[str, Any]:
    """Redact a legacy flatmap (C{"tags.%"}, C{"tags.name"}, C{"list.0"})."""
    prefixes = []
    for path in paths:
        parts = []
        for kind, key in path:
            if kind == _OPAQUE:
                break
            parts.append(str(key))
        prefixes.append(".".join(parts))
    if not prefixes:
        return flat
    if "" in prefixes:
        return {key: REDACTED for key in flat}
    return {
        key: REDACTED
        if any(key == prefix or key.startswith(prefix + ".") for prefix in prefixes)
        else value
        for key, value in flat.items()
    }
