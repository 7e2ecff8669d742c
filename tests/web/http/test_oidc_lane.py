"""CI tokens on the state lanes, in memory (static mode): the Terraform lane
and the native API through a real Kilolock Site, the policy of
C{oidc_support.static_policy_document}, keys configured inline, time from a
task.Clock.  Every refusal is a 401 or 403, names its reason in the access
log, and writes nothing."""

from __future__ import annotations

import json

import pytest

from kilolock.auth.oidc.grace import DEFAULT_GRACE
from tests.support.oidc_issuer import github_claims, github_pull_request_claims, gitlab_claims
from tests.support.oidc_support import (
    ATTACK_REASONS,
    STATIC_TOKEN,
    OidcLane,
    access_events,
    attack_tokens,
    basic,
    bearer,
    captured_logs,
    oidc_basic,
)
from tests.support.stub_client import lock_body, state_body

PROD = "/v1/states/prod-network"


@pytest.fixture
def lane() -> OidcLane:
    return OidcLane()


def test_main_applies_with_the_token_as_basic_password(lane: OidcLane) -> None:
    """LOCK, POST ?ID= and UNLOCK with username oidc and the token: 200s; the
    audit trail names the CI principal and records issuer, sub, repository,
    ref, run, commit SHA and workflow."""
    assert lane.apply(PROD, oidc_basic(lane.token())) == [200, 200, 200]
    events = lane.events()
    assert [e.kind for e in events] == ["lock_acquire", "state_write", "lock_release"]
    assert {e.principal for e in events} == {
        "oidc:github:repo:octo-org/octo-repo:environment:prod"}
    detail = json.loads(events[1].detail)["oidc"]
    assert detail == {
        "issuer": lane.issuer.url, "sub": "repo:octo-org/octo-repo:environment:prod",
        "repository": "octo-org/octo-repo", "repository_id": "74", "ref": "refs/heads/main",
        "ref_type": "branch", "environment": "prod", "run_id": "example-run-id",
        "run_attempt": "2", "sha": "example-sha",
        "workflow_ref": "octo-org/octo-automation/.github/workflows/oidc.yml@refs/heads/main",
        "actor": "octocat", "event": "workflow_dispatch"}
    reply = lane.request("GET", PROD, headers=oidc_basic(lane.token()))
    assert (reply.status, reply.body) == (200, state_body(1))


def test_bearer_and_any_basic_username_carry_a_token_too(lane: OidcLane) -> None:
    """OpenTofu's Authorization: Bearer <jwt>, and a JWT as the password of
    any Basic username, are CI tokens; the static token still works."""
    token = lane.token()
    assert lane.apply(PROD, bearer(token)) == [200, 200, 200]
    lower_case = {"Authorization": "bearer " + token}
    assert lane.apply(PROD, lower_case, serial=2) == [200, 200, 200]
    assert lane.apply(PROD, basic("terraform", token), serial=3) == [200, 200, 200]
    assert lane.apply(PROD, bearer(STATIC_TOKEN), serial=4) == [200, 200, 200]
    principals = [e.principal for e in lane.events() if e.kind == "state_write"]
    assert principals[-1] == "static-token"
    assert len(set(principals[:3])) == 1 and principals[0].startswith("oidc:github:")


def test_a_job_writes_its_own_environment_state(lane: OidcLane) -> None:
    """environment = {environment}: the prod job writes env/prod/*, not
    env/staging/* (403 state_not_granted), which it may not even read."""
    headers = oidc_basic(lane.token())
    assert lane.apply("/v1/states/env/prod/network", headers) == [200, 200, 200]
    with captured_logs() as logs:
        refused = lane.request("LOCK", "/v1/states/env/staging/network", lock_body(), headers)
        read = lane.request("GET", "/v1/states/env/staging/network", headers=headers)
    assert (refused.status, read.status) == (403, 403)
    assert refused.error_code == "forbidden"
    assert "oidc_state_not_granted" in [e["denied"] for e in access_events(logs)]


def test_another_ref_is_refused_and_the_log_names_each_rule(lane: OidcLane) -> None:
    """A token of refs/heads/feature matches no rule: 403 on every method,
    nothing written; the access log says oidc_no_rule_matched, and a warning
    lists each rule with the claim that did not match (never the token)."""
    token = lane.token(ref="refs/heads/feature")
    headers = oidc_basic(token)
    with captured_logs() as logs:
        statuses = lane.apply(PROD, headers)
        reply = lane.request("GET", PROD, headers=headers)
    assert statuses == [403, 403, 403] and reply.status == 403
    assert "no rule" in reply.json()["error"]["message"]
    assert lane.written() == []
    denied = {e["denied"] for e in access_events(logs)}
    assert denied == {"oidc_no_rule_matched"}
    [warning] = [e for e in logs if e.get("oidc_reason") == "no_rule_matched"
                 and "oidc_refusal" in e][:1]
    assert warning["oidc_rules"] == ("main-writes-prod: ref did not match;"
                                     " prs-read: event_name did not match;"
                                     " environments-write-their-own: ref did not match;"
                                     " dashboards-read-outputs: repository_id did not match")
    assert warning["oidc_ref"] == "refs/heads/feature"
    assert token not in repr(logs)
    assert token.split(".")[2] not in repr(logs)


