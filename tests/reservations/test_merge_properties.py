"""Properties of the reservation merge (kilolock.reservations.merge) over
generated states -- modules (one under for_each), count and for_each
instances, deposed objects, dependencies, a data source, outputs -- and
generated edits: what a view changes inside its write set is taken, what
main changed is kept byte for byte, a change outside the write set is
refused, stale reads are refused exactly when an object depends on what
main changed, disjoint views commute, replays change nothing, and the
merged state parses with main's lineage and serial + 1."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kilolock.core.errors import BadRequest
from kilolock.reservations.index import index_state
from kilolock.reservations.model import instance_address
from kilolock.reservations.outcome import MergePolicy, RefusalRule, Unchanged
from kilolock.tfstate.parse import parse_state
from tests.support.reservation_merging import (
    instance_texts,
    merge,
    merged,
    refused,
    stale_units,
    units_of,
    written_dependencies,
)
from tests.support.state_strategies import (
    MODEL_UNITS,
    Model,
    UnitId,
    edits,
    model_bytes,
    model_document,
    model_outputs,
    models,
)

SETTINGS = settings(max_examples=80, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def state(model: Model, serial: int) -> bytes:
    return model_bytes(model, serial=serial, outputs=model_outputs(model))


def expected_objects(model: Model) -> dict[UnitId, list[dict[str, Any]]]:
    """A model's instances as a state written from it holds them."""
    return units_of(state(model, 1))


@st.composite
def two_writers(draw: st.DrawFn) -> tuple[Model, Model, Model, tuple[UnitId, ...],
                                          tuple[UnitId, ...]]:
    """A base, main (the base edited by another writer on some units) and
    theirs (the base edited by the view on other units), and both sets of
    units."""
    base = draw(models())
    units = draw(st.permutations(MODEL_UNITS))
    split = draw(st.integers(0, len(units)))
    others = tuple(units[:split][:draw(st.integers(0, 4))])
    view = tuple(units[split:][:draw(st.integers(1, 4))])
    assume(view)
    return base, draw(edits(base, others)), draw(edits(base, view)), others, view


@SETTINGS
@given(two_writers())
def test_view_changes_are_taken_and_mains_kept(case: tuple[Model, Model, Model, tuple[UnitId, ...],
                                                            tuple[UnitId, ...]]) -> None:
    """With disjoint units changed by main and by the view (its write set):
    every instance the view changed is the view's, every other one is
    main's byte for byte; the state parses, keeps main's lineage, has
    main's serial + 1; the aggregate output by key is merged, the list
    one kept stale when both changed it differently -- unless an object the view writes
    depends on what main changed: then exactly those are refused as stale
    reads."""
    base, main, theirs, others, view = case
    main_raw, theirs_raw = state(main, 7), state(theirs, 4)
    outcome = merge(theirs_raw, main_raw, state(base, 3), view)
    stale = stale_units(base, theirs, main, view, others)
    if stale:
        rules = {(refusal.rule, refusal.address) for refusal in refused(outcome).refusals}
        assert rules == {(RefusalRule.STALE_READ, instance_address(unit[:4], unit[4]))
                         for unit in stale}
        return
    result = merged(outcome)
    parsed = parse_state(result.raw)
    assert (parsed.serial, parsed.lineage) == (8, parse_state(main_raw).lineage)
    expected_model = {**main, **{unit: theirs[unit] for unit in view if unit in theirs}}
    for unit in view:
        if unit not in theirs:
            expected_model.pop(unit, None)
    assert units_of(result.raw) == expected_objects(expected_model)
    ours, mains = instance_texts(result.raw), instance_texts(main_raw)
    for (unit, deposed), text in ours.items():
        if unit not in view:
            assert text == mains[(unit, deposed)]
    outputs = json.loads(result.raw)["outputs"]
    expected_outputs = model_outputs(expected_model)
    assert outputs["n"] == expected_outputs["n"]
    main_c, base_c, theirs_c = (model_outputs(m)["c"] for m in (main, base, theirs))
    if theirs_c != base_c and main_c != base_c:
        assert outputs["c"] == main_c
        assert ("c" in result.stale_outputs) == (theirs_c != main_c)
    else:
        assert outputs["c"] == expected_outputs["c"] and "c" not in result.stale_outputs


