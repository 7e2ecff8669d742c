"""Each rule of the reservation merge (kilolock.reservations.merge), one
test at a time: what is taken, what is kept, every refusal and its words,
what a body that is not a state gets (a 400, nothing merged)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from kilolock.core.errors import InvalidState
from kilolock.reservations.index import index_state
from kilolock.reservations.model import ReservationSets, parse_claims
from kilolock.reservations.outcome import (
    InstanceChange,
    MergePolicy,
    RefusalRule,
    Unchanged,
)
from kilolock.tfstate.parse import parse_state
from tests.support.reservation_merging import instance_texts, merge, merged, refused, units_of
from tests.support.state_samples import ENVELOPE
from tests.support.state_strategies import (
    LINEAGE,
    PROVIDER,
    instance_object,
    resource_document,
    state_document,
    terraform_bytes,
)


def r(name: str, *objects: dict[str, Any], module: str = "", mode: str = "managed",
      type_: str = "terraform_data", provider: str = PROVIDER) -> dict[str, Any]:
    return resource_document(module, mode, type_, name, list(objects), provider)


def o(value: Any, key: Any = None, **fields: Any) -> dict[str, Any]:
    return instance_object(value, key, **fields)


def tf(*resources: dict[str, Any], serial: int = 1, **options: Any) -> bytes:
    return terraform_bytes(state_document([json.loads(json.dumps(resource))
                                           for resource in resources], serial=serial,
                                          **options))


def write(*addresses: Any) -> Any:
    return parse_claims(list(addresses), "write")


def value(raw: bytes, name: str, key: Any = None, module: str = "") -> Any:
    objects = units_of(raw)[(module, "managed", "terraform_data", name, key)]
    return [item["attributes"]["input"] for item in objects]


C0 = o("c0", dependencies=("terraform_data.b",))
BASE = tf(r("a", o("a0")), r("b", o("b0")), r("c", C0), serial=5)


def test_a_claimed_change_is_merged_and_everything_else_kept_byte_for_byte() -> None:
    """The view's change of a claimed instance is taken; what main changed
    meanwhile is kept, byte for byte; the serial is main's + 1, the
    lineage main's; the change is reported."""
    main = tf(r("a", o("a0")), r("b", o("b1")), r("c", C0), serial=9)
    theirs = tf(r("a", o("a1")), r("b", o("b0")),
                r("c", o("c0", dependencies=("terraform_data.b",))), serial=6)
    result = merged(merge(theirs, main, BASE, write("terraform_data.a")))
    assert value(result.raw, "a") == ["a1"] and value(result.raw, "b") == ["b1"]
    assert instance_texts(result.raw)[((("", "managed", "terraform_data", "b", None)), "")] \
        == instance_texts(main)[(("", "managed", "terraform_data", "b", None), "")]
    parsed = parse_state(result.raw)
    assert (parsed.serial, parsed.lineage, result.serial) == (10, LINEAGE, 10)
    assert result.changes == (InstanceChange("terraform_data.a", "update"),)
    assert result.sha256 == hashlib.sha256(result.raw).hexdigest()


def test_creates_and_destroys_through_a_view() -> None:
    """An instance absent from the base is created, one absent from the
    view's state removed -- each claimed; a new resource takes its place in
    Terraform's order, a resource left without instances is dropped."""
    theirs = tf(r("a", o("a0")), r("aa", o("new")), r("b", o("b0")), serial=6)
    result = merged(merge(theirs, BASE, BASE, write("terraform_data.aa", "terraform_data.c")))
    assert [resource["name"] for resource in json.loads(result.raw)["resources"]] == [
        "a", "aa", "b"]
    assert set(result.changes) == {InstanceChange("terraform_data.aa", "create"),
                                   InstanceChange("terraform_data.c", "delete")}


def test_a_change_outside_the_reservation_is_refused() -> None:
    """An instance changed but not claimed refuses the merge (409), in
    words naming it (S1-leak)."""
    theirs = tf(r("a", o("a2")), r("b", o("b2")),
                r("c", o("c0", dependencies=("terraform_data.b",))), serial=6)
    outcome = refused(merge(theirs, BASE, BASE, write("terraform_data.a")))
    assert outcome.reason == "change to terraform_data.b is outside the reservation"
    error = outcome.error()
    assert (error.status, error.code, error.message) == (409, "merge_refused", outcome.reason)
    assert error.details() == {"rules": ["outside_reservation"],
                               "addresses": ["terraform_data.b"]}


