"""Terraform's `state mv` and `state rm` as Kilolock does them on stored
states (kilolock.stateops.moves, kilolock.stateops.document), checked against the
real Terraform: its own `state mv` on the same state moves the same
objects to the same addresses, and `terraform plan` of the refactored
configuration finds no change."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from kilolock.core.errors import EncryptedState
from kilolock.stateops.document import new_state, open_state, render_state
from kilolock.stateops.moves import (
    InvalidMove,
    NothingMatched,
    TargetExists,
    move,
    move_wanted,
    remove,
    remove_wanted,
)
from kilolock.tfstate.address import Target, parse_address
from kilolock.tfstate.parse import parse_state
from tests.support.paths import SAMPLE_STATES
from tests.support.refactor_configs import REMOVED, RENAMES, write_layout
from tests.support.state_samples import ENVELOPE
from tests.support.terraform import Terraform

STATES = SAMPLE_STATES
MONOLITH = (STATES / "monolith.tfstate").read_bytes()


def mv(raw: bytes, source: str, destination: str) -> bytes:
    from_, to = parse_address(source), parse_address(destination)
    state = open_state(raw, move_wanted(from_, to, source_state=True, destination_state=True))
    move(state, state, from_, to)
    state.replaced["serial"] = state.serial + 1
    return render_state(state)


def rm(raw: bytes, *addresses: str) -> bytes:
    targets = [parse_address(a) for a in addresses]
    state = open_state(raw, remove_wanted(targets))
    remove(state, targets)
    state.replaced["serial"] = state.serial + 1
    return render_state(state)


def objects(raw: bytes, dependencies: bool = False) -> dict[tuple[str, str | None], Any]:
    """Every instance object by (address, deposed), as stored (without its
    dependencies unless asked; an empty list of them, which Terraform omits
    and Kilolock writes as [], is no list)."""
    found = {}
    projection = parse_state(raw).projection
    assert projection is not None
    instances = [dict(instance) for resource in json.loads(raw)["resources"]
                 for instance in resource["instances"]]
    for row, instance in zip(projection.resources, instances, strict=True):
        instance.pop("index_key", None)
        if not dependencies or instance.get("dependencies") == []:
            instance.pop("dependencies", None)
        found[(row.address, row.deposed)] = instance
    return found


def dependencies_of(raw: bytes, address: str) -> list[str]:
    projection = parse_state(raw).projection
    assert projection is not None
    return [d.depends_on for d in projection.dependencies if d.address == address]


def test_moves_match_terraforms_own_state_mv(tmp_path: Path) -> None:
    """For each move (resource, module with a nested module, instance to a
    new resource, whole for_each resource, data source): Kilolock's result
    holds exactly the objects Terraform's `state mv` leaves, at the same
    addresses, each intact."""
    work = tmp_path / "tf"
    work.mkdir()
    terraform = Terraform(work, tmp_path / "scratch")
    raw = MONOLITH
    for source, destination in RENAMES:
        (work / "terraform.tfstate").write_bytes(raw)
        terraform.run("state", "mv", "-state=terraform.tfstate", source, destination).check()
        theirs = (work / "terraform.tfstate").read_bytes()
        ours = mv(raw, source, destination)
        assert objects(ours) == objects(theirs), (source, destination)
        assert parse_state(ours).serial == parse_state(raw).serial + 1
        assert parse_state(ours).lineage == parse_state(raw).lineage
        raw = ours


def test_refactored_state_plans_no_change(tmp_path: Path) -> None:
    """Every move and the removal, then the refactored configuration:
    `terraform plan -detailed-exitcode` exits 0 (no changes)."""
    raw = MONOLITH
    for source, destination in RENAMES:
        raw = mv(raw, source, destination)
    raw = rm(raw, *REMOVED)
    work = write_layout(tmp_path / "tf", "renamed")
    (work / "terraform.tfstate").write_bytes(raw)
    terraform = Terraform(work, tmp_path / "scratch")
    terraform.init().check()
    result = terraform.plan("-detailed-exitcode")
    assert result.rc == 0, result.describe()
    assert "No changes." in result.output


def test_dependencies_are_rewritten_when_exact_and_emptied_otherwise() -> None:
    """A rename of a whole resource or module rewrites the dependency entries
    naming it; an instance moved out of a resource that keeps others empties
    the lists naming that resource, as Terraform does."""
    assert "terraform_data.old" in dependencies_of(MONOLITH, "terraform_data.dep")
    renamed = mv(MONOLITH, "terraform_data.old", "terraform_data.renamed")
    after = dependencies_of(renamed, "terraform_data.dep")
    assert "terraform_data.renamed" in after and "terraform_data.old" not in after
    vpc = dependencies_of(MONOLITH, "module.net.terraform_data.vpc")
    assert vpc == ["module.net.terraform_data.subnet"]
    moved = mv(MONOLITH, "module.net", "module.network")
    assert dependencies_of(moved, "module.network.terraform_data.vpc") == [
        "module.network.terraform_data.subnet"]
    split = mv(MONOLITH, "terraform_data.items[2]", "terraform_data.extra")
    assert dependencies_of(split, "terraform_data.dep") == []


def _move_out(raw: bytes, source: str, destination: str) -> tuple[bytes, bytes]:
    """Kilolock's move of C{source} into a new state: (the source state, the
    new state)."""
    from_, to = parse_address(source), parse_address(destination)
    state = open_state(raw, move_wanted(from_, to, source_state=True,
                                        destination_state=False))
    other = new_state(state)
    move(state, other, from_, to)
    state.replaced["serial"] = state.serial + 1
    return render_state(state), render_state(other)


@pytest.mark.parametrize(("source", "destination"), [
    ("module.net", "module.net"), ("terraform_data.old", "terraform_data.old"),
    ("terraform_data.dep", "terraform_data.dep"), ("terraform_data.items[2]",
                                                   "terraform_data.extra")])
def test_dependencies_across_states_are_kept_as_terraform_keeps_them(
        tmp_path: Path, source: str, destination: str) -> None:
    """A move into another state leaves the dependency lists of the source
    state as they were, entries naming what left included, exactly as
    Terraform's own `state mv -state-out` leaves them (compared with it);
    what moved keeps its own entries, those naming what stayed behind
    included.  (The destination's entries naming what moved are rewritten
    when exact: the documented difference from Terraform, which empties
    them.)"""
    work = tmp_path / "tf"
    work.mkdir()
    (work / "mono.tfstate").write_bytes(MONOLITH)
    Terraform(work, tmp_path / "scratch").run(
        "state", "mv", "-state=mono.tfstate", "-state-out=other.tfstate", source,
        destination).check()
    theirs = (work / "mono.tfstate").read_bytes()
    ours, other = _move_out(MONOLITH, source, destination)
    assert objects(ours, dependencies=True) == objects(theirs, dependencies=True)
    stored = dependencies_of(MONOLITH, "terraform_data.dep")
    if source != "terraform_data.dep":
        assert dependencies_of(ours, "terraform_data.dep") == stored
    else:
        assert dependencies_of(other, "terraform_data.dep") == stored
        assert "terraform_data.old" in stored and ("terraform_data.old", None) in objects(ours)


def test_dependencies_after_a_key_move_are_emptied_as_terraform_empties_them(
        tmp_path: Path) -> None:
    """An instance moved to another key of its resource (items[2] to
    items[7]): a dependency names a resource, never a key, so the lists
    naming that resource cannot be rewritten exactly and are emptied, as
    Terraform's own `state mv` empties them (compared with it, dependencies
    included); the instances themselves move intact."""
    work = tmp_path / "tf"
    work.mkdir()
    (work / "terraform.tfstate").write_bytes(MONOLITH)
    Terraform(work, tmp_path / "scratch").run(
        "state", "mv", "-state=terraform.tfstate", "terraform_data.items[2]",
        "terraform_data.items[7]").check()
    theirs = (work / "terraform.tfstate").read_bytes()
    ours = mv(MONOLITH, "terraform_data.items[2]", "terraform_data.items[7]")
    assert objects(ours, dependencies=True) == objects(theirs, dependencies=True)
    assert "terraform_data.items" in dependencies_of(MONOLITH, "terraform_data.dep")
    assert dependencies_of(ours, "terraform_data.dep") == []
    assert objects(ours)[("terraform_data.items[7]", None)] == objects(MONOLITH)[
        ("terraform_data.items[2]", None)]


def test_untouched_resources_stay_byte_for_byte() -> None:
    """Resources a move does not touch are written as they were stored."""
    moved = mv(MONOLITH, "terraform_data.legacy", "terraform_data.heirloom").decode()
    for resource in json.loads(MONOLITH)["resources"]:
        if resource["name"] in ("legacy", "dep"):
            continue
        text = json.dumps(resource, indent=2).replace("\n", "\n    ")
        assert text in moved, resource["name"]


def test_refused_moves() -> None:
    """Nothing at the source, a taken destination, a change of mode or
    type, a whole keyed resource to an instance, a module into itself."""
    with pytest.raises(NothingMatched):
        mv(MONOLITH, "terraform_data.nothing", "terraform_data.else")
    with pytest.raises(NothingMatched):
        mv(MONOLITH, "module.none", "module.other")
    with pytest.raises(NothingMatched):
        mv(MONOLITH, "terraform_data.items[9]", "terraform_data.x")
    with pytest.raises(TargetExists):
        mv(MONOLITH, "terraform_data.old", "terraform_data.legacy")
    with pytest.raises(TargetExists):
        mv(MONOLITH, "module.app", "module.net")
    with pytest.raises(TargetExists):
        mv(MONOLITH, "terraform_data.items[0]", "terraform_data.items[1]")
    for source, destination in (("terraform_data.old", "null_resource.old"),
                                ("terraform_data.old", "data.terraform_data.old"),
                                ("terraform_data.keyed", "terraform_data.other[0]"),
                                ("module.app", "module.app.module.deeper"),
                                ("module.app", "terraform_data.app")):
        with pytest.raises(InvalidMove):
            mv(MONOLITH, source, destination)


def test_instance_moves_within_and_into_resources() -> None:
    """An instance to another key of its resource, and a resource without a
    key to a keyed instance of a new resource (Terraform's sourceObjectAddrs)."""
    before = objects(MONOLITH)
    rekeyed = objects(mv(MONOLITH, "terraform_data.items[2]", "terraform_data.items[7]"))
    assert rekeyed[("terraform_data.items[7]", None)] == before[("terraform_data.items[2]",
                                                                 None)]
    keyed = objects(mv(MONOLITH, "terraform_data.old", "terraform_data.many[3]"))
    assert keyed[("terraform_data.many[3]", None)] == before[("terraform_data.old", None)]


def test_remove() -> None:
    """A module address removes what is below it; an instance only itself; an
    address that matches nothing refuses the whole request."""
    removed = objects(rm(MONOLITH, "module.app", "terraform_data.items[0]"))
    assert not any(address.startswith("module.app.") for address, _ in removed)
    assert ("terraform_data.items[1]", None) in removed
    assert ("terraform_data.items[0]", None) not in removed
    with pytest.raises(NothingMatched):
        rm(MONOLITH, "terraform_data.legacy", "terraform_data.ghost")


def test_move_to_another_state() -> None:
    """To a new state: a new lineage, serial 1, the source's Terraform version;
    the source keeps its lineage.  Moving back restores every object."""
    from_, to = parse_address("module.net"), parse_address("module.net")
    source = open_state(MONOLITH, move_wanted(from_, to, source_state=True,
                                              destination_state=False))
    destination = new_state(source)
    move(source, destination, from_, to)
    destination_raw = render_state(destination)
    parsed = parse_state(destination_raw)
    assert parsed.serial == 1 and parsed.lineage != parse_state(MONOLITH).lineage
    assert parsed.terraform_version == "1.15.5"
    assert set(objects(destination_raw)) == {key for key in objects(MONOLITH)
                                             if key[0].startswith("module.net.")}
    source.replaced["serial"] = source.serial + 1
    trunk = render_state(source)
    back = open_state(trunk, move_wanted(from_, to, source_state=False, destination_state=True))
    net = open_state(destination_raw, move_wanted(from_, to, source_state=True,
                                                  destination_state=False))
    move(net, back, from_, to)
    assert objects(render_state(back), dependencies=True) == objects(MONOLITH,
                                                                     dependencies=True)


def test_module_to_the_root_of_a_new_state(tmp_path: Path) -> None:
    """A split to the root: module.net's resources at the root of a new
    state, which the real Terraform plans as its own root module without
    change."""
    from_ = parse_address("module.net")
    source = open_state(MONOLITH, move_wanted(from_, from_, source_state=True,
                                              destination_state=False))
    destination = new_state(source)
    move(source, destination, from_, Target(), root=True)
    raw = render_state(destination)
    assert dependencies_of(raw, "terraform_data.vpc") == ["terraform_data.subnet"]
    work = write_layout(tmp_path / "net", "network_root")
    shutil.rmtree(work / "modules")
    (work / "terraform.tfstate").write_bytes(raw)
    terraform = Terraform(work, tmp_path / "scratch")
    terraform.init().check()
    result = terraform.plan("-detailed-exitcode")
    assert result.rc == 0, result.describe()


def test_an_encrypted_state_cannot_be_refactored() -> None:
    """Nothing in an OpenTofu encrypted envelope can be moved (409)."""
    with pytest.raises(EncryptedState):
        mv(ENVELOPE, "terraform_data.a", "terraform_data.b")
