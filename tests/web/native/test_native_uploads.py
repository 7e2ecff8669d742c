"""Upload sessions on the native API (/v1/native/uploads), in memory:
chunks in any order, repeated and dropped ones, a wrong SHA-256, commits
under the caller's lock exactly like a POST, expiry on the site's clock,
and bad input (never a 500).  Through nginx with a 10 MB body limit, with
kl: test_nginx_proxy.py and test_kl_state_operations.py."""

from __future__ import annotations

import hashlib
import itertools
import json
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kilolock.stateops.chunks import MAX_CHUNK_BYTES
from kilolock.web.native.options import DEFAULT_UPLOAD_TTL
from tests.support.native_support import MONOLITH, NATIVE, NativeSite
from tests.support.stub_client import content_md5, lock_body


def open_session(site: NativeSite, raw: bytes, state: str = "big",
                 token: str = "ann") -> dict[str, Any]:
    reply = site.json("POST", f"{NATIVE}/uploads", {
        "state": state, "size": len(raw), "sha256": hashlib.sha256(raw).hexdigest()}, token)
    assert reply.status == 201, reply
    document: dict[str, Any] = reply.json()
    return document


def put(site: NativeSite, upload: str, offset: int, data: bytes, token: str = "ann",
        md5: str | None = None) -> Any:
    headers = {"Content-Type": "application/octet-stream"}
    if md5 is not None:
        headers["Content-MD5"] = md5
    return site.request("PUT", f"{NATIVE}/uploads/{upload}?offset={offset}", data, token,
                        headers)


def commit(site: NativeSite, upload: str, lock_id: str | None = None,
           token: str = "ann") -> Any:
    query = f"?ID={lock_id}" if lock_id else ""
    return site.request("POST", f"{NATIVE}/uploads/{upload}/commit{query}", token=token)


def pieces(raw: bytes, size: int) -> list[tuple[int, bytes]]:
    return [(offset, raw[offset:offset + size]) for offset in range(0, len(raw), size)]


def test_reordered_and_repeated_chunks_commit_to_the_exact_bytes() -> None:
    """Chunks sent backwards, some twice: the commit stores exactly the bytes
    as the state's next version, which the Terraform lane then returns."""
    site = NativeSite()
    session = open_session(site, MONOLITH)
    assert (session["received"], session["missing"]) == ([], [[0, len(MONOLITH)]])
    chunks = pieces(MONOLITH, 1000)
    for offset, data in reversed(chunks):
        assert put(site, session["id"], offset, data, md5=content_md5(data)).status == 200
    offset, data = chunks[3]
    repeated = put(site, session["id"], offset, data)
    assert repeated.status == 200 and repeated.json()["complete"] is True
    assert repeated.json()["received"] == [[0, len(MONOLITH)]]
    committed = commit(site, session["id"])
    assert committed.status == 200, committed
    assert committed.json()["version"]["sha256"] == hashlib.sha256(MONOLITH).hexdigest()
    assert site.current("big") == MONOLITH
    again = commit(site, session["id"])
    assert again.status == 200 and again.json()["created"] is False
    assert again.json()["version"]["number"] == 1 and len(site.versions("big")) == 1


def test_a_dropped_connection_resumes_from_what_was_received() -> None:
    """After some chunks, GET shows the received and missing ranges; the
    client sends the missing ones only."""
    site = NativeSite()
    session = open_session(site, MONOLITH)
    chunks = pieces(MONOLITH, 2048)
    for offset, data in chunks[::2]:
        put(site, session["id"], offset, data)
    state = site.request("GET", f"{NATIVE}/uploads/{session['id']}").json()
    assert state["complete"] is False
    assert state["missing"] == [[offset, offset + len(data)] for offset, data in chunks[1::2]]
    for start, end in state["missing"]:
        assert put(site, session["id"], start, MONOLITH[start:end]).status == 200
    assert commit(site, session["id"]).status == 200
    assert site.current("big") == MONOLITH


