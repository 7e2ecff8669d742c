"""Outputs, check results and the Terraform version of a merged state
(kilolock.reservations.derived): outputs three ways, objects and maps by
key, anything else kept stale, never refused; check results with "no
information" ignored; the higher Terraform version."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kilolock.reservations.derived import (
    higher_version,
    merge_check_results,
    merge_outputs,
)


def text(outputs: dict[str, Any]) -> bytes:
    return json.dumps(outputs, indent=2).encode()


def string(value: str, sensitive: bool = False) -> dict[str, Any]:
    output: dict[str, Any] = {"value": value, "type": "string"}
    if sensitive:
        output["sensitive"] = True
    return output


def obj(**values: str) -> dict[str, Any]:
    return {"value": values, "type": ["object", {key: "string" for key in values}]}


def outputs(base: dict[str, Any], theirs: dict[str, Any], main: dict[str, Any]
            ) -> tuple[dict[str, Any], tuple[str, ...], tuple[str, ...], bool]:
    merged = merge_outputs(text(base), text(theirs), text(main))
    return json.loads(merged.text), merged.stale, merged.structural, merged.changed


def test_what_one_side_changed_is_taken_three_ways() -> None:
    """Changed by the view only: taken (added, removed too); by main only:
    kept; by both alike: kept; by neither: kept."""
    base = {"a": string("a0"), "b": string("b0"), "gone": string("g"), "same": string("s")}
    theirs = {"a": string("a1"), "b": string("b0"), "same": string("s2"), "new": string("n")}
    main = {"a": string("a0"), "b": string("b1"), "gone": string("g"), "same": string("s2")}
    merged, stale, structural, changed = outputs(base, theirs, main)
    assert merged == {"a": string("a1"), "b": string("b1"), "same": string("s2"),
                      "new": string("n")}
    assert (stale, structural, changed) == ((), (), True)


def test_an_untouched_outputs_member_is_mains_text() -> None:
    """When the view changed no output, main's text is kept as it is."""
    main = b'{"a": {"value": "a1", "type": "string"}}'
    merged = merge_outputs(text({"a": string("a0")}), text({"a": string("a0")}), main)
    assert (merged.text, merged.changed) == (main, False)


def test_objects_both_changed_are_merged_by_key() -> None:
    """An output aggregating a for_each resource, re-evaluated by two
    instance-targeted runs each with the other's stale value, merges by key
    (S7b): both changes are in, keys added and removed by either side too."""
    base = {"n": obj(x="0", y="0", z="0")}
    theirs = {"n": obj(x="1", y="0", z="0", w="new")}
    main = {"n": obj(x="0", y="1")}
    merged, stale, structural, _ = outputs(base, theirs, main)
    assert merged == {"n": obj(x="1", y="1", w="new")}
    assert (stale, structural) == ((), ("n",))


def test_maps_and_nested_objects_merge_by_key() -> None:
    """map(string) values merge by key (their type kept); objects of
    objects merge level by level."""
    def mapped(**values: str) -> dict[str, Any]:
        return {"value": values, "type": ["map", "string"]}

    def nested(**inner: dict[str, str]) -> dict[str, Any]:
        return {"value": inner, "type": ["object", {
            key: ["object", {name: "string" for name in values}]
            for key, values in inner.items()}]}

    merged, stale, _, _ = outputs(
        {"m": mapped(p="0", q="0"), "o": nested(p={"v": "0", "w": "0"}, q={"v": "0"})},
        {"m": mapped(p="1", q="0"), "o": nested(p={"v": "1", "w": "0"}, q={"v": "0"})},
        {"m": mapped(p="0", q="1"), "o": nested(p={"v": "0", "w": "1"}, q={"v": "1"})})
    assert merged == {"m": mapped(p="1", q="1"),
                      "o": nested(p={"v": "1", "w": "1"}, q={"v": "1"})}
    assert stale == ()


