"""The HTTP backend lane, resource by resource, in memory.

Every rule of the HTTP backend contract that can be checked without a socket:
success codes, each lock-matrix cell, replays, bodies, paths, methods, auth.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from twisted.internet.defer import fail

from kilolock.core.model import DEFAULT_TENANT, StateKey
from kilolock.store.memory.store import MemoryStateStore
from tests.support.stub_client import (
    StubClient,
    content_md5,
    lock_body,
    state_body,
    terraform_headers,
)

STATE = "/v1/states/example"
KEY = StateKey(DEFAULT_TENANT, "example")


@pytest.fixture
def client() -> StubClient:
    return StubClient()


def versions(client: StubClient, key: StateKey = KEY) -> list[Any]:
    result: list[Any] = []
    client.store.list_versions(key).addCallback(result.append)
    return result[0]


def events(client: StubClient) -> list[Any]:
    result: list[Any] = []
    client.store.list_events(DEFAULT_TENANT).addCallback(result.append)
    return result[0]


def locked(client: StubClient, lock_id: str = "held-id") -> bytes:
    body = lock_body(lock_id)
    assert client.lock(STATE, body).status == 200
    return body


# -- GET / POST -------------------------------------------------------------


def test_get_missing_state_is_404_with_empty_body(client: StubClient) -> None:
    """GET of a state never written answers 404 with no body."""
    reply = client.get(STATE)
    assert (reply.status, reply.body) == (404, b"")


def test_get_after_lock_only_is_still_404(client: StubClient) -> None:
    """A LOCK creates the state row but GET stays 404 until a version exists."""
    locked(client)
    reply = client.get(STATE)
    assert (reply.status, reply.body) == (404, b"")


def test_post_then_get_returns_exact_bytes(client: StubClient) -> None:
    """A written state is answered byte-for-byte with a JSON content type."""
    body = state_body(1)
    reply = client.post(STATE, body)
    assert (reply.status, reply.body) == (200, b"")
    got = client.get(STATE)
    assert got.status == 200
    assert got.body == body
    assert got.header(b"content-type") == b"application/json"


def test_put_is_an_alias_of_post(client: StubClient) -> None:
    """update_method = "PUT" writes exactly like POST."""
    body = state_body(3)
    reply = client.request("PUT", STATE, body=body, headers=terraform_headers(body))
    assert reply.status == 200
    assert client.get(STATE).body == body


def test_head_answers_like_get_without_body(client: StubClient) -> None:
    """HEAD on a state answers the GET status and no body."""
    client.post(STATE, state_body(1))
    reply = client.request("HEAD", STATE)
    assert (reply.status, reply.body) == (200, b"")


def test_identical_replay_is_200_without_new_version(client: StubClient) -> None:
    """A byte-identical retry of a committed write answers 200 and stores nothing new."""
    body = state_body(5)
    assert client.post(STATE, body).status == 200
    assert client.post(STATE, body).status == 200
    assert len(versions(client)) == 1
    assert [event.kind for event in events(client)] == ["state_write"]


def test_same_serial_different_bytes_is_409_naming_the_serial(client: StubClient) -> None:
    """Same serial as the current version with other bytes: 409 serial_conflict."""
    client.post(STATE, state_body(5))
    reply = client.post(STATE, state_body(5, lineage="other"))
    assert reply.status == 409
    assert reply.error_code == "serial_conflict"
    assert "5" in reply.json()["error"]["message"]
    assert client.get(STATE).body == state_body(5)


def test_lower_serial_becomes_current(client: StubClient) -> None:
    """A lower serial (state push -force, migration) is a new, current version."""
    client.post(STATE, state_body(7))
    lower = state_body(2, lineage="new-lineage")
    assert client.post(STATE, lower).status == 200
    assert client.get(STATE).body == lower
    assert [v.serial for v in versions(client)] == [7, 2]


def test_every_version_is_kept(client: StubClient) -> None:
    """Each accepted write adds one version; the history keeps them all."""
    for serial in (1, 2, 3):
        client.post(STATE, state_body(serial))
    assert [v.serial for v in versions(client)] == [1, 2, 3]
    assert [v.number for v in versions(client)] == [1, 2, 3]


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"", "empty"),
        (b"{not json", "not valid JSON"),
        (b"[1, 2]", "object"),
        (json.dumps({"version": 3, "serial": 1, "lineage": "x"}).encode(), "version"),
        (json.dumps({"version": 4, "lineage": "x", "resources": []}).encode(), "serial"),
        (json.dumps({"version": 4, "serial": "1", "lineage": "x"}).encode(), "serial"),
        (json.dumps({"version": 4, "serial": 1, "lineage": 5}).encode(), "lineage"),
    ],
    ids=["empty", "not-json", "array", "version-3", "no-serial", "string-serial",
         "number-lineage"],
)
def test_bad_state_bodies_are_400_and_store_nothing(client: StubClient, body: bytes,
                                                    fragment: str) -> None:
    """Anything but a v4 state or an OpenTofu envelope: 400 naming the problem."""
    reply = client.post(STATE, body)
    assert reply.status == 400
    assert reply.error_code == "invalid_state"
    assert fragment.lower() in reply.json()["error"]["message"].lower()
    assert versions(client) == []


def test_error_never_echoes_state_content(client: StubClient) -> None:
    """A refused body's content (here a secret) never appears in the answer."""
    body = json.dumps({"version": 3, "serial": 1, "lineage": "x",
                       "secret": "hunter2-very-secret"}).encode()
    reply = client.post(STATE, body)
    assert reply.status == 400
    assert b"hunter2" not in reply.body


