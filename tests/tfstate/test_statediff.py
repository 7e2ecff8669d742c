"""kilolock.tfstate.diff: diffs, outputs and rollback bodies of stored versions (pure)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kilolock.core.errors import EncryptedState, InvalidState
from kilolock.tfstate.diff import diff_states, format_path, outputs_of, restore_body
from kilolock.tfstate.parse import parse_state
from tests.support.paths import SAMPLE_STATES
from tests.support.stub_client import state_body

DATA = SAMPLE_STATES
ENVELOPE = json.dumps({"serial": 2, "lineage": "l", "meta": {}, "encrypted_data": "eA==",
                       "encryption_version": "v0"}).encode()


def instance(attributes: dict[str, Any], sensitive: list[list[dict[str, Any]]] | None = None,
             **extra: Any) -> dict[str, Any]:
    return {"schema_version": 0, "attributes": attributes,
            "sensitive_attributes": sensitive or [], **extra}


def body(*instances: dict[str, Any], serial: int = 1, name: str = "r") -> bytes:
    return state_body(serial, resources=[{
        "mode": "managed", "type": "terraform_data", "name": name,
        "provider": 'provider["terraform.io/builtin/terraform"]',
        "instances": list(instances)}])


def attr(name: str) -> dict[str, Any]:
    return {"type": "get_attr", "value": name}


def test_format_path_spells_paths_like_terraform() -> None:
    """Names join with dots, list positions and odd keys go in brackets."""
    assert format_path(("tags", "Name")) == "tags.Name"
    assert format_path(("ingress", 0, "from_port")) == "ingress[0].from_port"
    assert format_path(("tags", "kubernetes.io/role")) == 'tags["kubernetes.io/role"]'
    assert format_path(("é",)) == '["é"]'


def test_nested_and_list_changes_are_reported_per_leaf() -> None:
    """Dicts compare by key, same-length lists by position, others as a whole."""
    old = body(instance({"id": "x", "ports": [1, 2], "names": ["a"], "m": {"k": 1, "gone": 2}}))
    new = body(instance({"id": "x", "ports": [1, 3], "names": ["a", "b"], "m": {"k": 1,
                                                                               "new": 3}}))
    (changed,) = diff_states(old, new)["resources"]["changed"]
    assert changed["changes"] == [
        {"path": "ports[1]", "before": 2, "after": 3},
        {"path": "names", "before": ["a"], "after": ["a", "b"]},
        {"path": "m.gone", "before": 2},
        {"path": "m.new", "after": 3},
    ]


def test_a_change_inside_a_sensitive_value_shows_only_its_redacted_path() -> None:
    """The structure and values below a redacted attribute never appear; a value
    that turns sensitive is reported as sensitive."""
    old = body(instance({"id": "x", "conn": {"user": "u", "pass": "p1"}, "token": "t"},
                        sensitive=[[attr("conn")]]))
    new = body(instance({"id": "x", "conn": {"user": "u", "pass": "p2", "port": 5},
                         "token": "t2"}, sensitive=[[attr("conn")], [attr("token")]]))
    diff = diff_states(old, new)
    text = json.dumps(diff)
    assert "p1" not in text and "p2" not in text and "pass" not in text and "t2" not in text
    assert diff["resources"]["changed"][0]["changes"] == [
        {"path": "conn", "sensitive": True}, {"path": "token", "sensitive": True}]
    unchanged = body(instance({"id": "x", "conn": {"user": "u", "pass": "p1"}, "token": "t"},
                              sensitive=[[attr("conn")]]))
    assert diff_states(old, unchanged)["resources"]["changed"] == []


def test_deposed_objects_and_flat_attributes_are_compared_too() -> None:
    """A deposed object is its own entry; attributes_flat states diff by key."""
    old = body(instance({"id": "a"}))
    new = body(instance({"id": "b"}), instance({"id": "a"}, deposed="00abcdef"))
    resources = diff_states(old, new)["resources"]
    assert resources["added"] == [{"address": "terraform_data.r", "deposed": "00abcdef"}]
    assert resources["changed"] == [{"address": "terraform_data.r", "action": "replace",
                                     "changes": [{"path": "id", "before": "a", "after": "b"}]}]
    flat_old = body({"schema_version": 0, "attributes_flat": {"id": "a", "tags.%": "0"}})
    flat_new = body({"schema_version": 0, "attributes_flat": {"id": "a", "tags.%": "1"}})
    assert diff_states(flat_old, flat_new)["resources"]["changed"][0]["changes"] == [
        {"path": '["tags.%"]', "before": "0", "after": "1"}]


def test_a_real_state_against_its_destroyed_successor() -> None:
    """Every instance of the full fixture is removed in the destroyed one."""
    full = (DATA / "full.tfstate").read_bytes()
    destroyed = (DATA / "destroyed.tfstate").read_bytes()
    diff = diff_states(full, destroyed)
    removed = [entry["address"] for entry in diff["resources"]["removed"]]
    projection = parse_state(full).projection
    assert projection is not None
    assert sorted(removed) == sorted(row.address for row in projection.resources
                                     if row.deposed is None)
    assert diff["resources"]["added"] == []
    assert diff_states(full, full)["resources"] == {"added": [], "removed": [], "changed": []}


def test_encrypted_versions_cannot_be_read() -> None:
    """Diff, outputs and restore refuse an OpenTofu envelope with EncryptedState."""
    with pytest.raises(EncryptedState):
        diff_states(body(instance({})), ENVELOPE)
    with pytest.raises(EncryptedState):
        outputs_of(ENVELOPE)
    with pytest.raises(EncryptedState):
        restore_body(ENVELOPE, 3, "l")


def test_restore_body_replaces_only_serial_and_lineage() -> None:
    """Every byte of the version is kept -- layout, key order, escapes,
    non-ASCII -- but the values of its top-level serial and lineage."""
    original = state_body(4, resources=[{"mode": "managed", "type": "t", "name": "ü",
                                         "provider": "p", "instances": []}])
    restored = restore_body(original, 9, "new-lineage")
    assert restored == original.replace(b'"serial": 4', b'"serial": 9').replace(
        b'"lineage": "7b1d5c1e-0000-4000-8000-000000000001"', b'"lineage": "new-lineage"')
    assert parse_state(restored).serial == 9
    compact = b'{"serial":1,"lineage":"a","version":4,"x":"\\ud800 \\u0000","n":1e400}'
    assert restore_body(compact, 2, "b") == (
        b'{"serial":2,"lineage":"b","version":4,"x":"\\ud800 \\u0000","n":1e400}')


def test_restore_body_keeps_any_nesting_and_refuses_what_is_no_state() -> None:
    """A version nested to the limit restores (no re-serialising recursion);
    a body that is no JSON object with a serial and lineage is InvalidState."""
    deep = (b'{"version": 4, "serial": 1, "lineage": "l", "outputs": {"o": {"value": '
            + b"[" * 500 + b"]" * 500 + b"}}}")
    assert json.loads(restore_body(deep, 2, "l"))["serial"] == 2
    for bad in (b"[1]", b'{"serial": 1}', b'{"serial": 1, "lineage": "l"} x', b"\xff"):
        with pytest.raises(InvalidState):
            restore_body(bad, 2, "l")


def test_dynamic_value_wrappers_are_looked_through() -> None:
    """terraform_data's {"value", "type"} wrapper never shows in a path; a
    change of type reports the whole attribute."""
    def wrapped(value: Any, type_: Any = "string") -> bytes:
        return body(instance({"id": "x", "input": {"value": value, "type": type_}}))

    (changed,) = diff_states(wrapped("a"), wrapped("b"))["resources"]["changed"]
    assert changed["changes"] == [{"path": "input", "before": "a", "after": "b"}]
    nested = diff_states(wrapped({"k": 1}, ["object", {"k": "number"}]),
                         wrapped({"k": 2}, ["object", {"k": "number"}]))
    assert nested["resources"]["changed"][0]["changes"] == [
        {"path": "input.k", "before": 1, "after": 2}]
    retyped = diff_states(wrapped("1"), wrapped(1, "number"))["resources"]["changed"]
    assert retyped[0]["changes"] == [{"path": "input", "before": {"value": "1", "type": "string"},
                                      "after": {"value": 1, "type": "number"}}]


def test_a_new_id_is_a_replacement_and_anything_else_an_update() -> None:
    """A managed object whose id changed was destroyed and created again
    ("replace", also when the id is sensitive); one that kept its id was
    updated in place ("update"); a data source is always read again
    ("update"); no id on either side is an update."""
    def changed(old: dict[str, Any], new: dict[str, Any], mode: str = "managed") -> Any:
        def doc(attrs: dict[str, Any], serial: int) -> bytes:
            return state_body(serial, resources=[{
                "mode": mode, "type": "t", "name": "r", "provider": "p",
                "instances": [instance(attrs, [[attr("id")]] if "secret" in attrs else None)]}])
        (entry,) = diff_states(doc(old, 1), doc(new, 2))["resources"]["changed"]
        return entry["action"]

    assert changed({"id": "a", "v": 1}, {"id": "b", "v": 1}) == "replace"
    assert changed({"id": "a", "v": 1}, {"id": "a", "v": 2}) == "update"
    assert changed({"id": "a", "secret": 1}, {"id": "b", "secret": 1}) == "replace"
    assert changed({"id": "a"}, {"id": "b"}, mode="data") == "update"
    assert changed({"v": 1}, {"v": 2}) == "update"
    assert changed({"id": None, "v": 1}, {"id": "b", "v": 1}) == "update"
