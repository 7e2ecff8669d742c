"""Handles of the native API are owned, and a content address is no
capability (decision record 0018, rules 2 and 3), in memory:

  - the ownership matrix: tenant x principal x handle kind x action -- the
    creator succeeds, anyone else gets the 404 an unknown id gets, byte for
    byte, and changes nothing;
  - blobs by digest answer only a tenant (and scope) holding those bytes,
    and one tenant's deletion never takes them from another;
  - slices of a state through the route.

The same rules against a live server: test_conformance.py.
"""

from __future__ import annotations

import hashlib
import json
from urllib.parse import urlencode

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kilolock.tfstate.address import parse_address
from kilolock.tfstate.slice import Selector, slice_document
from tests.support.native_support import MONOLITH, NATIVE, NativeSite
from tests.support.state_samples import ENVELOPE
from tests.support.stub_client import Reply

UNKNOWN = {"operation": "op_000000000000000000000000", "upload": "up_000000000000000000000000"}
#: (handle kind, method, path below the handle, body)
ACTIONS = [
    ("operation", "GET", "", None),
    ("operation", "DELETE", "", None),
    ("operation", "POST", "/cancel", None),
    ("upload", "GET", "", None),
    ("upload", "PUT", "?offset=0", MONOLITH[:100]),
    ("upload", "POST", "/commit", None),
    ("upload", "DELETE", "", None),
]


def same(first: Reply, second: Reply) -> bool:
    return (first.status, first.body, first.header(b"content-type")) == (
        second.status, second.body, second.header(b"content-type"))


@pytest.fixture
def site() -> NativeSite:
    built = NativeSite()
    assert built.put_state("mono", MONOLITH).status == 200
    return built


def handles(site: NativeSite) -> dict[str, str]:
    """A running operation (held before its write) and an upload session
    with one chunk, both ann's."""
    site.holds.hold("writing")
    operation = site.operation({"kind": "mv", "state": "mono", "from": "terraform_data.old",
                                "to": "terraform_data.renamed"}).json()["id"]
    upload = site.json("POST", f"{NATIVE}/uploads", {
        "state": "mono", "size": len(MONOLITH),
        "sha256": hashlib.sha256(MONOLITH).hexdigest()}).json()["id"]
    site.request("PUT", f"{NATIVE}/uploads/{upload}?offset=100", MONOLITH[100:200])
    return {"operation": operation, "upload": upload}


@pytest.mark.parametrize("stranger", ["bob", "gus"])
@pytest.mark.parametrize(("kind", "method", "suffix", "body"), ACTIONS)
def test_a_handle_of_another_principal_looks_missing(site: NativeSite, stranger: str,
                                                     kind: str, method: str, suffix: str,
                                                     body: bytes | None) -> None:
    """bob (ann's tenant, another token) and gus (another tenant) acting on
    ann's handle: the very answer an id that never existed gets, never a
    403; ann's handle is untouched."""
    owned = handles(site)
    base = f"{NATIVE}/{kind}s/"
    theirs = site.request(method, base + owned[kind] + suffix, body, stranger)
    nobodys = site.request(method, base + UNKNOWN[kind] + suffix, body, stranger)
    assert theirs.status == 404 and same(theirs, nobodys), (theirs, nobodys)
    assert theirs.json()["error"]["code"] == f"{kind}_not_found"
    operation = site.read_operation(owned["operation"])
    assert operation["status"] == "running" and operation["cancelRequested"] is False
    upload = site.request("GET", f"{NATIVE}/uploads/{owned['upload']}").json()
    assert upload["received"] == [[100, 200]] and upload["committedVersion"] is None
    site.holds.release()
    assert site.read_operation(owned["operation"])["status"] == "succeeded"


@pytest.mark.parametrize(("kind", "method", "suffix", "body"), ACTIONS)
def test_the_creator_may_act_on_its_handle(site: NativeSite, kind: str, method: str,
                                           suffix: str, body: bytes | None) -> None:
    """ann's own handles answer her (what each action answers when allowed)."""
    owned = handles(site)
    reply = site.request(method, f"{NATIVE}/{kind}s/{owned[kind]}{suffix}", body, "ann")
    expected = {("operation", "GET"): 200, ("operation", "DELETE"): 202,
                ("operation", "POST"): 202, ("upload", "GET"): 200, ("upload", "PUT"): 200,
                ("upload", "POST"): 409, ("upload", "DELETE"): 200}[(kind, method)]
    assert reply.status == expected, reply
    site.holds.release()


def test_an_import_cannot_use_another_principals_upload(site: NativeSite) -> None:
    """Naming bob's complete session in an import: the answer an unknown
    session gets."""
    session = site.json("POST", f"{NATIVE}/uploads", {
        "state": "mono", "size": len(MONOLITH),
        "sha256": hashlib.sha256(MONOLITH).hexdigest()}, "bob").json()["id"]
    site.request("PUT", f"{NATIVE}/uploads/{session}?offset=0", MONOLITH, "bob")
    theirs = site.operation({"kind": "import", "state": "mono", "upload": session})
    nobodys = site.operation({"kind": "import", "state": "mono", "upload": UNKNOWN["upload"]})
    assert theirs.status == 400 and same(theirs, nobodys)