def test_encrypted_envelope_stored_verbatim_and_not_projected(client: StubClient) -> None:
    """An OpenTofu encrypted envelope is stored byte-for-byte and not projected."""
    body = json.dumps({"serial": 4, "lineage": "l", "meta": {"key_provider.pbkdf2.x": "e30="},
                       "encrypted_data": "AAAA", "encryption_version": "v0"}).encode()
    assert client.post(STATE, body).status == 200
    assert client.get(STATE).body == body
    result: list[Any] = []
    client.store.get_projection(KEY).addCallback(result.append)
    assert result == [None]
    assert versions(client)[0].projected is False


def test_content_md5_mismatch_is_400_and_nothing_stored(client: StubClient) -> None:
    """A body whose Content-MD5 does not match is refused and not stored."""
    body = state_body(1)
    reply = client.post(STATE, body, headers={"Content-MD5": content_md5(b"other")})
    assert reply.status == 400
    assert reply.error_code == "content_md5_mismatch"
    assert client.get(STATE).status == 404


def test_content_md5_not_base64_is_400(client: StubClient) -> None:
    """A Content-MD5 that is not base64 is refused."""
    reply = client.post(STATE, state_body(1), headers={"Content-MD5": "%%%"})
    assert reply.status == 400
    assert client.get(STATE).status == 404


def test_post_without_content_md5_is_accepted(client: StubClient) -> None:
    """Content-MD5 is checked when present, not required."""
    assert client.post(STATE, state_body(1), md5=False).status == 200


def test_lock_with_bad_md5_is_400(client: StubClient) -> None:
    """LOCK bodies are checked against Content-MD5 too."""
    reply = client.request("LOCK", STATE, body=lock_body("a"),
                           headers={"Content-MD5": content_md5(b"x")})
    assert reply.status == 400
    assert client.lock(STATE, lock_body("b")).status == 200


# -- the lock matrix --------------------------------------------------------


def test_lock_free_state_is_200_with_empty_body(client: StubClient) -> None:
    """LOCK on a free state acquires it: exactly 200."""
    reply = client.lock(STATE, lock_body("a"))
    assert (reply.status, reply.body) == (200, b"")


def test_lock_with_holders_own_id_is_idempotent_200(client: StubClient) -> None:
    """A retried LOCK with the holder's ID answers 200 and keeps the lock."""
    body = locked(client, "a")
    assert client.lock(STATE, body).status == 200
    assert client.lock(STATE, lock_body("b")).status == 423


