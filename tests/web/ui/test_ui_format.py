"""How the dashboard reads and words what a state holds, for any input:
types as Terraform writes them, providers as users name them, addresses cut
to their resource, counts and ages, values with their invisible characters
shown; and a resource page of any attribute values never fails and never
sends a sensitive one."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kilolock.tfstate.projection import hcl_quote
from kilolock.web.ui import format
from kilolock.web.ui.graph import config_address, module_of, resource_of
from kilolock.web.ui.values import visible
from tests.support.ui_support import DashboardSite

PRIMITIVES = ("string", "number", "bool", "dynamic")

types = st.recursive(
    st.sampled_from(PRIMITIVES),
    lambda inner: st.one_of(
        st.tuples(st.sampled_from(["list", "set", "map"]), inner).map(list),
        st.lists(inner, max_size=3).map(lambda items: ["tuple", items]),
        st.dictionaries(st.from_regex(r"[a-z_]{1,8}", fullmatch=True), inner,
                        max_size=3).map(lambda members: ["object", members])),
    max_leaves=10)


def hcl_type(value: Any) -> str:
    """The reference: Terraform's type syntax, written out directly."""
    if isinstance(value, str):
        return value
    kind, inner = value[0], value[1]
    if kind == "tuple":
        return "tuple([" + ", ".join(hcl_type(item) for item in inner) + "])"
    if kind == "object":
        return "object({" + ", ".join(f"{name} = {hcl_type(inner[name])}"
                                      for name in sorted(inner)) + "})"
    return f"{kind}({hcl_type(inner)})"


@given(types)
def test_types_are_written_as_terraform_writes_them(value: Any) -> None:
    """Any type of a state's JSON becomes Terraform's own syntax."""
    assert format.cty_type(json.dumps(value)) == hcl_type(value)


def test_types_spot_checks() -> None:
    assert format.cty_type('["tuple", ["string", "string"]]') == "tuple([string, string])"
    assert format.cty_type('["object", {"b": "number", "a": ["list", "string"]}]') == \
        "object({a = list(string), b = number})"
    assert format.cty_type('["object", {"a": "string"}, ["a"]]') == \
        "object({a = optional(string)})"
    assert format.cty_type(None) == "—"


@given(st.text(max_size=200))
def test_any_type_text_is_shown_never_an_error(text: str) -> None:
    """Text that is not a type (or not JSON) is shown as it is, or as JSON."""
    assert isinstance(format.cty_type(text), str)


@given(st.text(max_size=200))
def test_any_provider_text_is_shown_never_an_error(text: str) -> None:
    assert isinstance(format.provider(text), str)


def test_providers_are_named_as_users_name_them() -> None:
    assert format.provider('provider["registry.terraform.io/hashicorp/aws"]') == \
        "hashicorp/aws"
    assert format.provider('provider["registry.terraform.io/hashicorp/aws"].west') == \
        "hashicorp/aws.west"
    assert format.provider('provider["terraform.io/builtin/terraform"]') == "terraform"
    assert format.provider('provider["registry.opentofu.org/hashicorp/random"]') == \
        "registry.opentofu.org/hashicorp/random"
    assert format.provider("something else") == "something else"


names = st.from_regex(r"[a-z_][a-z0-9_-]{0,10}", fullmatch=True)
keys = st.one_of(st.integers(0, 10**6).map(lambda key: f"[{key}]"),
                 st.text(max_size=12).map(lambda key: "[" + hcl_quote(key) + "]"))


@given(st.lists(st.tuples(names, st.one_of(st.just(""), keys)), max_size=3), names, names,
       st.one_of(st.just(""), keys))
def test_addresses_are_cut_to_their_resource_whatever_the_keys(
        modules: list[tuple[str, str]], type_: str, name: str, key: str) -> None:
    """Any instance key (quotes, brackets, escapes) is cut: the resource of
    an instance, its address as configured (no key anywhere), its module."""
    prefix = "".join(f"module.{module}{module_key}." for module, module_key in modules)
    address = f"{prefix}{type_}.{name}{key}"
    assert resource_of(address) == f"{prefix}{type_}.{name}"
    plain = "".join(f"module.{module}." for module, _ in modules) + f"{type_}.{name}"
    assert config_address(address) == plain
    assert config_address(plain) == plain
    assert module_of(address) == ".".join(f"module.{module}" for module, _ in modules)


@given(st.text(max_size=300))
def test_any_address_text_is_cut_never_an_error(text: str) -> None:
    assert isinstance(resource_of(text), str) and isinstance(config_address(text), str)
    assert isinstance(module_of(text), str)


def test_counts_and_ages_are_worded() -> None:
    now = datetime(2026, 1, 2, tzinfo=UTC)
    assert [format.plural(n, "state") for n in (0, 1, 2, 1000)] == [
        "0 states", "1 state", "2 states", "1,000 states"]
    assert format.plural(1, "dependency", "dependencies") == "1 dependency"
    assert format.plural(3, "dependency", "dependencies") == "3 dependencies"
    ages = [format.ago(now - delta, now) for delta in (
        timedelta(seconds=5), timedelta(minutes=3), timedelta(hours=3), timedelta(days=3),
        timedelta(days=90), timedelta(days=800), timedelta(minutes=-5))]
    assert ages == ["just now", "3 min ago", "3 h ago", "3 days ago", "3 months ago",
                    "2 years ago", "in the future"]


@given(st.text(max_size=100))
def test_invisible_characters_are_shown_as_escapes(text: str) -> None:
    """Bidirectional overrides and zero-width characters never reach a page
    as themselves."""
    shown = visible(text)
    assert not any(char in shown for char in
                   "\u061c\u200b\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d\u202e"
                   "\u2060\u2066\u2067\u2068\u2069\ufeff")


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**53, 2**53), st.text(max_size=20)),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=15)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.dictionaries(st.text(min_size=1, max_size=10), json_values, max_size=6))
def test_any_attributes_make_a_resource_page_that_keeps_its_secret(
        attributes: dict[str, Any]) -> None:
    """Whatever the attributes hold (markup, control characters, any
    nesting), the resource's page is a 200 that never holds the secret."""
    secret = "never-shown-secret-4711"
    site = DashboardSite()
    resource = {"mode": "managed", "type": "t", "name": "r", "provider": "p",
                "instances": [{"schema_version": 0, "attributes": {**attributes,
                                                                   "zzz_secret": secret},
                               "sensitive_attributes": [[{"type": "get_attr",
                                                          "value": "zzz_secret"}]]}]}
    body = json.dumps({"version": 4, "serial": 1, "lineage": "l", "outputs": {},
                       "resources": [resource]}).encode()
    if site.api("POST", "/v1/states/s", body).status != 200:
        return  # text the write path refuses (a NUL, an unpaired surrogate)
    page = site.browser().get("/ui/states/s/-/resource?address=t.r")
    assert page.status == 200
    assert secret.encode() not in page.body
    json_view = site.browser().get("/ui/states/s/-/versions/1/json")
    assert json_view.status == 200 and secret.encode() not in json_view.body