def test_a_digest_answers_only_a_tenant_holding_it(site: NativeSite) -> None:
    """ann's tenant (bob too: artifacts are a tenant's) reads the bytes by
    digest; another tenant and a token scoped elsewhere get what an unknown
    digest gets.  Identical bytes written by two tenants: deleting one's
    state leaves the other's bytes."""
    digest = hashlib.sha256(MONOLITH).hexdigest()
    path = f"{NATIVE}/blobs/{digest}"
    unknown = f"{NATIVE}/blobs/{'0' * 64}"
    for token in ("ann", "bob"):
        reply = site.request("GET", path, token=token)
        assert reply.status == 200 and reply.body == MONOLITH
        assert site.request("HEAD", path, token=token).status == 200
    for token in ("gus", "scoped"):
        theirs, nobodys = site.request("GET", path, token=token), site.request(
            "GET", unknown, token=token)
        assert theirs.status == 404 and same(theirs, nobodys)
        assert theirs.json()["error"]["code"] == "blob_not_found"
    malformed = site.request("GET", f"{NATIVE}/blobs/not-a-digest", token="gus")
    assert same(malformed, site.request("GET", unknown, token="gus"))
    assert site.put_state("copy", MONOLITH, token="gus").status == 200
    assert site.request("GET", path, token="gus").body == MONOLITH
    assert site.request("DELETE", "/v1/states/mono").status == 200
    assert site.request("GET", path, token="ann").status == 404
    assert site.request("GET", path, token="gus").body == MONOLITH


def test_slices_through_the_route(site: NativeSite) -> None:
    """-/slice answers the v4 slice (X-Kilolock-Version) or its projection,
    of the current version or of ?version=N."""
    reply = site.request("GET", f"{NATIVE}/states/mono/-/slice?module=module.app")
    assert reply.status == 200 and reply.header(b"x-kilolock-version") == b"1"
    assert reply.body == slice_document(MONOLITH, Selector(
        modules=(parse_address("module.app"),)))
    projected = site.request("GET", f"{NATIVE}/states/mono/-/slice?format=projection"
                             "&address=terraform_data.items%5B1%5D&outputs=true").json()
    assert [r["address"] for r in projected["resources"]] == ["terraform_data.items[1]"]
    assert projected["version"] == 1 and projected["state"] == "mono"
    site.operation({"kind": "rm", "state": "mono", "addresses": ["module.app"]})
    old = site.request("GET", f"{NATIVE}/states/mono/-/slice?module=module.app&version=1")
    assert old.body == reply.body
    now = json.loads(site.request("GET", f"{NATIVE}/states/mono/-/slice?module=module.app").body)
    assert now["resources"] == []


@pytest.mark.parametrize(("query", "status", "code", "field"), [
    ("", 400, "bad_request", None),
    ("module=terraform_data.x", 400, "invalid_field", "module"),
    ("module=module.net&module=data.x.y", 400, "invalid_field", "module"),
    ("module=module.", 400, "invalid_field", "module"),
    ("module=module.a%00b", 400, "nul_character", "module"),
    ("type=a%00b", 400, "nul_character", "type"),
    ("address=a.b%FF", 400, "invalid_unicode", "address"),
    ("address=a.b%5B", 400, "invalid_field", "address"),
    ("format=xml&outputs=true", 400, "invalid_field", "format"),
    ("outputs=maybe", 400, "invalid_field", "outputs"),
    ("version=0&outputs=true", 400, "bad_request", None),
    ("version=9&outputs=true", 404, "version_not_found", None),
])
def test_bad_slices(site: NativeSite, query: str, status: int, code: str,
                    field: str | None) -> None:
    """A bad slice parameter is a 4xx whose code names the rule and whose
    field names the parameter (module, type, address, outputs, format: every
    one the slice alone takes; version= is worded as on every native route,
    a plain 400 whose message names it)."""
    reply = site.request("GET", f"{NATIVE}/states/mono/-/slice?{query}")
    assert reply.status == status, reply
    error = reply.json()["error"]
    assert (error["code"], error.get("field")) == (code, field), error


def test_slices_of_missing_and_encrypted_states(site: NativeSite) -> None:
    """A state another tenant has, or nobody: 404; an encrypted one: 409."""
    assert site.request("GET", f"{NATIVE}/states/mono/-/slice?outputs=true",
                        token="gus").status == 404
    assert site.put_state("sealed", ENVELOPE).status == 200
    sealed = site.request("GET", f"{NATIVE}/states/sealed/-/slice?outputs=true")
    assert (sealed.status, sealed.json()["error"]["code"]) == (409, "encrypted_state")


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(["module", "type", "address", "outputs", "format",
                                           "version", "x"]),
                          st.text(max_size=30)), max_size=5))
def test_any_slice_query_is_never_a_500(params: list[tuple[str, str]]) -> None:
    """Any query on -/slice: a 200 or a 4xx, never a 500."""
    site = NativeSite()
    site.put_state("mono", MONOLITH)
    reply = site.request("GET", f"{NATIVE}/states/mono/-/slice?" + urlencode(params))
    assert reply.status in (200, 400, 404), reply
