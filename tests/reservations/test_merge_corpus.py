"""The reservation merge on states real Terraform 1.15.5 wrote
(tests/data/reservations, made by its generate.py): views that each ran a
targeted apply, destroy, failed replacement or moved-block rename from one
base, merged into one lineage in turn -- modules under for_each, count and
for_each instances, tainted and deposed objects, sensitive values, moved
blocks, check blocks, data sources -- and, for the end of each scenario,
`terraform plan` of the merged state against the configuration with every
view's change in: Terraform reads it and finds the changes expected (none
for most).  Resource identity, which no built-in provider returns, is
checked on hand-written states (identity/)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from kilolock.reservations.index import StateIndex, index_state
from kilolock.reservations.model import parse_claims
from kilolock.reservations.outcome import Merged, MergeOutcome, RefusalRule, Unchanged
from kilolock.tfstate.parse import parse_state
from tests.support.paths import TESTS
from tests.support.reservation_merging import merge, merged, refused, units_of
from tests.support.terraform import Terraform

CORPUS = TESTS / "data" / "reservations"
SCENARIOS = sorted(path.name for path in CORPUS.iterdir() if (path / "scenario.json").exists())


def described(name: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((CORPUS / name / "scenario.json").read_text())
    return document


def state(name: str, view: str) -> bytes:
    return (CORPUS / name / f"{view}.tfstate").read_bytes()


def in_turn(name: str, *views: str) -> tuple[bytes, list[MergeOutcome]]:
    """The scenario's base, with each view's state merged in turn (each
    view's base is the scenario's base); the state at the end and every
    outcome."""
    base = index_state(state(name, "base"))
    main, main_index = state(name, "base"), None
    outcomes: list[MergeOutcome] = []
    for view in views:
        write = parse_claims(described(name)["views"][view]["write"], "write")
        outcome = merge(state(name, view), main, base, write, main_index=main_index)
        outcomes.append(outcome)
        if isinstance(outcome, Merged):
            main, main_index = outcome.raw, outcome.index
    return main, outcomes


def instance_values(raw: bytes) -> dict[tuple[Any, ...], list[Any]]:
    """Each instance's objects' inputs (with status and deposed key)."""
    return {unit: [(_unwrapped(item["attributes"].get("input")), item.get("status"),
                    item.get("deposed")) for item in objects]
            for unit, objects in units_of(raw).items()}


def _unwrapped(value: Any) -> Any:
    """A dynamically typed attribute's value (terraform_data's input)."""
    return value["value"] if isinstance(value, dict) and set(value) == {"value", "type"} \
        else value


VIEWS = [(name, view) for name in SCENARIOS for view in described(name)["views"]
         if view != "untargeted"]


@pytest.mark.parametrize(("name", "view"), VIEWS)
def test_each_view_alone_merges_into_its_base(name: str, view: str) -> None:
    """Each view's state merged into the base it started from is taken
    whole: the merged resources are the view's, its outputs the view's,
    and the merged state parses with the base's lineage and serial + 1."""
    result = merged(merge(state(name, view), state(name, "base"), state(name, "base"),
                          parse_claims(described(name)["views"][view]["write"], "write")))
    assert units_of(result.raw) == units_of(state(name, view))
    assert json.loads(result.raw)["outputs"] == json.loads(state(name, view))["outputs"]
    parsed = parse_state(result.raw)
    base = parse_state(state(name, "base"))
    assert (parsed.lineage, parsed.serial) == (base.lineage, base.serial + 1)


def test_parallel_targeted_applies_merge_into_one_lineage() -> None:
    """S1: the views of a and of b both merge; the data source b's run read
    again is taken; outputs a and b are each view's, ab (over both) stays
    as it was; the check results of the targeted runs (unknown, no objects)
    leave the base's pass."""
    raw, outcomes = in_turn("parallel", "a", "b")
    assert all(isinstance(outcome, Merged) for outcome in outcomes)
    values = instance_values(raw)
    assert values[("", "managed", "terraform_data", "a", None)] == [("a1", None, None)]
    assert values[("", "managed", "terraform_data", "b", None)] == [("b1-x1", None, None)]
    ext = units_of(raw)[("", "data", "terraform_remote_state", "ext", None)][0]
    assert ext["attributes"]["outputs"]["value"] == {"x": "x1"}
    document = json.loads(raw)
    assert {name: output["value"] for name, output in document["outputs"].items()} == {
        "a": "a1", "b": "b1-x1", "ab": "a0|b0-x0"}
    assert document["check_results"] == json.loads(state("parallel", "base"))["check_results"]