def test_refused_chunks() -> None:
    """Overlapping other content (409), outside the size, empty (400), too
    long (413), a wrong Content-MD5 (400), no offset (400); a commit of an
    incomplete session (409)."""
    site = NativeSite()
    session = open_session(site, MONOLITH)
    upload = session["id"]
    assert put(site, upload, 0, MONOLITH[:100]).status == 200
    overlap = put(site, upload, 50, MONOLITH[50:150])
    assert (overlap.status, overlap.json()["error"]["code"]) == (409, "chunk_conflict")
    assert put(site, upload, 0, b"x" * 100).status == 409
    assert put(site, upload, len(MONOLITH) - 1, b"ab").status == 400
    assert put(site, upload, 200, b"").status == 400
    assert put(site, upload, 0, b"x" * (MAX_CHUNK_BYTES + 1)).status == 413
    assert put(site, upload, 100, MONOLITH[100:200], md5=content_md5(b"other")).status == 400
    assert site.request("PUT", f"{NATIVE}/uploads/{upload}", b"x", headers={
        "Content-Type": "application/octet-stream"}).status == 400
    incomplete = commit(site, upload)
    assert (incomplete.status, incomplete.json()["error"]["code"]) == (409, "upload_incomplete")
    received = site.request("GET", f"{NATIVE}/uploads/{upload}").json()["received"]
    assert received == [[0, 100]]


def test_a_wrong_sha256_stores_nothing_and_drops_the_session() -> None:
    """All bytes received, but not the declared ones: 400, no version, the
    session gone."""
    site = NativeSite()
    other = MONOLITH.replace(b'"serial": 15', b'"serial": 16')
    reply = site.json("POST", f"{NATIVE}/uploads", {
        "state": "big", "size": len(other), "sha256": hashlib.sha256(MONOLITH).hexdigest()})
    upload = reply.json()["id"]
    assert put(site, upload, 0, other).status == 200
    refused = commit(site, upload)
    assert (refused.status, refused.json()["error"]["code"]) == (400, "sha256_mismatch")
    assert site.current("big") is None
    assert site.request("GET", f"{NATIVE}/uploads/{upload}").status == 404


def test_bytes_that_are_no_state_store_nothing() -> None:
    """The right SHA-256 of bytes that are not a state: 400 invalid_state."""
    site = NativeSite()
    raw = b'{"version": 3}'
    session = open_session(site, raw)
    put(site, session["id"], 0, raw)
    refused = commit(site, session["id"])
    assert (refused.status, refused.json()["error"]["code"]) == (400, "invalid_state")
    assert site.current("big") is None


def test_a_commit_follows_the_lock_matrix_like_a_post() -> None:
    """Locked by someone: 423 with the holder (nothing stored, the session
    kept); with the holder's ?ID=: written; a stale ID: 409 lock_not_held."""
    site = NativeSite()
    session = open_session(site, MONOLITH)
    put(site, session["id"], 0, MONOLITH)
    held = lock_body("their-lock")
    assert site.lock("big", held).status == 200
    refused = commit(site, session["id"])
    assert refused.status == 423 and refused.json()["error"]["lock"] == json.loads(held)
    assert commit(site, session["id"], "another").status == 423
    assert commit(site, session["id"], "their-lock").status == 200
    assert site.current("big") == MONOLITH
    assert site.unlock("big", held).status == 200
    stale = open_session(site, MONOLITH.replace(b'"serial": 15', b'"serial": 17'))
    put(site, stale["id"], 0, MONOLITH.replace(b'"serial": 15', b'"serial": 17'))
    gone = commit(site, stale["id"], "their-lock")
    assert (gone.status, gone.json()["error"]["code"]) == (409, "lock_not_held")


