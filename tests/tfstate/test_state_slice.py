"""State slices (kilolock.tfstate.slice) and the windowed scan they read
with (kilolock.tfstate.scan), on states the real Terraform wrote.

A slice keeps exactly the selected resources (instances, deposed objects
and dependencies as stored), is a state Kilolock and Terraform accept, and
is the same whatever the window the bytes are decoded with."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kilolock.core.errors import BadRequest, EncryptedState, InvalidState
from kilolock.tfstate import scan
from kilolock.tfstate.address import parse_address
from kilolock.tfstate.parse import parse_state
from kilolock.tfstate.scan import scan_state
from kilolock.tfstate.slice import Selector, slice_document, slice_projection
from tests.support.paths import SAMPLE_STATES
from tests.support.state_samples import ENVELOPE
from tests.support.state_strategies import histories
from tests.support.terraform import Terraform

STATES = SAMPLE_STATES
MONOLITH = (STATES / "monolith.tfstate").read_bytes()
FULL = (STATES / "full.tfstate").read_bytes()
DEPOSED = (STATES / "deposed.tfstate").read_bytes()


def addresses(raw: bytes) -> list[str]:
    projection = parse_state(raw).projection
    assert projection is not None
    return [row.address for row in projection.resources]


def select(**criteria: Any) -> Selector:
    return Selector(modules=tuple(parse_address(m) for m in criteria.get("modules", ())),
                    types=tuple(criteria.get("types", ())),
                    addresses=tuple(parse_address(a) for a in criteria.get("addresses", ())),
                    outputs=criteria.get("outputs", False))


def test_a_module_slice_keeps_the_module_and_what_is_below_it() -> None:
    """module.app: its resources and module.app.module.inner's, nothing else;
    serial, lineage and Terraform version of the stored version."""
    sliced = slice_document(MONOLITH, select(modules=["module.app"]))
    parsed = parse_state(sliced)
    stored = parse_state(MONOLITH)
    assert (parsed.serial, parsed.lineage, parsed.terraform_version) == (
        stored.serial, stored.lineage, stored.terraform_version)
    assert addresses(sliced) == [a for a in addresses(MONOLITH) if a.startswith("module.app.")]
    assert json.loads(sliced)["outputs"] == {} and json.loads(sliced)["check_results"] is None


def test_resources_come_as_stored_with_their_dependencies() -> None:
    """A whole resource is its stored text, its instances' dependencies too."""
    sliced = json.loads(slice_document(MONOLITH, select(addresses=["terraform_data.dep"])))
    stored = [r for r in json.loads(MONOLITH)["resources"] if r["name"] == "dep"]
    assert sliced["resources"] == stored
    assert sliced["resources"][0]["instances"][0]["dependencies"]


def test_instance_address_keeps_only_that_instance() -> None:
    """terraform_data.items[1]: one instance of a counted resource."""
    sliced = slice_document(MONOLITH, select(addresses=["terraform_data.items[1]"]))
    assert addresses(sliced) == ["terraform_data.items[1]"]


@pytest.mark.parametrize("address", [
    "module.net.terraform_data.vpc", "module.net", "module.app", "terraform_data.items",
    "terraform_data.items[1]", "module.app.module.inner.terraform_data.leaf"])
def test_an_address_selects_what_terraform_state_list_lists(tmp_path: Path,
                                                            address: str) -> None:
    """address= is absolute, as `terraform state list ADDRESS` takes it (the
    real Terraform's listing, compared): a resource in a module is named
    with its module path, and a module address selects the module and what
    is below it."""
    work = tmp_path / "tf"
    work.mkdir()
    (work / "mono.tfstate").write_bytes(MONOLITH)
    listed = Terraform(work, tmp_path / "scratch").run(
        "state", "list", "-state=mono.tfstate", address).check().stdout.split()
    assert listed
    assert addresses(slice_document(MONOLITH, select(addresses=[address]))) == listed


def test_an_address_does_not_match_inside_modules(tmp_path: Path) -> None:
    """terraform_data.vpc is the root module's resource: it selects nothing of
    module.net.terraform_data.vpc (Terraform's `state list` refuses it as a
    resource the state does not contain; a slice is empty), and type=
    selects a type in every module."""
    work = tmp_path / "tf"
    work.mkdir()
    (work / "mono.tfstate").write_bytes(MONOLITH)
    refused = Terraform(work, tmp_path / "scratch").run(
        "state", "list", "-state=mono.tfstate", "terraform_data.vpc")
    assert refused.rc == 1 and "Error: Unknown resource" in refused.output
    assert addresses(slice_document(MONOLITH, select(addresses=["terraform_data.vpc"]))) == []
    assert "module.net.terraform_data.vpc" in addresses(
        slice_document(MONOLITH, select(types=["terraform_data"])))