def test_a_change_another_reservation_holds_names_the_holder() -> None:
    """When another reservation claims the instance (write or read), the
    refusal says which (S8b), under either policy."""
    theirs = tf(r("a", o("a0")), r("b", o("b2")),
                r("c", o("c0", dependencies=("terraform_data.b",))), serial=6)
    others = {"B2": ReservationSets(write("terraform_data.b")),
              "R9": ReservationSets(read=parse_claims(["terraform_data"
                                                       ".b"], "read", creates=False))}
    for policy in MergePolicy:
        outcome = refused(merge(theirs, BASE, BASE, write("terraform_data.c"), others=others,
                                policy=policy))
        assert outcome.reason == ("change to terraform_data.b is outside the reservation and"
                                  " held by B2, R9")
        assert outcome.refusals[0].holders == ("B2", "R9")


def test_auto_widen_takes_what_nobody_holds_and_main_left_alone() -> None:
    """With the auto-widen policy a change outside the write set is taken
    and reported when no other reservation holds it and main has not
    changed it (S8a); when main has, it is refused."""
    theirs = tf(r("a", o("a1")), r("b", o("b1")),
                r("c", o("c0", dependencies=("terraform_data.b",))), serial=6)
    result = merged(merge(theirs, BASE, BASE, write("terraform_data.a"),
                          policy=MergePolicy.AUTO_WIDEN))
    assert result.auto_widened == ("terraform_data.b",)
    assert InstanceChange("terraform_data.b", "update", auto_widened=True) in result.changes
    main = tf(r("a", o("a0")), r("b", o("b9")), r("c", C0), serial=9)
    outcome = refused(merge(theirs, main, BASE, write("terraform_data.a"),
                            policy=MergePolicy.AUTO_WIDEN))
    assert outcome.reason == "change to terraform_data.b is outside the reservation"


def test_an_instance_main_changed_since_the_base_is_refused() -> None:
    """A write-write conflict: main changed an instance the view changed,
    since the view's base."""
    main = tf(r("a", o("a9")), r("b", o("b0")), r("c", C0), serial=9)
    theirs = tf(r("a", o("a1")), r("b", o("b0")),
                r("c", o("c0", dependencies=("terraform_data.b",))), serial=6)
    outcome = refused(merge(theirs, main, BASE, write("terraform_data.a")))
    assert outcome.refusals[0].rule is RefusalRule.CHANGED_IN_MAIN
    assert outcome.reason.startswith("terraform_data.a changed in main since this view's base")


def test_a_stale_read_is_refused() -> None:
    """An object the view writes depends on a resource main changed since
    the base (S2a)."""
    main = tf(r("a", o("a0")), r("b", o("b1")), r("c", C0), serial=9)
    theirs = tf(r("a", o("a0")), r("b", o("b0")),
                r("c", o("c1", dependencies=("terraform_data.b",))), serial=6)
    outcome = refused(merge(theirs, main, BASE, write("terraform_data.c")))
    assert outcome.reason == ("terraform_data.c depends on terraform_data.b, which changed in"
                              " main since this view's base (stale read)")
    assert (outcome.refusals[0].rule, outcome.refusals[0].dependency) == (
        RefusalRule.STALE_READ, "terraform_data.b")


def test_no_stale_read_where_the_view_saw_mains_value_or_a_data_source() -> None:
    """A dependency the view's state has exactly as main has it was read
    fresh; a data source dependency is never a stale read; a dependency
    inside a module instance is found by its configuration address."""
    main = tf(r("a", o("a0")), r("b", o("b1")), r("c", C0), serial=9)
    theirs = tf(r("a", o("a0")), r("b", o("b1")),
                r("c", o("c1", dependencies=("terraform_data.b",))), serial=6)
    merged(merge(theirs, main, BASE, write("terraform_data.c")))
    base = tf(r("ext", o("x0"), mode="data", type_="terraform_remote_state"), r("c", o("c0")))
    main = tf(r("ext", o("x1"), mode="data", type_="terraform_remote_state"), r("c", o("c0")),
              serial=2)
    theirs = tf(r("ext", o("x0"), mode="data", type_="terraform_remote_state"),
                r("c", o("c1", dependencies=("data.terraform_remote_state.ext",))), serial=2)
    merged(merge(theirs, main, base, write("terraform_data.c")))
    base = tf(r("r", o("r0"), module='module.e["p"]'), r("c", o("c0")))
    main = tf(r("r", o("r1"), module='module.e["p"]'), r("c", o("c0")), serial=2)
    theirs = tf(r("r", o("r0"), module='module.e["p"]'),
                r("c", o("c1", dependencies=("module.e.terraform_data.r",))), serial=2)
    outcome = refused(merge(theirs, main, base, write("terraform_data.c")))
    assert outcome.refusals[0].dependency == "module.e.terraform_data.r"