def test_an_untargeted_apply_leaking_outside_is_refused() -> None:
    """S1-leak: a plain apply through a view reserving only a changed a and
    b; the merge is refused, naming b."""
    _, outcomes = in_turn("parallel", "untargeted")
    outcome = refused(outcomes[0])
    assert outcome.reason == "change to terraform_data.b is outside the reservation"


def test_for_each_instances_and_module_instances_merge_with_their_outputs() -> None:
    """S7b: four views on n["x"], n["y"], module.m["p"], module.m["q"] and
    one on c[1]; every change is in, and the outputs aggregating n and m
    are merged by key."""
    raw, outcomes = in_turn("for_each", "nx", "ny", "mp", "mq", "c1")
    results = [merged(outcome) for outcome in outcomes]
    assert results[1].merged_outputs == ("n",) and results[3].merged_outputs == ("m",)
    document = json.loads(raw)
    assert document["outputs"]["n"]["value"] == {"x": "1", "y": "1"}
    assert document["outputs"]["m"]["value"] == {"p": "1", "q": "1"}
    assert document["outputs"]["c"]["value"] == ["0", "1"]
    values = instance_values(raw)
    assert values[('module.m["q"].module.inner', "managed", "terraform_data", "deep", 0)] == [
        ("1", None, None)]


def test_tainted_and_deposed_objects_merge_with_their_instance() -> None:
    """S1-deposed: a failed replacement leaves t tainted; a failed
    create_before_destroy leaves d tainted with its old object deposed;
    both merge while another view updates other."""
    raw, outcomes = in_turn("failures", "tainted", "deposed", "other")
    assert all(isinstance(outcome, Merged) for outcome in outcomes)
    units = units_of(raw)
    assert [item.get("status") for item in units[("", "managed", "terraform_data", "t", None)]
            ] == ["tainted"]
    d = units[("", "managed", "terraform_data", "d", None)]
    assert [(item.get("status"), bool(item.get("deposed"))) for item in d] == [
        ("tainted", False), (None, True)]
    assert instance_values(raw)[("", "managed", "terraform_data", "other", None)] == [
        ("o1", None, None)]


def test_sensitive_values_merge_and_never_reach_a_reason() -> None:
    """The view changing a sensitive input and a sensitive output merges;
    refused, its reason names only the address."""
    raw, outcomes = in_turn("sensitive", "s", "p")
    assert all(isinstance(outcome, Merged) for outcome in outcomes)
    document = json.loads(raw)
    assert document["outputs"]["s"]["sensitive"] is True
    assert document["outputs"]["s"]["value"]["password"] == "s1"
    outcome = refused(merge(state("sensitive", "s"), state("sensitive", "base"),
                            state("sensitive", "base"),
                            parse_claims(["terraform_data.p"], "write")))
    assert outcome.reason == "change to terraform_data.s is outside the reservation"


def test_a_moved_block_merges_when_both_addresses_are_claimed() -> None:
    """A moved block's rename removes the old address and creates the new
    one: claimed both, it merges beside another view's change; claimed the
    old address only, the new one is outside."""
    raw, outcomes = in_turn("moved", "rename", "keep")
    assert all(isinstance(outcome, Merged) for outcome in outcomes)
    names = {unit[3] for unit in units_of(raw)}
    assert names == {"new", "keep"}
    outcome = refused(merge(state("moved", "rename"), state("moved", "base"),
                            state("moved", "base"),
                            parse_claims(["terraform_data.old"], "write")))
    assert outcome.reason == "change to terraform_data.new is outside the reservation"


def test_check_results_of_targeted_runs_say_nothing() -> None:
    """Targeted runs write every check as unknown with no objects: the
    merged state keeps the base's results."""
    raw, outcomes = in_turn("checks", "a", "b")
    assert all(isinstance(outcome, Merged) for outcome in outcomes)
    assert json.loads(raw)["check_results"] == json.loads(state("checks", "base"))[
        "check_results"]


def test_a_targeted_destroy_and_an_update_merge_in_either_order() -> None:
    """S1-destroy: the destroyed instance goes, the update stays, whichever
    is merged first."""
    first, _ = in_turn("destroy", "d", "a")
    second, _ = in_turn("destroy", "a", "d")
    assert units_of(first) == units_of(second)
    assert {unit[3] for unit in units_of(first)} == {"a"}


def test_a_stale_read_is_refused_in_one_order_only() -> None:
    """S2a/S2d: c computed from b0 is refused once b1 is merged; merged
    before b, both go in (serialisable as c then b)."""
    _, outcomes = in_turn("stale", "b", "c")
    outcome = refused(outcomes[1])
    assert outcome.refusals[0].rule is RefusalRule.STALE_READ
    assert outcome.reason == ("terraform_data.c depends on terraform_data.b, which changed in"
                              " main since this view's base (stale read)")
    _, outcomes = in_turn("stale", "c", "b")
    assert all(isinstance(outcome, Merged) for outcome in outcomes)