def test_string_keys_types_and_criteria_combine() -> None:
    """Criteria of one kind are alternatives, kinds combine (type AND module)."""
    keyed = [a for a in addresses(FULL) if a.startswith("terraform_data.keyed[")]
    sliced = slice_document(FULL, select(addresses=[keyed[1], keyed[3]]))
    assert addresses(sliced) == [keyed[1], keyed[3]]
    both = slice_document(MONOLITH, select(types=["terraform_data"],
                                           modules=["module.net", "module.app"]))
    assert addresses(both) == [a for a in addresses(MONOLITH)
                               if a.startswith(("module.net.", "module.app."))]
    data = slice_document(MONOLITH, select(types=["terraform_remote_state"]))
    assert addresses(data) == ["data.terraform_remote_state.peer"]


def test_deposed_objects_stay_with_their_instance() -> None:
    """An instance's deposed object comes along with it."""
    projection = parse_state(DEPOSED).projection
    assert projection is not None
    deposed = next(row for row in projection.resources if row.deposed)
    sliced = parse_state(slice_document(DEPOSED, select(addresses=[deposed.address])))
    assert sliced.projection is not None
    assert sorted((r.address, r.deposed or "") for r in sliced.projection.resources) == sorted(
        (r.address, r.deposed or "") for r in projection.resources
        if r.address == deposed.address)


def test_outputs_only_and_outputs_with_resources() -> None:
    """outputs=true brings the outputs as stored; alone, no resource."""
    only = json.loads(slice_document(FULL, select(outputs=True)))
    assert only["outputs"] == json.loads(FULL)["outputs"] and only["resources"] == []
    both = json.loads(slice_document(FULL, select(outputs=True, modules=["module.net"])))
    assert both["outputs"] == json.loads(FULL)["outputs"] and both["resources"]


def test_projection_redacts_and_lists_dependencies() -> None:
    """The projected slice: rows as the projection has them (sensitive values
    redacted), dependencies, outputs without sensitive values."""
    document = slice_projection(FULL, select(outputs=True, types=["terraform_data"]))
    projection = parse_state(FULL).projection
    assert projection is not None
    assert [(row["address"], row["deposed"], json.dumps(row["attributes"], sort_keys=True))
            for row in document["resources"]] == [
        (row.address, row.deposed, json.dumps(json.loads(row.attributes), sort_keys=True))
        for row in projection.resources if row.type == "terraform_data"]
    assert '"(sensitive)"' in json.dumps(document)
    assert document["outputs"] and all(o["value"] is None for o in document["outputs"]
                                       if o["sensitive"])
    monolith = slice_projection(MONOLITH, select(addresses=["terraform_data.dep"]))
    assert {d["dependsOn"] for d in monolith["dependencies"]} >= {"terraform_data.old"}


def test_nothing_named_and_unreadable_states() -> None:
    """A selector naming nothing is a 400; an encrypted version a 409; bytes
    that are no state a 400."""
    with pytest.raises(BadRequest):
        Selector()
    with pytest.raises(BadRequest):
        Selector(modules=(parse_address("terraform_data.x"),))
    with pytest.raises(EncryptedState):
        slice_document(ENVELOPE, select(outputs=True))
    for raw in (b"[]", b'{"version": 3}', b'{"version": 4, "resources": [1,', b"\xff\xfe"):
        with pytest.raises(InvalidState):
            slice_document(raw, select(outputs=True))


@settings(max_examples=60, deadline=None)
@given(histories(), st.integers(1, 200), st.sampled_from(["r0", "r1", "r3"]))
def test_a_small_window_reads_the_same(history: tuple[bytes, bytes], window: int,
                                       name: str) -> None:
    """Decoding a window of a few characters at a time (values cut anywhere,
    numbers at the window's end) gives the slice a whole read gives, and
    the top-level members json.loads gives."""
    raw = history[0]
    selector = select(addresses=[f"terraform_data.{name}"], outputs=True)
    whole = slice_document(raw, selector)
    with mock.patch.object(scan, "WINDOW", window):
        assert slice_document(raw, selector) == whole
        members = scan_state(raw, lambda index, item, text: None)
    expected = {k: v for k, v in json.loads(raw).items() if k != "resources"}
    assert {name: member.value for name, member in members.items()} == expected
    assert json.loads(whole)["resources"] == [
        r for r in json.loads(raw)["resources"] if r["name"] == name]