@pytest.mark.parametrize(("base", "theirs", "main"), [
    (string("0"), string("1"), string("2")),
    (obj(x="0"), obj(x="1"), obj(x="2")),
    ({"value": ["0"], "type": ["list", "string"]}, {"value": ["1"], "type": ["list", "string"]},
     {"value": ["2"], "type": ["list", "string"]}),
    (obj(x="0"), obj(x="1"), string("s")),
    (string("0", True), obj(x="1"), {**obj(x="2"), "sensitive": True}),
    (obj(x="0"), obj(x="1"), {"value": {"x": "0", "y": "1"}, "type": ["map", "string"]}),
])
def test_conflicting_outputs_keep_mains_value_and_are_stale(base: Any, theirs: Any,
                                                             main: Any) -> None:
    """Both changed it differently, and a by-key merge cannot settle it
    (strings, lists, the same key, object against map, sensitivity
    differing): main's value is kept, the output is stale, nothing refused."""
    merged, stale, structural, _ = outputs({"o": base}, {"o": theirs}, {"o": main})
    assert merged == {"o": main}
    assert (stale, structural) == (("o",), ())


def test_an_output_main_removed_and_the_view_changed_is_stale() -> None:
    """Main removed an output the view changed: main's (its absence) wins,
    flagged stale."""
    merged, stale, _, changed = outputs({"o": string("0")}, {"o": string("1")}, {})
    assert (merged, stale, changed) == ({}, ("o",), False)


def check(address: str, status: str, objects: bool = True) -> dict[str, Any]:
    return {"object_kind": "check", "config_addr": address, "status": status,
            "objects": [{"object_addr": address, "status": status}] if objects else None}


def checks(base: Any, theirs: Any, main: Any) -> tuple[Any, bool]:
    merged = merge_check_results(json.dumps(base).encode(), json.dumps(theirs).encode(),
                                 json.dumps(main).encode())
    return json.loads(merged.text), merged.changed


def test_no_information_leaves_mains_check_results() -> None:
    """A view's null (an intermediate snapshot) and its unknown entries
    without objects (what a targeted run writes for what it did not
    evaluate) say nothing: main's results stay."""
    main = [check("check.a", "pass"), check("check.b", "fail")]
    assert checks(main, None, main) == (main, False)
    unknown = [check("check.a", "unknown", objects=False), check("check.b", "unknown", False)]
    assert checks(main, unknown, main) == (main, False)


def test_a_result_the_view_changed_is_taken_and_a_removed_one_dropped() -> None:
    """An entry the view changed since its base is taken (a new one added);
    one the base had and the view's non-null results lack is removed; one
    equal to the base's leaves main's; none left is null."""
    base = [check("check.a", "pass"), check("check.b", "pass"), check("check.c", "pass")]
    main = [check("check.a", "pass"), check("check.b", "fail"), check("check.c", "pass")]
    theirs = [check("check.a", "fail"), check("check.b", "pass"), check("check.d", "pass")]
    merged, changed = checks(base, theirs, main)
    assert merged == [check("check.a", "fail"), check("check.b", "fail"),
                      check("check.d", "pass")]
    assert changed
    assert checks([check("check.a", "pass")], [], [check("check.a", "pass")]) == (None, True)


@pytest.mark.parametrize(("main", "theirs", "higher"), [
    ("1.15.5", "1.9.0", "1.15.5"),
    ("1.9.0", "1.15.5", "1.15.5"),
    ("1.15.0-rc1", "1.15.0", "1.15.0"),
    ("1.15.0", "1.15.0-rc1", "1.15.0"),
    ("1.15.0-alpha20260204", "1.15.0-beta1", "1.15.0-beta1"),
    ("1.15", "1.15.0", "1.15"),
    ("1.15.5", "not a version", "1.15.5"),
    (None, "1.15.5", "1.15.5"),
    ("1.15.5", None, "1.15.5"),
])
def test_the_higher_terraform_version_is_kept(main: str | None, theirs: str | None,
                                              higher: str) -> None:
    """Versions compare as go-version does: by number, a release above its
    pre-releases; what is not a version never wins."""
    assert higher_version(main, theirs) == higher


def test_null_outputs_are_no_outputs() -> None:
    """A state may say "outputs": null (none, as Terraform reads it): the
    view's null against the base's outputs removes them."""
    merged = merge_outputs(text({"a": string("a0")}), b"null", text({"a": string("a0")}))
    assert (json.loads(merged.text), merged.changed) == ({}, True)
    assert merge_outputs(b"null", b"null", b"null").changed is False