def test_sessions_expire_on_the_clock() -> None:
    """A session lives DEFAULT_UPLOAD_TTL seconds after its last chunk; after
    that it is a 404 (the same as an unknown id)."""
    site = NativeSite()
    session = open_session(site, MONOLITH)
    site.clock.advance(DEFAULT_UPLOAD_TTL - 1)
    assert put(site, session["id"], 0, MONOLITH[:10]).status == 200
    site.clock.advance(DEFAULT_UPLOAD_TTL - 1)
    assert site.request("GET", f"{NATIVE}/uploads/{session['id']}").status == 200
    site.clock.advance(1)
    expired = site.request("GET", f"{NATIVE}/uploads/{session['id']}")
    unknown = site.request("GET", f"{NATIVE}/uploads/up_000000000000000000000000")
    assert expired.status == 404 and expired.body == unknown.body


def test_declarations_and_limits() -> None:
    """Bad openings are 400s naming the field; a principal has at most a few
    sessions open at once (409); a read-only token none (403)."""
    site = NativeSite()
    digest = hashlib.sha256(b"x").hexdigest()
    for document, field in (({"state": "s", "size": 0, "sha256": digest}, "size"),
                            ({"state": "s", "size": 1 << 30, "sha256": digest}, "size"),
                            ({"state": "s", "size": True, "sha256": digest}, "size"),
                            ({"state": "s", "size": 1, "sha256": digest.upper()}, "sha256"),
                            ({"state": "", "size": 1, "sha256": digest}, "state"),
                            ({"state": "a/b", "size": 1, "sha256": digest}, "state"),
                            ({"size": 1, "sha256": digest, "more": 1}, "body")):
        reply = site.json("POST", f"{NATIVE}/uploads", document)
        assert (reply.status, reply.json()["error"]["field"]) == (400, field), document
    for _ in range(4):
        assert site.json("POST", f"{NATIVE}/uploads", {
            "state": "s", "size": 1, "sha256": digest}).status == 201
    assert site.json("POST", f"{NATIVE}/uploads", {
        "state": "s", "size": 1, "sha256": digest}).status == 409
    assert site.json("POST", f"{NATIVE}/uploads", {
        "state": "s", "size": 1, "sha256": digest}, "reader").status == 403


@pytest.mark.parametrize(("body", "code", "field"), [
    (b'{"state": "s\\u0000", "size": 1, "sha256": "00"}', "nul_character", "state"),
    (b'{"state": "s", "size": 1, "sha256": "00", "x": ' + b"[" * 600 + b"]" * 600 + b"}",
     "too_deep", "x"),
    (b'{"state": "s", "size": 1e400, "sha256": "00"}', "not_finite", "size"),
    (b'{"state": "\\udc00", "size": 1, "sha256": "00"}', "invalid_unicode", "state"),
])
def test_text_rules_on_upload_declarations(body: bytes, code: str, field: str) -> None:
    """An opening breaking a text rule is a 400 with the rule's code naming
    the member (as every JSON body of every lane); no session is opened."""
    site = NativeSite()
    reply = site.request("POST", f"{NATIVE}/uploads", body,
                         headers={"Content-Type": "application/json"})
    error = reply.json()["error"]
    assert (reply.status, error["code"], error.get("field")) == (400, code, field), error
    digest = hashlib.sha256(b"x").hexdigest()
    for _ in range(4):  # every place is still free
        assert site.json("POST", f"{NATIVE}/uploads", {
            "state": "s", "size": 1, "sha256": digest}).status == 201


def test_an_upload_imported_by_an_operation() -> None:
    """A complete session feeds an import operation (then it is consumed)."""
    site = NativeSite()
    session = open_session(site, MONOLITH, state="imported")
    put(site, session["id"], 0, MONOLITH)
    reply = site.operation({"kind": "import", "state": "imported", "upload": session["id"]})
    assert reply.status == 202
    assert site.read_operation(reply.json()["id"])["status"] == "succeeded"
    assert site.current("imported") == MONOLITH
    assert site.request("GET", f"{NATIVE}/uploads/{session['id']}").status == 404
    other = open_session(site, MONOLITH, state="elsewhere")
    put(site, other["id"], 0, MONOLITH)
    wrong = site.operation({"kind": "import", "state": "imported", "upload": other["id"]})
    assert (wrong.status, wrong.json()["error"]["field"]) == (400, "upload")


