"""Comparing and restoring stored state versions.  Pure functions, no Twisted:
the native lane runs them in a thread for large states.

A diff is resource-level: which instance objects (deposed ones apart) were
added, removed or changed between two versions, and for a changed one which
attribute paths differ.  Values come from the redacted projection
(L{kilolock.tfstate.project_state}); a difference inside a sensitive value is
detected on the raw values but reported only as C{"sensitive": true} at the
redacted path, never with a value (nor with the structure below it).
Outputs are compared the same way.

The PostgreSQL store keeps projection rows only for the current version, so
both versions are parsed from their stored bytes here.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from kilolock.errors import EncryptedState, InvalidState
from kilolock.tfstate import REDACTED, is_envelope, parse_state, project_state

#: Steps of an attribute path: a str is a key, an int a list position.
Path = tuple[str | int, ...]

_ABSENT = object()
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*\Z")


def load_document(raw: bytes) -> dict[str, Any]:
    """A stored v4 state as a document.

    @raise EncryptedState: the version is an OpenTofu encrypted envelope.
    @raise InvalidState: it is not a state at all (never for stored versions).
    """
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise InvalidState("the stored version is not JSON") from None
    if not isinstance(doc, dict):
        raise InvalidState("the stored version is not a JSON object")
    if is_envelope(doc):
        raise EncryptedState("this version is an OpenTofu encrypted state: the server cannot"
                             " read it (use `kl state pull --version N` and decrypt locally)")
    return doc


class _WrapperStep(str):
    """The C{value} step into a dynamically-typed value's C{{"value", "type"}}
    wrapper: followed, never shown (Terraform's paths do not mention it)."""

    __slots__ = ()


def _is_wrapper(node: Any) -> bool:
    return isinstance(node, dict) and set(node) == {"value", "type"}


def format_path(path: Path) -> str:
    """Terraform-style: C{tags["Name"]}, C{ingress[0].from_port}, C{name}."""
    text = ""
    for step in path:
        if isinstance(step, _WrapperStep):
            continue
        if isinstance(step, int):
            text += f"[{step}]"
        elif _IDENTIFIER.match(step):
            text += f".{step}" if text else step
        else:
            text += "[" + json.dumps(step, ensure_ascii=False) + "]"
    return text


def _changed_paths(old: Any, new: Any, path: Path = ()) -> Iterator[Path]:
    """Paths of the leaves where C{old} and C{new} differ (dicts by key, lists
    of one length by position; anything else as a whole)."""
    if _is_wrapper(old) and _is_wrapper(new):
        if old["type"] == new["type"]:
            yield from _changed_paths(old["value"], new["value"], (*path, _WrapperStep("value")))
        else:
            yield path
    elif isinstance(old, dict) and isinstance(new, dict):
        for key in list(old) + [key for key in new if key not in old]:
            yield from _changed_paths(old.get(key, _ABSENT), new.get(key, _ABSENT),
                                      (*path, key))
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for index, (before, after) in enumerate(zip(old, new, strict=True)):
            yield from _changed_paths(before, after, (*path, index))
    elif old is _ABSENT or new is _ABSENT or type(old) is not type(new) or old != new:
        yield path


def _redacted_at(tree: Any, path: Path) -> tuple[Path | None, Any]:
    """Follow C{path} into a redacted tree.  @return: (the path of the redacted
    value met on the way, or None; the value at C{path} or L{_ABSENT})."""
    node = tree
    for depth, step in enumerate(path):
        if node == REDACTED:
            return path[:depth], _ABSENT
        found = ((isinstance(node, dict) and isinstance(step, str) and step in node)
                 or (isinstance(node, list) and isinstance(step, int) and step < len(node)))
        if not found:
            return None, _ABSENT
        node = node[step]
    if node == REDACTED:
        return path, _ABSENT
    return None, node


def _attribute_changes(raw_old: Any, raw_new: Any, shown_old: Any,
                       shown_new: Any) -> list[dict[str, Any]]:
    changes: list[dict[str, Any]] = []
    seen: set[Path] = set()
    for path in _changed_paths(raw_old, raw_new):
        hidden_old, before = _redacted_at(shown_old, path)
        hidden_new, after = _redacted_at(shown_new, path)
        hidden = [p for p in (hidden_old, hidden_new) if p is not None]
        if hidden:
            shortest = min(hidden, key=len)
            if shortest not in seen:
                seen.add(shortest)
                changes.append({"path": format_path(shortest), "sensitive": True})
            continue
        change: dict[str, Any] = {"path": format_path(path)}
        if before is not _ABSENT:
            change["before"] = before
        if after is not _ABSENT:
            change["after"] = after
        changes.append(change)
    return changes


def _raw_attributes(instance: dict[str, Any]) -> Any:
    attributes = instance.get("attributes")
    if attributes is None:
        attributes = instance.get("attributes_flat")
    return attributes if attributes is not None else {}


def _objects(doc: dict[str, Any]) -> dict[tuple[str, str | None], tuple[Any, Any]]:
    """Every instance object of a state by (address, deposed key): its raw
    attributes and its redacted ones, in state order."""
    projection = project_state(doc)
    raw = [_raw_attributes(instance)
           for resource in doc.get("resources") or []
           for instance in resource.get("instances") or []]
    return {(row.address, row.deposed): (attributes, json.loads(row.attributes))
            for row, attributes in zip(projection.resources, raw, strict=True)}


def _label(key: tuple[str, str | None]) -> dict[str, Any]:
    address, deposed = key
    return {"address": address, "deposed": deposed} if deposed else {"address": address}


def _outputs(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    outputs = doc.get("outputs") or {}
    return {name: output for name, output in outputs.items() if isinstance(output, dict)}


def _output_changes(old: dict[str, Any], new: dict[str, Any]) -> dict[str, list[Any]]:
    added = [name for name in new if name not in old]
    removed = [name for name in old if name not in new]
    changed: list[dict[str, Any]] = []
    for name in (name for name in new if name in old):
        before, after = old[name], new[name]
        if before.get("value") == after.get("value") and bool(before.get("sensitive")) == bool(
                after.get("sensitive")):
            continue
        if before.get("sensitive") or after.get("sensitive"):
            changed.append({"name": name, "sensitive": True})
        else:
            changed.append({"name": name, "before": before.get("value"),
                            "after": after.get("value")})
    return {"added": added, "removed": removed, "changed": changed}


def diff_states(old_raw: bytes, new_raw: bytes) -> dict[str, Any]:
    """The resource-level difference from C{old_raw} to C{new_raw} (two stored
    versions) as a JSON-ready document::

        {"lineageChanged": false,
         "resources": {"added": [{"address": ...}], "removed": [...],
                       "changed": [{"address": ..., "changes": [
                           {"path": "input", "before": "a", "after": "b"},
                           {"path": "password", "sensitive": true}]}]},
         "outputs": {"added": [name], "removed": [name],
                     "changed": [{"name": ..., "before": ..., "after": ...}]}}

    @raise EncryptedState: either version is an encrypted envelope.
    """
    old_doc, new_doc = load_document(old_raw), load_document(new_raw)
    old_objects, new_objects = _objects(old_doc), _objects(new_doc)
    changed = []
    for key, (raw_new, shown_new) in new_objects.items():
        if key not in old_objects:
            continue
        raw_old, shown_old = old_objects[key]
        changes = _attribute_changes(raw_old, raw_new, shown_old, shown_new)
        if changes:
            changed.append({**_label(key), "changes": changes})
    return {
        "lineageChanged": old_doc.get("lineage") != new_doc.get("lineage"),
        "resources": {
            "added": [_label(key) for key in new_objects if key not in old_objects],
            "removed": [_label(key) for key in old_objects if key not in new_objects],
            "changed": changed,
        },
        "outputs": _output_changes(_outputs(old_doc), _outputs(new_doc)),
    }


def outputs_of(raw: bytes) -> list[dict[str, Any]]:
    """The outputs of a stored version, sensitive values withheld::

        [{"name": ..., "type": ..., "value": ..., "sensitive": false}, ...]

    @raise EncryptedState: the version is an encrypted envelope.
    """
    parsed = parse_state(raw)
    if parsed.projection is None:
        raise EncryptedState("this version is an OpenTofu encrypted state: its outputs cannot"
                             " be read by the server")
    return [output_document(row.name, row.type, row.value, row.sensitive)
            for row in parsed.projection.outputs]


def output_document(name: str, type_: str | None, value: str | None,
                    sensitive: bool) -> dict[str, Any]:
    """One output row as JSON (C{type}/C{value} are JSON text in the row)."""
    return {"name": name,
            "type": None if type_ is None else json.loads(type_),
            "value": None if sensitive or value is None else json.loads(value),
            "sensitive": sensitive}


def restore_body(raw: bytes, serial: int, lineage: str) -> bytes:
    """Version C{raw} re-serialised as a new version: its content with
    C{serial} and C{lineage}, written like Terraform writes a state (2-space
    indent, a final newline, key order kept).

    @raise EncryptedState: the version is an encrypted envelope (its serial
        lives inside the ciphertext too, so it cannot be rewritten here).
    """
    doc = load_document(raw)
    doc["serial"] = serial
    doc["lineage"] = lineage
    return json.dumps(doc, indent=2, ensure_ascii=False).encode("utf-8") + b"\n"