@SETTINGS
@given(two_writers())
def test_indexes_and_projection_of_a_merge_are_those_of_its_bytes(
        case: tuple[Model, Model, Model, tuple[UnitId, ...], tuple[UnitId, ...]]) -> None:
    """The merged version's index is the index of its bytes (offsets
    included), the view's next base the index of the state it sent, and
    the projection as changes to main's is the projection of the bytes
    (and what a store writes the version with, what parsing them gives)."""
    base, main, theirs, others, view = case
    assume(not stale_units(base, theirs, main, view, others))
    main_raw, theirs_raw = state(main, 7), state(theirs, 4)
    result = merged(merge(theirs_raw, main_raw, state(base, 3), view,
                          main_index=index_state(main_raw)))
    fresh = index_state(result.raw)
    assert (fresh.resources, fresh.entries, fresh.offsets, fresh.lengths) == (
        result.index.resources, result.index.entries, result.index.offsets,
        result.index.lengths)
    sent = index_state(theirs_raw)
    assert (sent.resources, sent.entries) == (result.view_base.resources,
                                              result.view_base.entries)
    main_projection = parse_state(main_raw).projection
    assert main_projection is not None
    assert result.projection.apply(main_projection) == parse_state(result.raw).projection
    assert result.parsed(main_projection) == parse_state(result.raw)


@SETTINGS
@given(models(), st.data())
def test_a_change_outside_the_write_set_is_refused(base: Model, data: st.DataObject) -> None:
    """A managed instance the view changed but did not claim refuses the
    merge, naming it (strict); with the auto-widen policy and no other
    reservation it is taken and reported as widened."""
    view = data.draw(st.lists(st.sampled_from(MODEL_UNITS), min_size=1, max_size=4,
                              unique=True))
    theirs = data.draw(edits(base, tuple(view)))
    managed = [unit for unit in view if unit[1] == "managed"]
    assume(managed)
    outside = data.draw(st.sampled_from(managed))
    claimed = [unit for unit in view if unit != outside]
    base_raw, theirs_raw = state(base, 3), state(theirs, 4)
    outcome = refused(merge(theirs_raw, base_raw, base_raw, claimed))
    address = instance_address(outside[:4], outside[4])
    assert (RefusalRule.OUTSIDE_RESERVATION, address) in {
        (refusal.rule, refusal.address) for refusal in outcome.refusals}
    assert f"change to {address} is outside the reservation" in outcome.reason
    widened = merged(merge(theirs_raw, base_raw, base_raw, claimed,
                           policy=MergePolicy.AUTO_WIDEN))
    assert address in widened.auto_widened


@SETTINGS
@given(two_writers())
def test_a_replay_changes_nothing(case: tuple[Model, Model, Model, tuple[UnitId, ...],
                                              tuple[UnitId, ...]]) -> None:
    """The same state sent again through the view (its base advanced to it)
    is no new version; so is a state that changes nothing, even written
    with other whitespace."""
    base, main, theirs, others, view = case
    assume(not stale_units(base, theirs, main, view, others))
    base_raw, main_raw, theirs_raw = state(base, 3), state(main, 7), state(theirs, 4)
    first = merged(merge(theirs_raw, main_raw, base_raw, view))
    again = merge(theirs_raw, first.raw, first.view_base, view, main_index=first.index)
    assert isinstance(again, Unchanged)
    compact = json.dumps(json.loads(base_raw), separators=(",", ":")).encode()
    assert isinstance(merge(compact, main_raw, base_raw, view), Unchanged)


@st.composite
def disjoint_views(draw: st.DrawFn) -> tuple[Model, Model, Model, tuple[UnitId, ...],
                                             tuple[UnitId, ...]]:
    base = draw(models())
    units = draw(st.permutations(MODEL_UNITS))
    split = draw(st.integers(1, len(units) - 1))
    first = tuple(units[:split][:draw(st.integers(1, 4))])
    second = tuple(units[split:][:draw(st.integers(1, 4))])
    return base, draw(edits(base, first)), draw(edits(base, second)), first, second


@SETTINGS
@given(disjoint_views())
def test_disjoint_views_commute(case: tuple[Model, Model, Model, tuple[UnitId, ...],
                                            tuple[UnitId, ...]]) -> None:
    """Two views of one base with disjoint write sets, merged in either
    order, give the same resources byte for byte and the same outputs
    (but those kept stale), when neither reads what the other writes."""
    base, first, second, first_units, second_units = case
    assume(not stale_units(base, second, first, second_units, first_units))
    assume(not stale_units(base, first, second, first_units, second_units))
    base_raw = state(base, 3)
    first_raw, second_raw = state(first, 4), state(second, 4)
    one = merged(merge(first_raw, base_raw, base_raw, first_units))
    one_two = merged(merge(second_raw, one.raw, base_raw, second_units, main_index=one.index))
    two = merged(merge(second_raw, base_raw, base_raw, second_units))
    two_one = merged(merge(first_raw, two.raw, base_raw, first_units, main_index=two.index))
    left, right = json.loads(one_two.raw), json.loads(two_one.raw)
    assert instance_texts(one_two.raw) == instance_texts(two_one.raw)
    assert left["resources"] == right["resources"]
    stale = {*one_two.stale_outputs, *two_one.stale_outputs}
    assert {name: value for name, value in left["outputs"].items() if name not in stale} == {
        name: value for name, value in right["outputs"].items() if name not in stale}
    assert left["serial"] == right["serial"] == 5