def test_lock_conflict_is_423_with_holder_bytes_verbatim(client: StubClient) -> None:
    """LOCK on a held state: 423 Locked, body = the holder's LockInfo bytes."""
    holder = lock_body("holder", who="bob@ci", created="2026-11-29T23:05:20.2Z")
    client.lock(STATE, holder)
    reply = client.lock(STATE, lock_body("other"))
    assert reply.status == 423
    assert reply.phrase == b"Locked"
    assert reply.body == holder


@pytest.mark.parametrize(
    "body",
    [b"", b"not json", b"[]", b'"id"', b"{}", b'{"ID": ""}', b'{"ID": 5}',
     b'{"Who": "x"}'],
    ids=["empty", "not-json", "array", "string", "no-id", "empty-id", "number-id", "who-only"],
)
def test_lock_with_bad_lockinfo_is_400(client: StubClient, body: bytes) -> None:
    """LOCK needs a JSON object with a non-empty string ID."""
    reply = client.lock(STATE, body)
    assert reply.status == 400
    assert reply.error_code == "invalid_lock_info"
    assert client.lock(STATE, lock_body("a")).status == 200


def test_owner_unlock_without_lock_is_idempotent_200(client: StubClient) -> None:
    """Owner UNLOCK when nothing is held answers 200."""
    assert client.unlock(STATE, lock_body("a")).status == 200


def test_owner_unlock_releases(client: StubClient) -> None:
    """Owner UNLOCK with the held ID releases the lock."""
    body = locked(client, "a")
    reply = client.unlock(STATE, body)
    assert (reply.status, reply.body) == (200, b"")
    assert client.lock(STATE, lock_body("b")).status == 200


def test_owner_unlock_other_id_is_409_with_holder(client: StubClient) -> None:
    """Owner UNLOCK with another ID: 409 and the holder's LockInfo; lock kept."""
    holder = locked(client, "a")
    reply = client.unlock(STATE, lock_body("b"))
    assert reply.status == 409
    assert reply.body == holder
    assert client.lock(STATE, lock_body("c")).status == 423


@pytest.mark.parametrize("body", [b"", b'{"ID": ""}', b"{}", b'{"ID": null}'],
                         ids=["empty", "empty-id", "no-id", "null-id"])
def test_force_unlock_releases_any_lock_and_is_audited(client: StubClient,
                                                       body: bytes) -> None:
    """Force UNLOCK (empty body or empty ID) releases and records lock_force_release."""
    locked(client, "a")
    assert client.unlock(STATE, body).status == 200
    assert client.lock(STATE, lock_body("b")).status == 200
    forced = [e for e in events(client) if e.kind == "lock_force_release"]
    assert len(forced) == 1
    assert forced[0].lock_id == "a"


@pytest.mark.parametrize("body", [b"", b'{"ID": ""}'], ids=["empty", "empty-id"])
def test_force_unlock_without_lock_is_200(client: StubClient, body: bytes) -> None:
    """Force UNLOCK with nothing held is an idempotent 200."""
    assert client.unlock(STATE, body).status == 200
    assert [e.kind for e in events(client)] == []


def test_unlock_with_non_json_body_is_400(client: StubClient) -> None:
    """UNLOCK with a non-empty body that is not JSON is refused; the lock stays."""
    locked(client, "a")
    assert client.unlock(STATE, b"garbage text").status == 400
    assert client.lock(STATE, lock_body("b")).status == 423


def test_opentofu_force_unlock_with_user_id_is_owner_release(client: StubClient) -> None:
    """OpenTofu sends LockInfo with the user's ID and zeroed fields: owner release."""
    locked(client, "abc")
    zeroed = json.dumps({"ID": "abc", "Operation": "", "Info": "", "Who": "",
                         "Version": "", "Created": "0001-01-01T00:00:00Z",
                         "Path": ""}).encode()
    wrong = zeroed.replace(b"abc", b"xyz")
    assert client.unlock(STATE, wrong).status == 409
    assert client.unlock(STATE, zeroed).status == 200