def test_a_dependency_in_the_writers_module_instance_is_that_instance() -> None:
    """A dependency names a resource by its configuration address
    (module.e.terraform_data.r); from inside module.e["q"] that is
    module.e["q"]'s resource only -- main changing module.e["p"]'s is no
    stale read (found on Terraform's own states: two views, one per module
    instance); main changing module.e["q"]'s is, and from the root module
    any instance's is."""
    deep = ("module.e.terraform_data.r",)
    base = tf(r("r", o("p0"), module='module.e["p"]'), r("r", o("q0"), module='module.e["q"]'),
              r("deep", o("d0", 0, dependencies=deep), module='module.e["q"].module.inner'),
              r("top", o("t0", dependencies=deep)))
    main = tf(r("r", o("p1"), module='module.e["p"]'), r("r", o("q0"), module='module.e["q"]'),
              r("deep", o("d0", 0, dependencies=deep), module='module.e["q"].module.inner'),
              r("top", o("t0", dependencies=deep)), serial=2)
    theirs = tf(r("r", o("p0"), module='module.e["p"]'), r("r", o("q0"), module='module.e["q"]'),
                r("deep", o("d1", 0, dependencies=deep), module='module.e["q"].module.inner'),
                r("top", o("t0", dependencies=deep)), serial=2)
    merged(merge(theirs, main, base, write('module.e["q"]')))
    top = theirs.replace(b'"t0"', b'"t1"')
    outcome = refused(merge(top, main, base, write('module.e["q"]', "terraform_data.top")))
    assert [refusal.address for refusal in outcome.refusals] == ["terraform_data.top"]
    main_q = main.replace(b'"q0"', b'"q1"').replace(b'"p1"', b'"p0"')
    outcome = refused(merge(theirs, main_q, base, write('module.e["q"]')))
    assert outcome.reason == ('module.e["q"].module.inner.terraform_data.deep[0] depends on'
                              " module.e.terraform_data.r, which changed in main since this"
                              " view's base (stale read)")


def test_data_sources_last_writer_wins() -> None:
    """A data source the view read again is taken, claimed or not, even
    when main read it too (S1: x0 to x1)."""
    base = tf(r("ext", o("x0"), mode="data", type_="terraform_remote_state"), r("a", o("a0")))
    main = tf(r("ext", o("x1"), mode="data", type_="terraform_remote_state"), r("a", o("a0")),
              serial=2)
    theirs = tf(r("ext", o("x2"), mode="data", type_="terraform_remote_state"),
                r("a", o("a1")), serial=2)
    result = merged(merge(theirs, main, base, write("terraform_data.a")))
    ext = units_of(result.raw)[("", "data", "terraform_remote_state", "ext", None)]
    assert ext[0]["attributes"]["input"] == "x2"


def test_deposed_objects_go_with_their_instance() -> None:
    """A failed create_before_destroy replacement (tainted current object,
    deposed old one) is merged as one instance, while main's change to
    another instance is kept (S1-deposed)."""
    base = tf(r("d", o("d1", 0)), r("a", o("a0")))
    main = tf(r("d", o("d1", 0)), r("a", o("a4")), serial=2)
    theirs = tf(r("d", o("d2", 0, status="tainted"), o("d1", 0, deposed="f35c23ed")),
                r("a", o("a0")), serial=2)
    result = merged(merge(theirs, main, base, write("terraform_data.d[0]")))
    objects = units_of(result.raw)[("", "managed", "terraform_data", "d", 0)]
    assert [(item.get("status"), item.get("deposed")) for item in objects] == [
        ("tainted", None), (None, "f35c23ed")]
    assert value(result.raw, "a") == ["a4"]
    again = tf(r("d", o("d2", 0, status="tainted")), r("a", o("a0")), serial=3)
    result = merged(merge(again, result.raw, result.view_base, write("terraform_data.d[0]"),
                          main_index=result.index))
    assert value(result.raw, "d", 0) == ["d2"]


def test_instances_of_one_resource_merge_by_key() -> None:
    """Two views' instances of one for_each resource (n["x"], n["y"]) end
    up in one resource, each instance's text as its writer wrote it."""
    base = tf(r("n", o("0", "x"), o("0", "y")))
    main = tf(r("n", o("0", "x"), o("1", "y")), serial=2)
    theirs = tf(r("n", o("1", "x"), o("0", "y")), serial=2)
    result = merged(merge(theirs, main, base, write('terraform_data.n["x"]')))
    assert value(result.raw, "n", "x") == ["1"] and value(result.raw, "n", "y") == ["1"]
    texts = instance_texts(result.raw)
    unit = ("", "managed", "terraform_data", "n")
    assert texts[((*unit, "x"), "")] == instance_texts(theirs)[((*unit, "x"), "")]
    assert texts[((*unit, "y"), "")] == instance_texts(main)[((*unit, "y"), "")]
    assert result.raw == terraform_bytes(json.loads(result.raw))


