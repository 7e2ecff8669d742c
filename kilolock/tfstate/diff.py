"""Comparing and restoring stored state versions.  Pure functions, no Twisted:
the native lane runs them in a thread for large states.

A diff is resource-level: which instance objects (deposed ones apart) were
added, removed or changed between two versions, and for a changed one which
attribute paths differ.  Values are redacted as the projection redacts them
(L{kilolock.tfstate.projection}); a difference inside a sensitive value is
detected on the raw values but reported only as C{"sensitive": true} at the
redacted path, never with a value (nor with the structure below it).
Outputs are compared the same way.

The PostgreSQL store keeps projection rows only for the current version, so
both versions are parsed from their stored bytes here, and only the objects
that changed are redacted (a version of thousands of resources is not
projected whole to find the few that differ).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from attrs import frozen

from kilolock.core.errors import EncryptedState, InvalidState, InvalidText, VersionTooDeep
from kilolock.core.json_fast import UNDECIDED, fast_decode
from kilolock.core.text import clean_document, clean_text
from kilolock.tfstate.parse import REDACTED, is_envelope, parse_state
from kilolock.tfstate.projection import keyed_address, resource_base
from kilolock.tfstate.redaction import redact, redact_flat, sensitive_paths

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
        raw.decode("utf-8")  # what fast_decode needs of its bytes
        doc = fast_decode(raw)
        if doc is UNDECIDED:
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


def _changed_paths(old: Any, new: Any) -> Iterator[Path]:
    """Paths of the leaves where C{old} and C{new} differ (dicts by key, lists
    of one length by position; anything else as a whole), depth first in key
    order.  Iterative: any nesting is fine."""
    pending: list[tuple[Any, Any, Path]] = [(old, new, ())]
    while pending:
        before, after, path = pending.pop()
        if _is_wrapper(before) and _is_wrapper(after):
            if before["type"] == after["type"]:
                pending.append((before["value"], after["value"],
                                (*path, _WrapperStep("value"))))
            else:
                yield path
        elif isinstance(before, dict) and isinstance(after, dict):
            keys = list(before) + [key for key in after if key not in before]
            pending.extend((before.get(key, _ABSENT), after.get(key, _ABSENT), (*path, key))
                           for key in reversed(keys))
        elif isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
            pending.extend((before[index], after[index], (*path, index))
                           for index in reversed(range(len(before))))
        elif (before is _ABSENT or after is _ABSENT or type(before) is not type(after)
              or before != after):
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


@frozen
class _Object:
    """An instance object of a state: its mode, its raw attributes (what
    the comparison reads), and whether it marks any path sensitive."""

    mode: str
    raw: Any
    instance: dict[str, Any]
    sensitive: bool

    def shown(self) -> Any:
        """Its attributes as the projection redacts them (the values a diff
        may show), text a page cannot hold cleaned."""
        paths = sensitive_paths(self.instance.get("sensitive_attributes"))
        if not paths:
            return clean_document(self.raw)
        if self.instance.get("attributes") is not None:
            if not isinstance(self.raw, dict):
                return REDACTED
            return clean_document(redact(self.raw, paths))
        if isinstance(self.raw, dict):
            return clean_document(redact_flat(self.raw, paths))
        return REDACTED


def _objects(doc: dict[str, Any]) -> dict[tuple[str, str | None], _Object]:
    """Every instance object of a state by (address, deposed key), in state
    order: addressed as the projection addresses them
    (L{kilolock.tfstate.projection.instance_address}), without projecting
    every value (only a changed object's are ever redacted)."""
    found: dict[tuple[str, str | None], _Object] = {}
    for resource in doc.get("resources") or []:
        if not isinstance(resource, dict):
            continue
        mode = resource.get("mode")
        try:
            base = resource_base(resource)
        except ValueError:
            continue
        for instance in resource.get("instances") or []:
            if not isinstance(instance, dict):
                continue
            try:
                address = keyed_address(base, instance)
            except ValueError:
                continue
            deposed = instance.get("deposed")
            key = (address, clean_text(deposed) if isinstance(deposed, str) and deposed
                   else None)
            found[key] = _Object(str(mode), _raw_attributes(instance), instance,
                                 bool(instance.get("sensitive_attributes")))
    return found


_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=True).encode


def _replaced(mode: str, old: Any, new: Any) -> bool:
    """Whether an instance object was destroyed and created again between
    two versions rather than updated in place: a managed resource whose
    C{id} changed (Terraform gives a new object a new id; an update in
    place keeps it)."""
    if mode != "managed" or not isinstance(old, dict) or not isinstance(new, dict):
        return False
    before, after = old.get("id"), new.get("id")
    return before is not None and after is not None and before != after


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


_TOO_DEEP = ("this version nests too deeply for the server to read (it was stored before"
             " the nesting limit); `kl state pull --version N` gets its bytes")