def test_resource_identity_is_part_of_the_object() -> None:
    """An instance whose identity changed is a change (refused outside the
    write set, merged inside it); the same state written without identity
    fields by an older Terraform is the same objects."""
    identity = CORPUS / "identity"
    base, role, older = ((identity / f"{name}.tfstate").read_bytes()
                         for name in ("base", "role", "older"))
    outcome = refused(merge(role, base, base, parse_claims(["module.nest"], "write")))
    assert outcome.reason == "change to test_instance.root is outside the reservation"
    result = merged(merge(role, base, base, parse_claims(["test_instance.root"], "write")))
    assert units_of(result.raw)[("", "managed", "test_instance", "root", None)][0][
        "identity"]["role"] == "roles/editor-root"
    assert isinstance(merge(older, base, base, parse_claims([], "write")), Unchanged)


# -- Terraform reads the merged state -----------------------------------------

#: For each scenario, the views merged in turn, and what `terraform plan`
#: of the merged state with every view's change in the configuration must
#: plan: the resource changes (by address, actions), the outputs changed.
PLANS: dict[str, tuple[tuple[str, ...], dict[tuple[str, str | None], list[str]], set[str]]] = {
    "parallel": (("a", "b"), {}, {"ab"}),
    "for_each": (("nx", "ny", "mp", "mq", "c1"), {}, set()),
    "failures": (("tainted", "deposed", "other"), {
        ("terraform_data.t", None): ["delete", "create"],
        ("terraform_data.d", None): ["create", "delete"],
        ("terraform_data.d", "deposed"): ["delete"]}, set()),
    "sensitive": (("s", "p"), {}, set()),
    "moved": (("rename", "keep"), {}, set()),
    "checks": (("a", "b"), {}, set()),
    "destroy": (("d", "a"), {}, set()),
}


def configuration(name: str, directory: Path) -> Path:
    """The scenario's configuration with every view's change in."""
    source = CORPUS / name
    for path in source.rglob("*"):
        relative = path.relative_to(source)
        if (path.is_dir() or path.suffix == ".json" or relative.parts[0].endswith(".files")
                or (path.suffix == ".tfstate" and len(relative.parts) == 1
                    and path.stem in {"base", *described(name)["views"]})):
            continue
        (directory / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, directory / relative)
    final = source / "final.files"
    if final.exists():
        shutil.copytree(final, directory, dirs_exist_ok=True)
    return directory


@pytest.mark.terraform
@pytest.mark.parametrize("name", sorted(PLANS))
def test_terraform_plans_the_merged_state_as_expected(name: str, tmp_path: Path) -> None:
    """`terraform plan` of the merged state against the configuration with
    every view's change in plans only what is expected: no resource change
    (but replacing what a failed apply left tainted or deposed), and no
    output change but an output over several views' resources (S1's ab)."""
    views, expected_resources, expected_outputs = PLANS[name]
    raw, outcomes = in_turn(name, *views)
    assert all(isinstance(outcome, Merged) for outcome in outcomes)
    work = configuration(name, tmp_path / "work")
    (work / "terraform.tfstate").write_bytes(raw)
    terraform = Terraform(work, tmp_path / "scratch")
    terraform.init().check()
    terraform.plan("-out=plan.tfplan", *described(name)["final"]["vars"]).check()
    plan = json.loads(terraform.run("show", "-json", "plan.tfplan").check().stdout)
    changes = {(change["address"], "deposed" if change.get("deposed") else None):
               change["change"]["actions"] for change in plan.get("resource_changes", ())
               if change["change"]["actions"] != ["no-op"]}
    assert changes == expected_resources
    outputs = {output for output, change in plan.get("output_changes", {}).items()
               if change["actions"] != ["no-op"]}
    assert outputs == expected_outputs


def test_the_corpus_holds_what_it_says() -> None:
    """Every scenario's states were written by Terraform 1.15.5 and hold
    what the tests rely on (modules under for_each, deposed and tainted
    objects, sensitive paths, check results)."""
    seen: set[str] = set()
    for name in SCENARIOS:
        for view in ("base", *described(name)["views"]):
            document = json.loads(state(name, view))
            assert document["terraform_version"] == "1.15.5"
            text = state(name, view).decode()
            seen.update(word for word in ('"deposed"', '"tainted"', "sensitive_attributes\": [\n",
                                          'module.m[\\"p\\"]', '"check_results": [')
                        if word in text)
    assert seen == {'"deposed"', '"tainted"', "sensitive_attributes\": [\n",
                    'module.m[\\"p\\"]', '"check_results": ['}
    assert StateIndex.from_bytes(index_state(state("for_each", "base")).to_bytes()).ordered