def test_a_resources_metadata_needs_the_whole_resource() -> None:
    """The provider of a resource changed by the view needs the resource
    claimed whole, not one of its instances."""
    base = tf(r("n", o("0", "x"), o("0", "y")))
    other = 'provider["terraform.io/builtin/terraform"].alias'
    theirs = tf(r("n", o("1", "x"), o("0", "y"), provider=other), serial=2)
    outcome = refused(merge(theirs, base, base, write('terraform_data.n["x"]')))
    assert outcome.reason == ("change to the provider of terraform_data.n (a claim on the whole"
                              " resource terraform_data.n covers it) is outside the reservation")
    result = merged(merge(theirs, base, base, write("terraform_data.n")))
    assert json.loads(result.raw)["resources"][0]["provider"] == other


def test_state_level_refusals() -> None:
    """Another lineage, an OpenTofu encrypted state sent or stored, a
    current version that is not a state: refused with the reason."""
    other = tf(r("a", o("a1")), lineage="another")
    outcome = refused(merge(other, BASE, BASE, write("terraform_data.a")))
    assert (outcome.refusals[0].rule, outcome.reason) == (
        RefusalRule.LINEAGE_MISMATCH,
        f"the view was sent a state of lineage another, this state's is {LINEAGE}: a state of"
        " another lineage is never merged")
    outcome = refused(merge(ENVELOPE, BASE, BASE, write("terraform_data.a")))
    assert outcome.refusals[0].rule is RefusalRule.ENCRYPTED_STATE
    assert "the view was sent an OpenTofu encrypted state" in outcome.reason
    outcome = refused(merge(BASE, ENVELOPE, BASE, write("terraform_data.a")))
    assert "the state's current version is an OpenTofu encrypted state" in outcome.reason
    outcome = refused(merge(BASE, b'{"version": 3}', BASE, write("terraform_data.a")))
    assert outcome.refusals[0].rule is RefusalRule.UNREADABLE_STATE


def bad(change: Any) -> bytes:
    document = json.loads(BASE)
    change(document)
    return json.dumps(document, indent=2).encode()


@pytest.mark.parametrize(("body", "words"), [
    (b"not json", "not valid JSON"),
    (b"{}", "no state version"),
    (bad(lambda d: d.update(version=3)), "state version 3 is not supported"),
    (bad(lambda d: d.update(serial="7")), "no integer serial"),
    (bad(lambda d: d.update(outputs=[])), "outputs must be a JSON object"),
    (bad(lambda d: d.update(check_results={})), "check_results must be null or a list"),
    (bad(lambda d: d.update(check_results=[{"status": "pass"}])),
     r"check_results\[0\] must be an object"),
    (bad(lambda d: d["resources"][0].update(mode="other")), r"resources\[0\].mode must be"),
    (bad(lambda d: d["resources"][1].update(instances={})), r"resources\[1\].instances must"),
    (bad(lambda d: d["resources"][0]["instances"][0].update(index_key=1.5)),
     r"resources\[0\].instances\[0\].index_key"),
    (bad(lambda d: d["resources"][2]["instances"][0].update(dependencies=["not an address"])),
     r"resources\[2\].instances\[0\].dependencies names"),
    (bad(lambda d: d["resources"].append(d["resources"][0])),
     r"resources\[3\] repeats a resource"),
    (bad(lambda d: d["resources"].insert(0, d["resources"][2])), "repeats a resource"),
    (BASE.replace(b'"a0"', b'"a\xff"'), "not valid UTF-8"),
])
def test_a_body_that_is_not_a_state_is_a_400(body: bytes, words: str) -> None:
    """A view's body that is not a v4 state -- at the top, in a resource it
    changed, a resource twice -- is InvalidState (400) naming the position,
    whatever the reservation claims: nothing is merged."""
    with pytest.raises(InvalidState, match=words) as caught:
        merge(body, BASE, BASE, write("module.anything", "terraform_data.a", "terraform_data.b",
                                      "terraform_data.c"))
    assert caught.value.status == 400