def test_post_with_id_and_no_lock_is_409_lock_not_held(client: StubClient) -> None:
    """The stale-writer fence: POST ?ID= with no lock held is 409 lock_not_held."""
    reply = client.post(STATE + "?ID=gone", state_body(1))
    assert reply.status == 409
    assert reply.error_code == "lock_not_held"
    assert client.get(STATE).status == 404


def test_post_with_holders_id_writes(client: StubClient) -> None:
    """POST ?ID=H while H holds the lock writes."""
    locked(client, "a")
    assert client.post(STATE + "?ID=a", state_body(1)).status == 200
    assert client.get(STATE).body == state_body(1)


def test_post_with_other_id_is_423_with_holder(client: StubClient) -> None:
    """POST ?ID=x while H != x holds the lock: 423 + holder; nothing stored."""
    holder = locked(client, "a")
    reply = client.post(STATE + "?ID=b", state_body(1))
    assert (reply.status, reply.body) == (423, holder)
    assert client.get(STATE).status == 404


def test_post_without_id_on_free_state_writes(client: StubClient) -> None:
    """POST without ID on an unlocked state writes (terraform -lock=false)."""
    assert client.post(STATE, state_body(1)).status == 200


def test_post_without_id_while_locked_is_423(client: StubClient) -> None:
    """POST without ID while locked: 423 + holder."""
    holder = locked(client, "a")
    reply = client.post(STATE, state_body(1))
    assert (reply.status, reply.body) == (423, holder)


def test_post_query_is_parsed_not_matched(client: StubClient) -> None:
    """Terraform re-encodes and sorts the query: ?ID= is found among other keys."""
    locked(client, "a b")
    reply = client.post(STATE + "?ID=a+b&b=2&tenant=acme", state_body(1))
    assert reply.status == 200


def test_id_is_read_like_every_query_parameter(client: StubClient) -> None:
    """?ID= is read by the one rule of every lane: the last value wins, and
    one that is not UTF-8 or holds a NUL is a 400 naming the text rule and
    the parameter (nothing stored)."""
    locked(client, "a")
    assert client.post(STATE + "?ID=b&ID=a", state_body(1)).status == 200
    for value, rule in (("%FF", "invalid_unicode"), ("a%00", "nul_character")):
        reply = client.post(STATE + "?ID=" + value, state_body(2))
        assert (reply.status, reply.error_code) == (400, rule)
        assert reply.json()["error"]["field"] == "ID"
        assert "ID" in reply.json()["error"]["message"]
    assert client.get(STATE).body == state_body(1)


def test_delete_free_state_is_200_and_gone(client: StubClient) -> None:
    """DELETE without ID on an unlocked state removes it: exactly 200."""
    client.post(STATE, state_body(1))
    reply = client.delete(STATE)
    assert (reply.status, reply.body) == (200, b"")
    assert client.get(STATE).status == 404
    assert versions(client) == []


def test_delete_missing_state_is_404_json(client: StubClient) -> None:
    """DELETE of a state that does not exist: 404 state_not_found."""
    reply = client.delete(STATE)
    assert reply.status == 404
    assert reply.error_code == "state_not_found"


def test_delete_with_id_and_no_lock_is_409(client: StubClient) -> None:
    """DELETE ?ID= with no lock held: 409 lock_not_held; the state stays."""
    client.post(STATE, state_body(1))
    reply = client.delete(STATE + "?ID=x")
    assert (reply.status, reply.error_code) == (409, "lock_not_held")
    assert client.get(STATE).status == 200


def test_delete_with_holders_id_deletes(client: StubClient) -> None:
    """DELETE ?ID=H while H holds the lock deletes the state (and its lock)."""
    client.post(STATE, state_body(1))
    locked(client, "a")
    assert client.delete(STATE + "?ID=a").status == 200
    assert client.get(STATE).status == 404
    assert client.lock(STATE, lock_body("b")).status == 200