@SETTINGS
@given(two_writers(), st.randoms(use_true_random=False))
def test_resource_order_and_layout_do_not_change_the_merge(
        case: tuple[Model, Model, Model, tuple[UnitId, ...], tuple[UnitId, ...]],
        shuffler: random.Random) -> None:
    """A view's state with its resources out of Terraform's order, and a
    main written compactly and out of order, merge to the same state as
    Terraform-ordered, Terraform-laid-out ones."""
    base, main, theirs, others, view = case
    assume(not stale_units(base, theirs, main, view, others))
    base_raw, main_raw, theirs_raw = state(base, 3), state(main, 7), state(theirs, 4)
    expected = merged(merge(theirs_raw, main_raw, base_raw, view))

    def shuffled(model: Model, serial: int, **layout: Any) -> bytes:
        document = model_document(model, serial=serial, outputs=model_outputs(model))
        shuffler.shuffle(document["resources"])
        return json.dumps(document, **layout).encode()

    result = merged(merge(shuffled(theirs, 4, indent=2), main_raw, base_raw, view))
    assert result.raw == expected.raw
    other_main = shuffled(main, 7, separators=(",", ":"))
    result = merged(merge(theirs_raw, other_main, base_raw, view))
    assert units_of(result.raw) == units_of(expected.raw)
    assert list(units_of(result.raw)) == list(units_of(expected.raw))


def test_the_generated_states_hold_every_kind_of_instance() -> None:
    """The strategies reach what the properties are about: modules under
    for_each, count and for_each keys, deposed objects, dependencies."""
    seen: set[str] = set()

    @settings(max_examples=200, deadline=None)
    @given(models())
    def collect(model: Model) -> None:
        for unit, objects in model.items():
            if unit[0].startswith("module.e["):
                seen.add("module for_each")
            if isinstance(unit[4], int):
                seen.add("count")
            if isinstance(unit[4], str):
                seen.add("for_each")
            if any(deposed for deposed, _, _ in objects):
                seen.add("deposed")
            if any(dependencies for _, _, dependencies in objects):
                seen.add("dependencies")
            if unit[1] == "data":
                seen.add("data")

    collect()
    assert seen == {"module for_each", "count", "for_each", "deposed", "dependencies", "data"}
    assert written_dependencies({}, {}, ()) == {}


_hostile = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
    | st.text(max_size=8) | st.sampled_from(["managed", "data", "tainted", "\ud800", 1.5, -1]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["mode", "type", "name", "module", "instances", "index_key", "deposed",
                         "dependencies", "attributes", "status", "provider", "each", "value",
                         "outputs", "x"]), inner, max_size=4), max_leaves=10)


@st.composite
def hostile_bodies(draw: st.DrawFn) -> bytes:
    """A valid state with one value anywhere replaced by anything, or its
    bytes cut, repeated or overwritten."""
    model = draw(models())
    document = model_document(model, serial=4, outputs=model_outputs(model))
    places: list[tuple[Any, Any]] = [(document, key) for key in list(document)]
    for resource in document["resources"]:
        places.extend((resource, key) for key in list(resource))
        for item in resource["instances"]:
            places.extend((item, key) for key in list(item))
        places.append((resource["instances"], 0))
    places.append((document["resources"], 0))
    holder, key = draw(st.sampled_from(places))
    if isinstance(holder, list):
        holder.append(draw(_hostile))
    else:
        holder[key] = draw(_hostile)
    raw = json.dumps(document, indent=2).encode()
    if draw(st.booleans()):
        at = draw(st.integers(0, len(raw)))
        raw = raw[:at] + draw(st.binary(max_size=4)) + raw[at + draw(st.integers(0, 3)):]
    return raw


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(models(), hostile_bodies())
def test_a_hostile_body_is_a_400_or_an_answer_never_a_500(base: Model, body: bytes) -> None:
    """Whatever a view is sent -- any value anywhere in a state, bytes cut
    or overwritten -- the merge answers (merged, unchanged, refused) or
    raises a 400 naming what is wrong; nothing else escapes."""
    base_raw = state(base, 3)
    try:
        merge(body, base_raw, base_raw, MODEL_UNITS)
    except BadRequest as error:
        assert error.status == 400


def test_check_results_holding_an_unpaired_surrogate_is_a_400() -> None:
    """A C{check_results} member that JSON decoders cannot hold (a string
    with an unpaired surrogate, where a list belongs) is refused as an
    invalid state, never let out as a decoder's error (found by the
    property above)."""
    base_raw = state(Model(), 3)
    document = json.loads(base_raw)
    document["check_results"] = "\ud800"
    body = json.dumps(document, indent=2).encode()
    with pytest.raises(BadRequest) as refused:
        merge(body, base_raw, base_raw, MODEL_UNITS)
    assert refused.value.status == 400
