"""What a reservation claims (kilolock.reservations.model): a set in a body
parses into claims or is a 400 naming the entry, never echoing it; claims
cover what Terraform's -target would; two reservations conflict write/write
and write/read, never read/read; a claim must name something the state has
unless it says the plan creates it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kilolock.core.errors import BadRequest, Conflict
from kilolock.reservations.index import (
    ClaimNotInState,
    changed_claims,
    check_claims_exist,
    index_state,
)
from kilolock.reservations.model import (
    MAX_CLAIMS,
    AddressSet,
    InvalidClaim,
    ReservationConflict,
    ReservationSets,
    SetName,
    check_no_conflicts,
    find_conflicts,
    parse_claims,
)
from tests.support.paths import SAMPLE_STATES

FULL = index_state((SAMPLE_STATES / "full.tfstate").read_bytes())
DEPOSED = index_state((SAMPLE_STATES / "deposed.tfstate").read_bytes())


def sets(write: list[Any] | None = None, read: list[Any] | None = None) -> ReservationSets:
    return ReservationSets(parse_claims(write or [], "write"),
                           parse_claims(read or [], "read", creates=False))


def test_entries_parse_as_addresses_deposed_objects_and_creates() -> None:
    """An entry is an address string, or an object with the address, a
    deposed key and whether the plan creates it; each prints back as given."""
    entries = ["terraform_data.a", 'module.m["p"].terraform_data.r[0]', "module.net",
               {"address": "terraform_data.d[0]", "deposed": "f35c23ed"},
               {"address": "terraform_data.new", "create": True}]
    claims = parse_claims(entries, "write")
    assert [claim.to_json() for claim in claims] == entries
    assert str(claims.claims[3]) == "terraform_data.d[0] (deposed object f35c23ed)"
    assert parse_claims(None, "write") == AddressSet()
    assert len(parse_claims(["terraform_data.a", "terraform_data.a"], "write")) == 1


@pytest.mark.parametrize(("value", "field", "words"), [
    ("terraform_data.a", "write", "must be a JSON array"),
    ([3], "write[0]", "must be an address string or an object"),
    (["terraform_data.a", "not an address"], "write[1]", "not a Terraform address"),
    (["terraform_data.a", "terraform_data."], "write[1]", "at character 16"),
    ([{"addr": "terraform_data.a"}], "write[0]", "unknown field"),
    ([{"address": 5}], "write[0].address", "must be a string"),
    ([{"address": "terraform_data.d", "deposed": "short"}], "write[0].deposed",
     "8 characters"),
    ([{"address": "terraform_data.d", "deposed": "ab\ncdefg"}], "write[0].deposed",
     "8 characters"),
    ([{"address": "module.m", "deposed": "f35c23ed"}], "write[0].deposed", "of a module"),
    ([{"address": "terraform_data.a", "create": "yes"}], "write[0].create",
     "true or false"),
    ([{"address": "terraform_data.d", "deposed": "f35c23ed", "create": True}],
     "write[0].create", "never created"),
    (["x" * 5000], "write[0]", "longer than"),
])
def test_a_bad_entry_is_a_400_naming_its_field(value: Any, field: str, words: str) -> None:
    """Each malformed entry is refused with a 400 naming the field and the
    entry's position and saying what is wrong -- never quoting it."""
    with pytest.raises(InvalidClaim) as caught:
        parse_claims(value, "write")
    assert caught.value.status == 400
    assert caught.value.details() == {"field": field}
    assert words in caught.value.message
    assert "not an address" not in caught.value.message


def test_only_a_write_set_creates_and_sets_are_bounded() -> None:
    """C{create} in a read set is refused, as is a set of more than
    MAX_CLAIMS entries."""
    with pytest.raises(InvalidClaim, match=r"read\[0\]: only a write set creates"):
        parse_claims([{"address": "terraform_data.a", "create": True}], "read", creates=False)
    with pytest.raises(InvalidClaim, match="at most"):
        parse_claims(["terraform_data.a"] * (MAX_CLAIMS + 1), "write")


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                     lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.sampled_from(["address", "deposed", "create", "x"]),
                                       inner, max_size=3), max_leaves=8)


@settings(max_examples=300, deadline=None)
@given(_json)
def test_any_body_value_is_claims_or_a_400(value: Any) -> None:
    """Whatever JSON a body holds as a set, the parse answers claims or a
    400 (InvalidClaim) -- never another exception (a 500)."""
    try:
        claims = parse_claims(value, "write")
    except InvalidClaim as error:
        assert isinstance(error, BadRequest)
        return
    again = parse_claims(json.loads(json.dumps([claim.to_json() for claim in claims])), "write")
    assert again == claims


def test_claims_cover_what_target_would() -> None:
    """An instance claim covers that instance; a resource claim every
    instance and the resource's metadata; a module claim everything below
    that module instance (keys included: module.m is not module.m[0])."""
    claims = parse_claims(['terraform_data.n["x"]', "terraform_data.c", 'module.e["p"]',
                           "module.m"], "write")
    n = ("", "managed", "terraform_data", "n")
    assert claims.covers_instance(n, "x") and not claims.covers_instance(n, "y")
    assert claims.touches_resource(n) and not claims.covers_resource(n)
    c = ("", "managed", "terraform_data", "c")
    assert claims.covers_instance(c, 7) and claims.covers_resource(c)
    inner = ('module.e["p"].module.inner', "managed", "terraform_data", "deep")
    assert claims.covers_instance(inner, 0) and claims.covers_resource(inner)
    assert not claims.covers_instance(('module.e["q"]', "managed", "terraform_data", "r"), None)
    assert claims.covers_instance(("module.m", "data", "http", "ip"), None)
    assert not claims.covers_instance(("module.m[0]", "managed", "terraform_data", "a"), None)
    assert not claims.covers_instance(("module.mm", "managed", "terraform_data", "a"), None)


