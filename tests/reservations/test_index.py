"""A state's index (kilolock.reservations.index): per resource, the digest
of its text, of its metadata and of each instance object's canonical form,
and where its text is; the same object written by another Terraform
version or with other whitespace indexes alike, any real change does not;
an index stores and loads as bytes; what is not a v4 state is refused."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from kilolock.core.errors import EncryptedState, InvalidState
from kilolock.reservations.canonical import canonical_digest, decode_canonical
from kilolock.reservations.index import StateIndex, index_state
from kilolock.reservations.model import instance_address
from tests.support.paths import SAMPLE_STATES
from tests.support.state_samples import ENVELOPE
from tests.support.state_strategies import (
    instance_object,
    resource_document,
    state_document,
    terraform_bytes,
)

FULL = (SAMPLE_STATES / "full.tfstate").read_bytes()


def digest_of(item: dict[str, Any]) -> bytes:
    raw = terraform_bytes(state_document([resource_document("", "managed", "terraform_data",
                                                            "x", [item])]))
    return index_state(raw).entries[0].objects[0][2]


def test_a_state_indexes_every_object_in_terraforms_order() -> None:
    """The index of a real state lists its resources in the state's order,
    and its objects are the instances `terraform state list` prints."""
    index = index_state(FULL)
    listed = (SAMPLE_STATES / "full.addresses.txt").read_text().splitlines()
    addresses = [instance_address(resource, key) for resource, key, _ in index.instances()]
    assert sorted(addresses) == sorted(listed)
    assert index.ordered and index.serial == json.loads(FULL)["serial"]
    assert index.lineage == json.loads(FULL)["lineage"]
    assert json.loads(index.outputs) == json.loads(FULL)["outputs"]
    assert index.offsets is not None
    for start, length in zip(index.offsets, index.lengths, strict=True):
        assert json.loads(FULL[start:start + length])["instances"]


def test_zero_valued_fields_and_number_spellings_are_the_same_object() -> None:
    """Fields Terraform leaves out when zero (status, deposed, private,
    dependencies, identity, create_before_destroy, ...), the fields later
    versions added at their zero, whitespace, key order and the spelling
    of a number do not change an object's digest."""
    item = instance_object({"n": 1.5, "m": 100, "z": 0.000001})
    plain = digest_of(item)
    padded = {**item, "status": "", "private": "", "dependencies": [], "identity": None,
              "create_before_destroy": False, "attributes_flat": None}
    older = {name: value for name, value in item.items()
             if name not in ("identity_schema_version", "sensitive_attributes")}
    spelled = copy.deepcopy(item)
    assert digest_of(padded) == plain and digest_of(older) == plain
    texts = json.dumps(item).replace("1.5", "1.50").replace("100", "1e2").replace(
        "1e-06", "0.0000010")
    assert canonical_digest(decode_canonical(texts.encode())) == canonical_digest(
        decode_canonical(json.dumps(spelled, indent=4, sort_keys=True).encode()))


@pytest.mark.parametrize("change", [
    lambda item: item["attributes"].update(input=2),
    lambda item: item["attributes"].update(input=True),
    lambda item: item.update(status="tainted"),
    lambda item: item.update(dependencies=["terraform_data.b"]),
    lambda item: item.update(identity={"id": "abc"}),
    lambda item: item.update(sensitive_attributes=[[{"type": "get_attr", "value": "input"}]]),
    lambda item: item.update(private="eyJ4Ijp0cnVlfQ=="),
    lambda item: item.update(schema_version=1),
])
def test_any_real_change_is_a_new_digest(change: Any) -> None:
    """A value (even 1 becoming true), the status, dependencies, identity,
    sensitive paths, private data or schema version changed is another
    object."""
    item = instance_object(1)
    changed = copy.deepcopy(item)
    change(changed)
    assert digest_of(changed) != digest_of(item)


def test_an_index_stores_and_loads_and_reuses_a_previous_one() -> None:
    """to_bytes/from_bytes keep everything; indexing with a previous index
    gives the index made from nothing."""
    index = index_state(FULL)
    loaded = StateIndex.from_bytes(index.to_bytes())
    assert (loaded.resources, loaded.entries, loaded.offsets, loaded.lengths, loaded.size,
            loaded.outputs, loaded.check_results, loaded.lineage, loaded.serial,
            loaded.terraform_version) == (
        index.resources, index.entries, index.offsets, index.lengths, index.size,
        index.outputs, index.check_results, index.lineage, index.serial,
        index.terraform_version)
    document = json.loads(FULL)
    document["resources"][3]["instances"][0]["attributes"]["id"] = "changed"
    changed = terraform_bytes(document)
    fresh, reused = index_state(changed), index_state(changed, loaded)
    assert fresh.entries == reused.entries and fresh.resources == reused.resources
    assert fresh.entries[3] != index.entries[3]
    assert fresh.entries[:3] == index.entries[:3]


def test_offsets_are_found_in_any_layout_and_left_out_when_unclear() -> None:
    """Compact text is indexed with its offsets; a member written twice
    leaves them unknown (None), and the index is still made."""
    compact = json.dumps(json.loads(FULL), separators=(",", ":")).encode()
    index = index_state(compact)
    assert index.offsets is not None
    assert [json.loads(compact[start:start + length])["name"]
            for start, length in zip(index.offsets, index.lengths, strict=True)] == [
        resource["name"] for resource in json.loads(FULL)["resources"]]
    twice = compact.replace(b'"serial":', b'"serial":1,"serial":', 1)
    assert index_state(twice).offsets is None
    assert index_state(twice).entries == index.entries


def test_text_only_json_reads_is_indexed() -> None:
    """A state holding what msgspec refuses (an escaped lone surrogate) is
    indexed all the same, its objects (written with every non-ASCII
    character escaped) to the same digests."""
    document = json.loads(FULL)
    document["resources"][0]["instances"][0]["attributes"]["odd"] = "\ud800"
    raw = json.dumps(document, indent=2).encode()
    assert b"\\ud800" in raw
    index = index_state(raw)
    assert len(index.resources) == len(document["resources"])
    assert [(entry.header, entry.objects) for entry in index.entries[1:]] == [
        (entry.header, entry.objects) for entry in index_state(FULL).entries[1:]]
    assert index.entries[0].objects != index_state(FULL).entries[0].objects


@pytest.mark.parametrize(("raw", "error", "words"), [
    (ENVELOPE, EncryptedState, "OpenTofu encrypted state"),
    (b"[1, 2]", InvalidState, "expected a JSON object"),
    (b'{"version": 3, "serial": 1, "lineage": "x"}', InvalidState, "version 4"),
    (b'{"version": 4, "serial": 1, "lineage": "x", "resources": [', InvalidState, "not valid"),
    (b"", InvalidState, "empty"),
    (b"\xef\xbb\xbf{}", InvalidState, "byte order mark"),
])
def test_what_is_not_a_v4_state_is_refused(raw: bytes, error: type[Exception],
                                           words: str) -> None:
    """An encrypted envelope is EncryptedState (409); anything else that is
    not a v4 state InvalidState (400), naming what is wrong."""
    with pytest.raises(error, match=words):
        index_state(raw)


def test_a_resource_listed_twice_is_refused() -> None:
    """Terraform never writes a resource twice; such a state is refused,
    naming the position."""
    document = json.loads(FULL)
    document["resources"].append(document["resources"][2])
    with pytest.raises(InvalidState, match=r"resources\[9\] repeats a resource"):
        index_state(terraform_bytes(document))