def test_an_import_of_anothers_upload_is_answered_as_an_unknown_one() -> None:
    """An import naming a complete upload session of another principal of
    the tenant, or of another tenant, is refused (400 invalid_field on
    upload) with the very bytes of an id nobody opened: handles are owned,
    and an answer never says whose they are.  The session stays its
    owner's, who imports it."""
    site = NativeSite()
    for owner, state in (("bob", "imported"), ("gus", "imported")):
        session = open_session(site, MONOLITH, state=state, token=owner)
        assert put(site, session["id"], 0, MONOLITH, token=owner).status == 200
        document = {"kind": "import", "state": "imported", "upload": session["id"]}
        theirs = site.operation(document)
        unknown = site.operation({**document, "upload": "up_" + "0" * 24})
        assert (theirs.status, theirs.body) == (400, unknown.body)
        assert unknown.json()["error"]["field"] == "upload"
        assert site.current("imported", token=owner) is None
        mine = site.operation(document, token=owner)
        assert site.read_operation(mine.json()["id"], owner)["status"] == "succeeded"
        assert site.current("imported", token=owner) == MONOLITH


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_any_chunking_in_any_order_commits_the_bytes(data: st.DataObject) -> None:
    """Any cut into chunks, sent in any order with any repeats: the commit
    stores exactly the bytes."""
    site = NativeSite()
    cuts = sorted(set(data.draw(st.lists(st.integers(1, len(MONOLITH) - 1), max_size=12))))
    bounds = [0, *cuts, len(MONOLITH)]
    chunks = [(a, MONOLITH[a:b]) for a, b in itertools.pairwise(bounds)]
    sent = data.draw(st.permutations(chunks + data.draw(st.lists(st.sampled_from(chunks),
                                                                  max_size=4))))
    session = open_session(site, MONOLITH)
    for offset, piece in sent:
        assert put(site, session["id"], offset, piece).status == 200
    assert commit(site, session["id"]).status == 200
    assert site.current("big") == MONOLITH


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["GET", "PUT", "POST", "DELETE", "PATCH"]),
       st.text(max_size=30), st.binary(max_size=64))
def test_any_request_on_uploads_is_never_a_500(method: str, tail: str, body: bytes) -> None:
    """Any method, path below /uploads and body: an answer, never a 500."""
    site = NativeSite()
    path = f"{NATIVE}/uploads/" + quote(tail, safe="/")
    reply = site.request(method, path, body)
    assert reply.status < 500, reply


@pytest.mark.parametrize("query", ["offset=-1", "offset=x", "offset=1e3", "offset=%ff"])
def test_bad_offsets(query: str) -> None:
    site = NativeSite()
    session = open_session(site, MONOLITH)
    reply = site.request("PUT", f"{NATIVE}/uploads/{session['id']}?{query}", b"x")
    assert reply.status == 400


def test_a_commit_takes_its_place_in_the_upload_budgets() -> None:
    """A large commit counts in the listener's body budget like a POST of its
    size: past it, 503 uploads_over_budget with Retry-After and nothing
    stored; once the budget has room, the same commit is stored."""
    site = NativeSite()
    budget = site.site.site.budget
    budget.large_body_bytes, budget.body_budget = 1000, len(MONOLITH) + 10
    session = open_session(site, MONOLITH)
    put(site, session["id"], 0, MONOLITH)
    other = budget.admit(500)
    assert other is not None
    refused = commit(site, session["id"])
    assert (refused.status, refused.json()["error"]["code"]) == (503, "uploads_over_budget")
    assert refused.header(b"retry-after") is not None
    assert site.current("big") is None
    budget.release(other)
    assert commit(site, session["id"]).status == 200
    assert site.current("big") == MONOLITH and budget.admitted == []