def test_a_pull_request_token_reads_only(lane: OidcLane) -> None:
    """The documented pull_request subject: GET answers the state, LOCK and
    POST are 403 read_only."""
    lane.apply(PROD, bearer(STATIC_TOKEN))
    token = lane.issuer.mint(github_pull_request_claims(lane.issuer.url, iat=lane.now))
    headers = oidc_basic(token)
    assert lane.request("GET", PROD, headers=headers).body == state_body(1)
    assert lane.request("GET", "/v1/states/env/prod/network", headers=headers).status == 404
    with captured_logs() as logs:
        locked = lane.request("LOCK", PROD, lock_body(), headers)
        posted = lane.request("POST", PROD, state_body(2), headers)
    assert (locked.status, posted.status) == (403, 403)
    assert "only reading" in locked.json()["error"]["message"]
    assert {e["denied"] for e in access_events(logs)} == {"oidc_read_only"}
    assert lane.written().count("state_write") == 1


def test_an_outputs_only_grant_reads_outputs_and_nothing_else(lane: OidcLane) -> None:
    """Repository 99 may read prod-* outputs on the native API; the whole
    state (GET on the Terraform lane, a version's bytes) is 403."""
    outputs = {"endpoint": {"value": "https://app.example", "type": "string"},
               "password": {"value": "hunter2", "type": "string", "sensitive": True}}
    lane.request("POST", PROD, state_body(1, outputs=outputs), bearer(STATIC_TOKEN))
    headers = oidc_basic(lane.token(repository_id="99"))
    reply = lane.request("GET", "/v1/native/states/prod-network/-/outputs", headers=headers)
    assert reply.status == 200
    assert {o["name"]: o["value"] for o in reply.json()["outputs"]}["endpoint"] == \
        "https://app.example"
    for path in (PROD, "/v1/native/states/prod-network/-/versions/1",
                 "/v1/native/states/prod-network"):
        assert lane.request("GET", path, headers=headers).status == 403, path


def test_gitlab_tokens_with_their_documented_claims(lane: OidcLane) -> None:
    """GitLab's example payload (project 20, a branch) writes gitlab-*; the
    principal is named by its GitLab subject; its pipeline id is the run."""
    token = lane.gitlab.mint(gitlab_claims(lane.gitlab.url, iat=lane.now))
    assert lane.apply("/v1/states/gitlab-app", oidc_basic(token)) == [200, 200, 200]
    assert lane.apply(PROD, oidc_basic(token))[0] == 403
    write = next(e for e in lane.events() if e.kind == "state_write")
    assert write.principal == ("oidc:gitlab:project_path:my-group/my-project:ref_type:branch"
                               ":ref:feature-branch-1")
    detail = json.loads(write.detail)["oidc"]
    assert (detail["repository"], detail["repository_id"], detail["run_id"],
            detail["sha"]) == ("my-group/my-project", "20", "574",
                               "714a629c0b401fdce83e847fc9589983fc6f46bc")


@pytest.mark.parametrize("attack", sorted(ATTACK_REASONS))
def test_attacks_are_401_and_write_nothing(lane: OidcLane, attack: str) -> None:
    """alg none, HS256 signed with the public key, another issuer, a wrong
    audience, expired, not yet valid, issued in the future, a tampered
    payload, a stripped signature, missing claims, an unknown kid: 401 on
    LOCK, POST, GET and UNLOCK; the reason in the access log; nothing
    written."""
    token = attack_tokens(lane.issuer, lane.other, lane.now)[attack]
    with captured_logs() as logs:
        statuses = lane.apply(PROD, oidc_basic(token))
        read = lane.request("GET", PROD, headers=oidc_basic(token))
    assert statuses == [401, 401, 401] and read.status == 401
    assert read.header(b"www-authenticate") == b'Basic realm="kilolock"'
    assert {e["denied"] for e in access_events(logs)} == {ATTACK_REASONS[attack]}
    assert lane.written() == []
    assert token not in repr(logs)


# -- the lock grace: long applies finish ---------------------------------------------