def test_the_higher_terraform_version_and_mains_serial() -> None:
    """The merged version is main's serial + 1 whatever serial the view
    sent (its own counter), and the higher Terraform version."""
    main = tf(r("a", o("a0")), r("b", o("b0")), r("c", C0), serial=41)
    theirs = tf(r("a", o("a1")), r("b", o("b0")),
                r("c", o("c0", dependencies=("terraform_data.b",))), serial=1,
                terraform_version="1.16.0")
    result = merged(merge(theirs, main, BASE, write("terraform_data.a")))
    document = json.loads(result.raw)
    assert (document["serial"], document["terraform_version"]) == (42, "1.16.0")


def test_a_state_bringing_nothing_new_is_no_version() -> None:
    """The base sent back (another Terraform version, other whitespace, no
    fields Terraform 1.15 added) is no new version."""
    document = json.loads(BASE)
    for resource in document["resources"]:
        for item in resource["instances"]:
            del item["identity_schema_version"]
    document["terraform_version"] = "1.9.8"
    older = json.dumps(document).encode()
    outcome = merge(older, BASE, BASE, write("terraform_data.a"))
    assert isinstance(outcome, Unchanged)
    assert [(entry.header, entry.objects) for entry in outcome.view_base.entries] == [
        (entry.header, entry.objects) for entry in index_state(BASE).entries]


def test_intermediate_snapshots_merge_one_after_the_other() -> None:
    """An intermediate snapshot (check results null) merges its instances;
    the final state, against the advanced base, carries only what changed
    since: the output (S1)."""
    base = tf(r("a", o("a0")), outputs={"a": {"value": "a0", "type": "string"}},
              check_results=[{"object_kind": "check", "config_addr": "check.c",
                              "status": "pass", "objects": None}])
    intermediate = tf(r("a", o("a1")), serial=2,
                      outputs={"a": {"value": "a0", "type": "string"}})
    first = merged(merge(intermediate, base, base, write("terraform_data.a")))
    assert json.loads(first.raw)["check_results"] == json.loads(base)["check_results"]
    final = tf(r("a", o("a1")), serial=3, outputs={"a": {"value": "a1", "type": "string"}})
    second = merged(merge(final, first.raw, first.view_base, write("terraform_data.a"),
                          main_index=first.index))
    assert second.changes == ()
    assert json.loads(second.raw)["outputs"]["a"]["value"] == "a1"
    assert json.loads(second.raw)["serial"] == 3


def test_mains_index_is_optional_and_mains_layout_kept() -> None:
    """Without main's index the merge makes it; main written compactly
    keeps its untouched resources' text byte for byte."""
    main = json.dumps(json.loads(BASE), separators=(",", ":")).encode()
    theirs = tf(r("a", o("a1")), r("b", o("b0")),
                r("c", o("c0", dependencies=("terraform_data.b",))), serial=6)
    without = merged(merge(theirs, main, BASE, write("terraform_data.a")))
    with_index = merged(merge(theirs, main, BASE, write("terraform_data.a"),
                              main_index=index_state(main)))
    assert without.raw == with_index.raw
    unit = ("", "managed", "terraform_data", "b", None)
    assert instance_texts(without.raw)[(unit, "")] == instance_texts(main)[(unit, "")]
    assert parse_state(without.raw).serial == 6


def test_refusals_are_summed_up_and_never_carry_values() -> None:
    """Many refusals: the first five reasons and a count, every address
    listed; no value of the state is ever in a reason."""
    names = [f"r{index}" for index in range(7)]
    base = tf(*(r(name, o("hunter2-base")) for name in names))
    theirs = tf(*(r(name, o("hunter2-secret")) for name in names), serial=2)
    outcome = refused(merge(theirs, base, base, write("terraform_data.other")))
    assert outcome.reason.endswith("(and 2 more)")
    assert len(outcome.addresses) == 7
    assert "hunter2" not in outcome.reason


def test_an_index_of_other_bytes_is_not_used() -> None:
    """An index naming other bytes (another version's, of the same length)
    given as main's is set aside and main indexed afresh: the merged
    version's index is its own bytes' index."""
    main = tf(r("a", o("a0")), r("b", o("b1")), r("c", C0), serial=5)
    theirs = tf(r("a", o("a1")), r("b", o("b0")), r("c", C0), serial=6)
    other = index_state(BASE, sha256=hashlib.sha256(BASE).hexdigest())
    assert other.size == len(main)
    result = merged(merge(theirs, main, BASE, write("terraform_data.a"), main_index=other,
                          main_sha256=hashlib.sha256(main).hexdigest()))
    assert value(result.raw, "b") == ["b1"]
    assert result.index.entries == index_state(result.raw).entries
    assert result.index.sha256 == result.sha256