@pytest.mark.parametrize("query", ["", "?ID=b"], ids=["no-id", "other-id"])
def test_delete_while_locked_by_other_is_423(client: StubClient, query: str) -> None:
    """DELETE without ID, or with another ID, while locked: 423 + holder."""
    client.post(STATE, state_body(1))
    holder = locked(client, "a")
    reply = client.delete(STATE + query)
    assert (reply.status, reply.body) == (423, holder)
    assert client.get(STATE).status == 200


def test_delete_keeps_events(client: StubClient) -> None:
    """Events of a deleted state survive, with the state_delete event itself."""
    client.post(STATE, state_body(1))
    client.delete(STATE)
    assert [e.kind for e in events(client)] == ["state_write", "state_delete"]
    assert all(e.state_path == "example" for e in events(client))


def test_reads_are_never_refused_by_a_lock(client: StubClient) -> None:
    """GET answers while another client holds the lock."""
    client.post(STATE, state_body(1))
    locked(client, "a")
    assert client.get(STATE).status == 200


# -- aliases ----------------------------------------------------------------


def test_gitlab_lock_alias_post_locks_and_delete_unlocks(client: StubClient) -> None:
    """POST {state}/lock = LOCK and DELETE {state}/lock = UNLOCK."""
    body = lock_body("a")
    assert client.request("POST", STATE + "/lock", body=body,
                          headers=terraform_headers(body)).status == 200
    reply = client.lock(STATE, lock_body("b"))
    assert (reply.status, reply.body) == (423, body)
    assert client.request("DELETE", STATE + "/lock", body=body,
                          headers=terraform_headers(body)).status == 200
    assert client.lock(STATE, lock_body("b")).status == 200


def test_gitlab_lock_alias_conflict_is_423(client: StubClient) -> None:
    """The POST lock alias answers a conflict like LOCK does."""
    holder = locked(client, "a")
    body = lock_body("b")
    reply = client.request("POST", STATE + "/lock", body=body, headers=terraform_headers(body))
    assert (reply.status, reply.body) == (423, holder)


@pytest.mark.parametrize(
    ("body", "query"),
    [
        (lock_body("a"), ""),
        (b"a", ""),
        (b'"a"', ""),
        (b"", "?ID=a"),
    ],
    ids=["lockinfo", "plain-string", "json-string", "query-id"],
)
def test_state_unlock_alias_owner_shapes(client: StubClient, body: bytes, query: str) -> None:
    """POST /v1/state-unlock accepts LockInfo, a plain ID, a JSON string and ?ID=."""
    locked(client, "a")
    wrong_body = body.replace(b"a", b"z")
    wrong = client.request("POST", "/v1/state-unlock/example" + query.replace("a", "z"),
                           body=wrong_body, headers=terraform_headers(wrong_body))
    assert wrong.status == 409
    reply = client.request("POST", "/v1/state-unlock/example" + query, body=body,
                           headers=terraform_headers(body))
    assert reply.status == 200
    assert client.lock(STATE, lock_body("b")).status == 200


def test_state_unlock_alias_empty_body_forces(client: StubClient) -> None:
    """POST /v1/state-unlock with an empty body force-releases."""
    locked(client, "a")
    reply = client.request("POST", "/v1/state-unlock/example", body=b"",
                           headers=terraform_headers(b""))
    assert reply.status == 200
    assert [e.kind for e in events(client)][-1] == "lock_force_release"


def test_state_unlock_alias_only_answers_post(client: StubClient) -> None:
    """The unlock alias answers other methods with 405 and Allow: POST."""
    reply = client.request("GET", "/v1/state-unlock/example")
    assert reply.status == 405
    assert reply.header(b"allow") == b"POST"