def test_a_token_expiring_mid_apply_writes_and_unlocks_its_own_lock(lane: OidcLane) -> None:
    """The token locks while valid; 20 minutes later (it expired after 5)
    the same token writes under its lock and unlocks; meanwhile it may not
    lock anything, or write without naming its lock, or list."""
    token = lane.token()
    headers = oidc_basic(token)
    body = lock_body("apply-lock")
    assert lane.request("LOCK", PROD, body, headers).status == 200
    lane.clock.advance(20 * 60)
    with captured_logs() as logs:
        refused = [lane.request("LOCK", "/v1/states/prod-other", lock_body(), headers),
                   lane.request("POST", PROD, state_body(1), headers),
                   lane.request("POST", f"{PROD}?ID=another-lock", state_body(1), headers),
                   lane.request("GET", "/v1/native/states", headers=headers)]
        written = lane.request("POST", f"{PROD}?ID=apply-lock", state_body(1), headers)
        unlocked = lane.request("UNLOCK", PROD, body, headers)
    assert [reply.status for reply in refused] == [401, 401, 401, 401]
    assert (written.status, unlocked.status) == (200, 200)
    assert [e["denied"] for e in access_events(logs)][:4] == ["oidc_lock_grace_denied"] * 4
    assert lane.written() == ["lock_acquire", "state_write", "lock_release"]
    # The lock is gone: the expired token can do nothing more.
    assert lane.request("POST", f"{PROD}?ID=apply-lock", state_body(2),
                        headers).status == 401


def test_an_expired_token_reads_back_only_the_state_its_lock_holds(lane: OidcLane) -> None:
    """Terraform reads a new state back just before its first write, without
    naming its lock.  An expired token may GET (and HEAD) exactly the state
    its own lock holds, while it holds it: 404 before the first write, the
    bytes after.  Every other read is refused (lock_grace_denied): another
    state it may read, a state another credential locked, the same state on
    the native API, and the same state once the lock is released."""
    headers = oidc_basic(lane.token())
    assert lane.request("POST", "/v1/states/prod-shared", state_body(1),
                        bearer(STATIC_TOKEN)).status == 200
    assert lane.request("LOCK", "/v1/states/prod-theirs", lock_body("static-lock"),
                        bearer(STATIC_TOKEN)).status == 200
    assert lane.request("LOCK", PROD, lock_body("apply-lock"), headers).status == 200
    lane.clock.advance(20 * 60)
    assert lane.request("GET", PROD, headers=headers).status == 404
    assert lane.request("POST", f"{PROD}?ID=apply-lock", state_body(1), headers).status == 200
    read_back = lane.request("GET", PROD, headers=headers)
    assert (read_back.status, read_back.body) == (200, state_body(1))
    assert lane.request("HEAD", PROD, headers=headers).status == 200
    with captured_logs() as logs:
        refused = [lane.request("GET", "/v1/states/prod-shared", headers=headers),
                   lane.request("GET", "/v1/states/prod-theirs", headers=headers),
                   lane.request("GET", "/v1/native/states/prod-network", headers=headers)]
        assert lane.request("UNLOCK", PROD, lock_body("apply-lock"), headers).status == 200
        refused.append(lane.request("GET", PROD, headers=headers))
    assert [reply.status for reply in refused] == [401, 401, 401, 401]
    assert [e.get("denied") for e in access_events(logs)] == [
        "oidc_lock_grace_denied"] * 3 + [None, "oidc_lock_grace_denied"]


def test_an_expired_token_cannot_finish_a_lock_it_did_not_take(lane: OidcLane) -> None:
    """A lock taken by the static token, or by another CI token of the same
    pipeline, cannot be written under or released by an expired token."""
    mine, theirs = lane.token(), lane.token(run_id="other-run")
    assert lane.request("LOCK", PROD, lock_body("static-lock"), bearer(STATIC_TOKEN)).status \
        == 200
    assert lane.request("LOCK", "/v1/states/prod-b", lock_body("their-lock"),
                        oidc_basic(theirs)).status == 200
    lane.clock.advance(20 * 60)
    for path, lock_id in ((PROD, "static-lock"), ("/v1/states/prod-b", "their-lock")):
        assert lane.request("POST", f"{path}?ID={lock_id}", state_body(1),
                            oidc_basic(mine)).status == 401
        assert lane.request("UNLOCK", path, lock_body(lock_id), oidc_basic(mine)).status == 401
    assert lane.written() == ["lock_acquire", "lock_acquire"]


