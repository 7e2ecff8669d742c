"""Hypothesis strategies for Terraform v4 states and their next versions."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from tests.support.stub_client import state_body

#: Attribute values as providers write them: strings (ids, ARNs, unicode),
#: numbers, booleans, null, and small nested lists and maps.
_leaf = st.one_of(st.none(), st.booleans(), st.integers(-2**53, 2**53),
                  st.text(max_size=40), st.from_regex(r"[a-z]{2,4}-[0-9a-f]{8,17}", fullmatch=True))
values = st.recursive(_leaf, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=12), inner, max_size=4)),
    max_leaves=12)
attributes = st.dictionaries(st.from_regex(r"[a-z_]{1,16}", fullmatch=True), values,
                             min_size=1, max_size=8)


def _resource(index: int, attrs: dict[str, Any]) -> dict[str, Any]:
    return {"mode": "managed", "type": "terraform_data", "name": f"r{index}",
            "provider": 'provider["terraform.io/builtin/terraform"]',
            "instances": [{"schema_version": 0, "attributes": attrs,
                           "sensitive_attributes": []}]}


@st.composite
def histories(draw: st.DrawFn, max_resources: int = 12) -> tuple[bytes, bytes]:
    """A v4 state and its next version: the serial one higher and some
    resources' attributes replaced (possibly none, possibly all)."""
    first = draw(st.lists(attributes, min_size=1, max_size=max_resources))
    changes = draw(st.dictionaries(st.integers(0, len(first) - 1), attributes,
                                   max_size=len(first)))
    second = [changes.get(index, attrs) for index, attrs in enumerate(first)]
    serial = draw(st.integers(1, 10_000))
    return (state_body(serial, resources=[_resource(i, a) for i, a in enumerate(first)]),
            state_body(serial + 1, resources=[_resource(i, a) for i, a in enumerate(second)]))