# -- paths and methods -------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "rule"),
    [
        ("/v1/states/a%2Fb", "encoded_slash"),
        ("/v1/states/a%2fb", "encoded_slash"),
        ("/v1/states/..", "dot_segment"),
        ("/v1/states/%2E%2E", "dot_segment"),
        ("/v1/states/.", "dot_segment"),
        ("/v1/states/", "empty_segment"),
        ("/v1/states/a//b/c", "empty_segment"),
        ("/v1/states/a%00b", "control_character"),
        ("/v1/states/a%0Ab", "control_character"),
        ("/v1/states/a%7Fb", "control_character"),
        ("/v1/states/a%5Cb", "backslash"),
        ("/v1/states/" + "x" * 256, "segment_too_long"),
        ("/v1/states/" + "%C3%A9" * 128, "segment_too_long"),
        ("/v1/states/%FF", "invalid_utf8"),
        ("/v1/state-unlock/a%2Fb", "encoded_slash"),
    ],
)
def test_bad_path_segments_are_400_naming_the_rule(client: StubClient, path: str,
                                                   rule: str) -> None:
    """Each path rule is answered 400 with a JSON error naming it; nothing stored."""
    for method in ("GET", "POST", "LOCK"):
        body = state_body(1) if method == "POST" else lock_body("a")
        reply = client.request(method, path, body=body, headers=terraform_headers(body))
        assert reply.status == 400, (method, reply)
        assert reply.error_code == rule
    result: list[Any] = []
    client.store.list_states(DEFAULT_TENANT).addCallback(result.append)
    assert result == [[]]


def test_name_of_255_bytes_is_accepted(client: StubClient) -> None:
    """A segment of exactly 255 bytes of UTF-8 is a valid name."""
    path = "/v1/states/" + "x" * 255
    assert client.post(path, state_body(1)).status == 200
    assert client.get(path).status == 200


def test_unicode_names_are_decoded_per_segment(client: StubClient) -> None:
    """Percent-encoded UTF-8 names are decoded segment by segment."""
    assert client.post("/v1/states/%C3%A9t%C3%A9", state_body(1)).status == 200
    result: list[Any] = []
    client.store.get_summary(StateKey(DEFAULT_TENANT, "été")).addCallback(result.append)
    assert result[0] is not None


def test_hosted_shape_is_a_separate_state(client: StubClient) -> None:
    """/v1/states/a/b/c addresses one state whose path is its three segments."""
    client.post("/v1/states/ws/env/prod", state_body(1))
    assert client.get("/v1/states/ws/env/prod").status == 200
    assert client.get("/v1/states/prod").status == 404


def test_two_segments_fit_no_route(client: StubClient) -> None:
    """/v1/states/a/b (neither one nor three names) is a JSON 404."""
    reply = client.get("/v1/states/a/b")
    assert reply.status == 404
    assert reply.error_code == "not_found"


def test_state_named_lock_is_addressable(client: StubClient) -> None:
    """A single-segment state named 'lock' is still an ordinary state."""
    assert client.post("/v1/states/lock", state_body(1)).status == 200
    assert client.get("/v1/states/lock").body == state_body(1)


@pytest.mark.parametrize("method", ["PATCH", "OPTIONS", "PROPFIND", "BREW"])
def test_unknown_methods_are_405_with_allow(client: StubClient, method: str) -> None:
    """Methods the lane does not serve: 405 with the Allow header and a JSON error."""
    reply = client.request(method, STATE)
    assert reply.status == 405
    allowed = set(reply.header(b"allow").decode().split(", "))
    assert allowed == {"DELETE", "GET", "HEAD", "LOCK", "POST", "PUT", "UNLOCK"}
    assert reply.error_code == "method_not_allowed"


def test_lock_alias_allows_post_and_delete_only(client: StubClient) -> None:
    """The /lock alias answers GET with 405 and Allow: DELETE, POST."""
    reply = client.request("GET", STATE + "/lock")
    assert reply.status == 405
    assert reply.header(b"allow") == b"DELETE, POST"


def test_unknown_route_is_json_404(client: StubClient) -> None:
    """Paths outside the lane are JSON 404s, never HTML."""
    for path in ("/", "/v1", "/v1/other", "/nope/x"):
        reply = client.get(path)
        assert reply.status == 404
        assert reply.header(b"content-type") == b"application/json"


# -- auth -------------------------------------------------------------------


@pytest.fixture
def static_client() -> StubClient:
    return StubClient(auth_token="s3cret-token")