def test_the_grace_ends_and_a_state_unlock_post_is_a_finish_too(lane: OidcLane) -> None:
    """/v1/state-unlock (hosted blocks' unlock_address) is an unlock like
    UNLOCK; past exp + leeway + grace the token is simply expired."""
    token = lane.token()
    headers = oidc_basic(token)
    assert lane.request("LOCK", PROD, lock_body("l1"), headers).status == 200
    lane.clock.advance(300 + 30 + DEFAULT_GRACE - 5)  # the token was issued now
    assert lane.request("POST", "/v1/state-unlock/prod-network", b"l1", headers).status == 200
    assert lane.request("LOCK", PROD, lock_body("l2"), bearer(STATIC_TOKEN)).status == 200
    lane.clock.advance(10)
    with captured_logs() as logs:
        reply = lane.request("POST", f"{PROD}?ID=l2", state_body(1), headers)
    assert reply.status == 401
    assert [e["denied"] for e in access_events(logs)] == ["oidc_expired"]


def test_without_a_grace_an_expired_token_finishes_nothing() -> None:
    """KL_OIDC_LOCK_GRACE=0: the write after expiry is refused (expired)."""
    lane = OidcLane(grace=0)
    headers = oidc_basic(lane.token())
    assert lane.request("LOCK", PROD, lock_body("l1"), headers).status == 200
    lane.clock.advance(20 * 60)
    assert lane.request("POST", f"{PROD}?ID=l1", state_body(1), headers).status == 401
    assert lane.written() == ["lock_acquire"]


# -- the native API: listings show what the grants let a token read ------------------


def test_native_listings_show_only_granted_states(lane: OidcLane) -> None:
    """The state list, the resource search and the event list of a CI
    token hold the states its grants let it read; a search naming another
    state is 403."""
    for path in ("prod-network", "staging-network", "env/prod/app", "env/qa/app"):
        lane.request("POST", f"/v1/states/{path}", state_body(1), bearer(STATIC_TOKEN))
    headers = oidc_basic(lane.token())
    states = lane.request("GET", "/v1/native/states", headers=headers).json()["states"]
    assert [state["name"] for state in states] == ["env/prod/app", "prod-network"]
    found = lane.request("GET", "/v1/native/resources?type=terraform_data",
                         headers=headers).json()["resources"]
    assert sorted(match["state"] for match in found) == ["env/prod/app", "prod-network"]
    events = lane.request("GET", "/v1/native/events", headers=headers).json()["events"]
    assert {event["state"] for event in events} == {"env/prod/app", "prod-network"}
    assert lane.request("GET", "/v1/native/resources?state=staging-network",
                        headers=headers).status == 403
    pull_request = lane.issuer.mint(github_pull_request_claims(lane.issuer.url, iat=lane.now))
    readable = lane.request("GET", "/v1/native/states",
                            headers=oidc_basic(pull_request)).json()["states"]
    assert [state["name"] for state in readable] == ["env/prod/app", "env/qa/app",
                                                     "prod-network"]


def test_rollback_needs_a_write_grant(lane: OidcLane) -> None:
    """The native rollback is a write: a pull request token is 403."""
    for serial in (1, 2):
        lane.request("POST", PROD, state_body(serial), bearer(STATIC_TOKEN))
    body = json.dumps({"version": 1}).encode()
    path = "/v1/native/states/prod-network/-/rollback"
    pull_request = lane.issuer.mint(github_pull_request_claims(lane.issuer.url, iat=lane.now))
    assert lane.request("POST", path, body, oidc_basic(pull_request)).status == 403
    assert lane.request("POST", path, body, oidc_basic(lane.token())).status == 200


# -- static credentials say why too -------------------------------------------------


@pytest.mark.parametrize(("headers", "reason"), [
    ({}, "missing_credentials"),
    ({"Authorization": "Bearer kl_wrong-token"}, "unknown_token"),
    ({"Authorization": "Basic !!!"}, "malformed_credentials"),
    ({"Authorization": "Digest abc"}, "malformed_credentials"),
])
def test_static_refusals_name_their_reason(lane: OidcLane, headers: dict[str, str],
                                           reason: str) -> None:
    """The client sees one 401 for every bad credential; the access log's
    line and its denied field say which."""
    with captured_logs() as logs:
        reply = lane.request("GET", PROD, headers=headers)
    assert reply.status == 401
    assert reply.json()["error"]["message"] == "missing or invalid credentials"
    [event] = access_events(logs)
    assert event["denied"] == reason
    assert event["log_access_line"].endswith(f" denied={reason}")


def test_claims_a_rule_needs_must_be_there(lane: OidcLane) -> None:
    """A verified token without the claims the rules condition on (no
    repository_id) matches nothing: 403 no_rule_matched, each rule saying
    which claim is missing."""
    claims = github_claims(lane.issuer.url, iat=lane.now, repository_id=None)
    with captured_logs() as logs:
        reply = lane.request("GET", PROD, headers=oidc_basic(lane.issuer.mint(claims)))
    assert reply.status == 403
    rules = next(e["oidc_rules"] for e in logs if "oidc_refusal" in e)
    assert "main-writes-prod: repository_id missing" in rules