def test_write_sets_conflict_with_write_and_read_sets_never_reads_with_reads() -> None:
    """The conflict matrix: a write claim overlapping another reservation's
    write or read claim conflicts, naming the holder; read claims overlap
    freely (S2b: C2 writes c and reads b; B2 writing b is refused)."""
    held = {"C2": sets(write=["terraform_data.c"], read=["terraform_data.b"])}
    conflicts = find_conflicts(sets(write=["terraform_data.b"]), held)
    assert [(conflict.holder, conflict.mine_set, conflict.theirs_set) for conflict in conflicts] \
        == [("C2", SetName.WRITE, SetName.READ)]
    assert conflicts[0].reason == ("terraform_data.b is in this reservation's write set and in"
                                   " the read set of reservation C2")
    assert find_conflicts(sets(read=["terraform_data.b"]), held) == ()
    assert len(find_conflicts(sets(read=["terraform_data.c"]), held)) == 1
    with pytest.raises(ReservationConflict) as caught:
        check_no_conflicts(sets(write=["terraform_data.c[0]"]), held)
    assert isinstance(caught.value, Conflict) and caught.value.status == 409
    assert caught.value.details() == {"holders": ["C2"]}
    assert "write set of reservation C2 (terraform_data.c)" in caught.value.message


@pytest.mark.parametrize(("mine", "theirs", "overlap"), [
    ('terraform_data.n["x"]', 'terraform_data.n["y"]', False),
    ('terraform_data.n["x"]', 'terraform_data.n["x"]', True),
    ('terraform_data.n["x"]', "terraform_data.n", True),
    ("terraform_data.c[0]", 'terraform_data.c["0"]', False),
    ('module.m["p"]', 'module.m["q"].terraform_data.r', False),
    ('module.m["p"]', 'module.m["p"].module.inner.terraform_data.deep[0]', True),
    ("module.m", 'module.m["p"]', False),
    ("module.a", "module.a.module.b", True),
    ("module.a.module.b", "module.a", True),
    ("terraform_data.a", "data.terraform_data.a", False),
])
def test_overlap_is_at_the_instance(mine: str, theirs: str, overlap: bool) -> None:
    """Instances of one resource overlap only when the same; a resource or
    a module overlaps what it contains, either way round."""
    held = {"R": sets(write=[theirs])}
    assert bool(find_conflicts(sets(write=[mine]), held)) is overlap
    assert bool(find_conflicts(sets(write=[theirs]), {"R": sets(write=[mine])})) is overlap


def test_claims_must_name_what_the_state_has() -> None:
    """Instances, whole resources, modules and deposed objects the state
    has are accepted; anything else is a 409 naming the field, with a hint
    for creates -- unless marked as created."""
    check_claims_exist(sets(
        write=['terraform_data.keyed["a"]', "terraform_data.plain", 'module.keyed["k1"]',
               "module.net.module.inner.terraform_data.deep[0]",
               {"address": "terraform_data.brand_new", "create": True}],
        read=["data.terraform_remote_state.other", "module.net"]), FULL)
    check_claims_exist(sets(write=[{"address": "terraform_data.cbd[0]", "deposed": "f35c23ed"}]),
                       DEPOSED)
    cases = [
        (sets(write=["terraform_data.plain", "terraform_data.brand_new"]), "write[1]",
         "terraform_data.brand_new is not in the state (mark it"),
        (sets(read=["terraform_data.plain[5]"]), "read[0]", "read[0]: terraform_data.plain[5]"),
        (sets(write=['module.keyed["k2"]']), "write[0]", "is not in the state"),
        (sets(write=["terraform_data.none"]), "write[0]", "is not in the state"),
        (sets(write=[{"address": "terraform_data.cbd[0]", "deposed": "00000000"}]), "write[0]",
         "(deposed object 00000000) is not in the state"),
    ]
    for claimed, field, words in cases:
        index = DEPOSED if "cbd" in words else FULL
        with pytest.raises(ClaimNotInState) as caught:
            check_claims_exist(claimed, index)
        assert caught.value.status == 409 and caught.value.details() == {"field": field}
        assert words in caught.value.message


def test_claims_on_what_main_changed_since_the_snapshot_are_found() -> None:
    """A claim on an instance, resource or module main changed since the
    reservation's snapshot is reported (its plan is stale); claims on
    what did not change, or on what only changed layout, are not."""
    raw = (SAMPLE_STATES / "full.tfstate").read_bytes()
    document = json.loads(raw)
    plain = next(resource for resource in document["resources"] if resource["name"] == "plain")
    plain["instances"][1]["attributes"]["id"] = "replaced"
    main = index_state(json.dumps(document).encode())
    claimed = sets(write=["terraform_data.plain[1]", "terraform_data.plain[0]",
                          "terraform_data.plain", "module.net",
                          {"address": "terraform_data.new", "create": True}],
                   read=["terraform_data.plain[1]", 'terraform_data.keyed["a"]'])
    assert [str(claim) for claim in changed_claims(claimed, FULL, main)] == [
        "terraform_data.plain[1]", "terraform_data.plain", "terraform_data.plain[1]"]
    compact = index_state(json.dumps(json.loads(raw), separators=(",", ":")).encode())
    assert changed_claims(claimed, FULL, compact) == ()