def diff_states(old_raw: bytes, new_raw: bytes) -> dict[str, Any]:
    """L{_diff_states}; a version too deep to read is L{VersionTooDeep}."""
    try:
        return _diff_states(old_raw, new_raw)
    except (RecursionError, InvalidText):
        raise VersionTooDeep(_TOO_DEEP) from None


def _diff_states(old_raw: bytes, new_raw: bytes) -> dict[str, Any]:
    """The resource-level difference from C{old_raw} to C{new_raw} (two stored
    versions) as a JSON-ready document::

        {"lineageChanged": false,
         "resources": {"added": [{"address": ...}], "removed": [...],
                       "changed": [{"address": ..., "action": "update", "changes": [
                           {"path": "input", "before": "a", "after": "b"},
                           {"path": "password", "sensitive": true}]}]},
         "outputs": {"added": [name], "removed": [name],
                     "changed": [{"name": ..., "before": ..., "after": ...}]}}

    A changed object's C{action} is C{"replace"} when it was destroyed and
    created again (L{_replaced}: its C{id} changed), else C{"update"}.

    @raise EncryptedState: either version is an encrypted envelope.
    """
    return diff_documents(load_document(old_raw), load_document(new_raw))


def diff_documents(old_doc: dict[str, Any], new_doc: dict[str, Any]) -> dict[str, Any]:
    """L{diff_states} of two loaded documents (L{load_document})."""
    old_objects, new_objects = _objects(old_doc), _objects(new_doc)
    changed = []
    for key, new in new_objects.items():
        old = old_objects.get(key)
        if old is None:
            continue
        if old.raw == new.raw and _ENCODE(old.raw) == _ENCODE(new.raw):
            # Equal values of the same JSON types (1, 1.0 and true are equal
            # to Python, not to JSON): no path differs.
            continue
        changes = _attribute_changes(old.raw, new.raw, old.shown(), new.shown())
        if changes:
            action = "replace" if _replaced(new.mode, old.raw, new.raw) else "update"
            changed.append({**_label(key), "action": action, "changes": changes})
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
    @raise VersionTooDeep: it nests too deeply to read.
    """
    try:
        parsed = parse_state(raw)
    except (RecursionError, InvalidText):
        raise VersionTooDeep(_TOO_DEEP) from None
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
    """Version C{raw} as a new version: its bytes exactly, but for the values
    of its top-level C{serial} and C{lineage}, which become C{serial} and
    C{lineage}.  Nothing is re-serialised, so whatever the version holds
    (any nesting, escapes, numbers beyond a double) is restored as it was.

    @raise EncryptedState: the version is an encrypted envelope (its serial
        lives inside the ciphertext too, so it cannot be rewritten here).
    @raise InvalidState: it is not a JSON object with a serial and a lineage.
    """
    try:
        text = raw.decode("utf-8")
        members = _top_level_members(text)
    except (ValueError, RecursionError):
        raise InvalidState("the stored version is not a JSON object") from None
    if is_envelope({key: None for key, _, _ in members}):
        raise EncryptedState("this version is an OpenTofu encrypted state: the server cannot"
                             " read it (use `kl state pull --version N` and decrypt locally)")
    replacements = {"serial": str(serial), "lineage": json.dumps(lineage)}
    if not {key for key, _, _ in members} >= set(replacements):
        raise InvalidState("the stored version has no serial or no lineage")
    spans = [(start, end, replacements[key]) for key, start, end in members
             if key in replacements]
    parts: list[str] = []
    position = 0
    for start, end, value in spans:
        parts.extend((text[position:start], value))
        position = end
    parts.append(text[position:])
    return "".join(parts).encode("utf-8")


_MEMBER_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\n\r]*")


def _top_level_members(text: str) -> list[tuple[str, int, int]]:
    """The members of the JSON object C{text}: (key, start, end) of each
    value, in order.  @raise ValueError: C{text} is not a JSON object."""

    def skip(position: int) -> int:
        match = _SPACE.match(text, position)
        assert match is not None
        return match.end()

    position = skip(0)
    if text[position:position + 1] != "{":
        raise ValueError("not an object")
    members: list[tuple[str, int, int]] = []
    position = skip(position + 1)
    if text[position:position + 1] == "}":
        position += 1
    else:
        while True:
            key, position = _MEMBER_DECODER.raw_decode(text, position)
            if not isinstance(key, str):
                raise ValueError("a key is not a string")
            position = skip(position)
            if text[position:position + 1] != ":":
                raise ValueError("no colon")
            start = skip(position + 1)
            _, position = _MEMBER_DECODER.raw_decode(text, start)
            members.append((key, start, position))
            position = skip(position)
            delimiter = text[position:position + 1]
            position += 1
            if delimiter == "}":
                break
            if delimiter != ",":
                raise ValueError("no comma")
            position = skip(position)
    if skip(position) != len(text):
        raise ValueError("extra data")
    return members