def basic(user: str, password: str) -> dict[str, str]:
    import base64

    return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_static_mode_without_credentials_is_401_with_challenge(static_client: StubClient) -> None:
    """No credentials: 401 and WWW-Authenticate: Basic realm="kilolock"."""
    reply = static_client.get(STATE)
    assert reply.status == 401
    assert reply.header(b"www-authenticate") == b'Basic realm="kilolock"'
    assert reply.error_code == "unauthorized"


@pytest.mark.parametrize(
    "headers",
    [basic("terraform", "wrong"), {"Authorization": "Bearer wrong"},
     {"Authorization": "Digest abc"}, basic("terraform", "s3cret-token-and-more")],
    ids=["basic-wrong", "bearer-wrong", "other-scheme", "prefix-match"],
)
def test_static_mode_wrong_credentials_are_401(static_client: StubClient,
                                               headers: dict[str, str]) -> None:
    """Wrong secrets are refused with 401; the secret never appears in the answer."""
    reply = static_client.get(STATE, headers=headers)
    assert reply.status == 401
    assert b"s3cret" not in reply.body
    assert b"wrong" not in reply.body


@pytest.mark.parametrize(
    "headers",
    [basic("anything", "s3cret-token"), {"Authorization": "Bearer s3cret-token"}],
    ids=["basic", "bearer"],
)
def test_static_mode_accepts_basic_password_or_bearer(static_client: StubClient,
                                                      headers: dict[str, str]) -> None:
    """The static token works as a Basic password (Terraform) or Bearer (OpenTofu)."""
    body = state_body(1)
    reply = static_client.post(STATE, body, headers=dict(headers))
    assert reply.status == 200
    assert static_client.get(STATE, headers=headers).body == body


def test_static_mode_refuses_writes_without_credentials(static_client: StubClient) -> None:
    """Mutations without credentials are 401 and store nothing."""
    assert static_client.post(STATE, state_body(1)).status == 401
    assert static_client.lock(STATE, lock_body("a")).status == 401
    assert static_client.get(STATE, headers=basic("u", "s3cret-token")).status == 404


def test_healthz_is_unauthenticated(static_client: StubClient) -> None:
    """/healthz answers without credentials and says nothing about tenants."""
    reply = static_client.get("/healthz")
    assert reply.status == 200
    assert reply.json() == {"status": "ok"}


@pytest.mark.parametrize("header", ["Basic %%%", "Basic " + "dXNlcg==", "Bearer", "Digest x"],
                         ids=["not-base64", "no-colon", "empty-bearer", "digest"])
def test_malformed_credentials_are_401_with_challenge(static_client: StubClient,
                                                      header: str) -> None:
    """Malformed or unsupported credentials are wrong credentials: 401 + challenge."""
    reply = static_client.get(STATE, headers={"Authorization": header})
    assert reply.status == 401
    assert reply.header(b"www-authenticate") == b'Basic realm="kilolock"'


@pytest.mark.parametrize("header", ["Basic %%%", "Digest x", "Bearer anything"])
def test_open_mode_ignores_credentials(client: StubClient, header: str) -> None:
    """In open mode any Authorization header is ignored."""
    assert client.post(STATE, state_body(1), headers={"Authorization": header}).status == 200


def test_healthz_has_no_children(client: StubClient) -> None:
    """/healthz/anything is a 404, not a second health endpoint."""
    assert client.get("/healthz/anything").status == 404


# -- unexpected failures ------------------------------------------------------


class _BrokenStore(MemoryStateStore):
    def read_current(self, key: StateKey) -> Any:
        return fail(RuntimeError("connection to db failed: password=hunter2"))


def test_unexpected_error_is_opaque_json_500() -> None:
    """An unexpected failure is a JSON 500 with an incident id, never its message."""
    client = StubClient(store=_BrokenStore())
    reply = client.get(STATE)
    assert reply.status == 500
    assert reply.error_code == "internal_error"
    assert b"hunter2" not in reply.body
    assert b"Traceback" not in reply.body
