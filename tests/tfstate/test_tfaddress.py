"""Terraform addresses (kilolock.tfstate.address): every address Terraform prints
parses and prints back the same; what an address contains follows
Terraform's rules; anything else is a 400 naming the position, never the
text."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kilolock.tfstate.address import (
    InvalidAddress,
    ModuleStep,
    Target,
    format_key,
    parse_address,
    parse_module_path,
)
from tests.support.paths import SAMPLE_STATES

STATES = SAMPLE_STATES

_names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_-]{0,12}", fullmatch=True).filter(
    lambda name: name not in ("module", "data"))
_keys = st.one_of(st.none(), st.integers(0, 10**6), st.text(max_size=12).filter(
    lambda text: not any(0xD800 <= ord(char) <= 0xDFFF for char in text)))


@st.composite
def targets(draw: st.DrawFn) -> Target:
    module = tuple(ModuleStep(draw(_names), draw(_keys))
                   for _ in range(draw(st.integers(0, 3))))
    if not module or draw(st.booleans()):
        key = draw(_keys)
        return Target(module, draw(st.sampled_from(["managed", "data"])), draw(_names),
                      draw(_names), key, keyed=key is not None)
    return Target(module)


def test_terraform_state_list_addresses_round_trip() -> None:
    """Each line `terraform state list` printed for the full fixture parses,
    and prints back byte for byte (awkward string keys included)."""
    lines = (STATES / "full.addresses.txt").read_text().splitlines()
    assert len(lines) > 10
    for line in lines:
        assert str(parse_address(line)) == line


@given(targets())
def test_any_address_prints_and_parses_back(target: Target) -> None:
    """Printing and parsing are inverse for every address shape."""
    assert parse_address(str(target)) == target


def test_parts_of_an_address() -> None:
    """Module steps with keys, data sources, instance keys and config text."""
    target = parse_address('module.a["k"].module.b[0].data.http.ip[1]')
    assert target.module == (ModuleStep("a", "k"), ModuleStep("b", 0))
    assert (target.mode, target.type, target.name, target.key, target.keyed) == (
        "data", "http", "ip", 1, True)
    assert target.module_text == 'module.a["k"].module.b[0]'
    assert target.config_text() == "module.a.module.b.data.http.ip"
    assert parse_address("module.a").is_module
    assert parse_module_path("") == ()
    assert format_key('a"b${x}') == '["a\\"b$${x}"]'


def test_what_an_address_contains() -> None:
    """Module steps match with their keys (module.a is not module.a[0]); a
    resource contains its instances; an instance only itself."""
    a, a0 = (ModuleStep("a"),), (ModuleStep("a", 0),)
    assert parse_address("module.a").contains_instance((*a, ModuleStep("b")), "managed",
                                                       "t", "n", None)
    assert not parse_address("module.a").contains_instance(a0, "managed", "t", "n", None)
    assert parse_address("module.a[0]").contains_instance(a0, "managed", "t", "n", 3)
    resource = parse_address("module.a.t.n")
    assert resource.contains_instance(a, "managed", "t", "n", "x")
    assert not resource.contains_instance(a, "data", "t", "n", "x")
    assert not resource.contains_instance(a0, "managed", "t", "n", "x")
    instance = parse_address("t.n[2]")
    assert instance.contains_instance((), "managed", "t", "n", 2)
    assert not instance.contains_instance((), "managed", "t", "n", "2")


@pytest.mark.parametrize("text", [
    "", "module", "module.", "module.a.", "x", "x.", "x.y.z", "x.y[", "x.y[]", "x.y[-1]",
    "x.y[01]", 'x.y["a"', 'x.y["\\q"]', "x.y[0]z", "data.x", "1x.y", "module.a[*]",
    "module.a.b", 'x.y["\\ud800"]', "x" * 5000,
])
def test_bad_addresses_are_400s_naming_no_text(text: str) -> None:
    """Anything but a module, resource or instance address: a 400 with a
    message that never quotes the address."""
    with pytest.raises(InvalidAddress) as caught:
        parse_address(text)
    assert caught.value.status == 400 and caught.value.code == "invalid_address"
    said = caught.value.message.split(" (e.g.")[0]
    if len(text) > 1:
        assert text not in said


@given(st.text(max_size=60))
def test_any_text_parses_or_is_a_400(text: str) -> None:
    """Never anything but an address (which prints back to the same
    address) or InvalidAddress."""
    try:
        target = parse_address(text)
    except InvalidAddress as error:
        assert error.status == 400
    else:
        assert parse_address(str(target)) == target
