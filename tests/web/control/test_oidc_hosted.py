"""CI tokens in the database auth mode, in memory: each tenant's policy set
through the control API, the tenant found from the workspace the state's
path names, grants naming workspaces and environments by name, and the
control API's validation of policy documents."""

from __future__ import annotations

import json
from typing import Any

import pytest
from attrs import frozen

from tests.support.hosted_support import CONTROL_HEADERS
from tests.support.oidc_issuer import github_claims, github_pull_request_claims
from tests.support.oidc_support import (
    OidcLane,
    access_events,
    basic,
    captured_logs,
    hosted_policy_document,
    oidc_basic,
)
from tests.support.stub_client import lock_body, state_body


@frozen
class Place:
    workspace: str
    environment: str

    def state(self, name: str) -> str:
        return f"/v1/states/{self.workspace}/{self.environment}/{name}"


class Acme:
    """Tenant acme: workspace infra (environments default, production, prod)
    and workspace apps (default, prod), with the policy of
    L{hosted_policy_document}."""

    def __init__(self, lane: OidcLane) -> None:
        control = lane.control
        tenant = control.ok("POST", "/tenants", {"slug": "acme", "name": "Acme"}, 201)
        self.id = tenant["id"]
        [default] = tenant["workspaces"]
        self.default = Place(default["id"], default["environments"][0]["id"])
        self.places: dict[str, Place] = {}
        for workspace in ("infra", "apps"):
            created = control.ok("POST", "/tenants/acme/workspaces", {"name": workspace}, 201)
            names = ["production", "prod"] if workspace == "infra" else ["prod"]
            for name in names:
                environment = control.ok(
                    "POST", f"/tenants/acme/workspaces/{workspace}/environments",
                    {"name": name}, 201)
                self.places[f"{workspace}/{name}"] = Place(created["id"], environment["id"])
        self.policy = control.ok("PUT", "/tenants/acme/oidc-policy",
                                 hosted_policy_document(lane.issuer))


@pytest.fixture
def lane() -> OidcLane:
    return OidcLane(hosted=True)


@pytest.fixture
def acme(lane: OidcLane) -> Acme:
    return Acme(lane)


def test_grants_by_workspace_and_environment_names(lane: OidcLane, acme: Acme) -> None:
    """main writes every state of infra/production (named in the rule) and
    app-* in each environment named like its GitHub environment (prod, in
    both workspaces); nothing in infra's default environment."""
    headers = oidc_basic(lane.token())
    production, infra_prod, apps_prod = (acme.places[name] for name in (
        "infra/production", "infra/prod", "apps/prod"))
    assert lane.apply(production.state("network"), headers) == [200, 200, 200]
    assert lane.apply(infra_prod.state("app-web"), headers) == [200, 200, 200]
    assert lane.apply(apps_prod.state("app-api"), headers) == [200, 200, 200]
    with captured_logs() as logs:
        assert lane.apply(infra_prod.state("network"), headers) == [403, 403, 403]
        assert lane.apply(acme.default.state("app-web"), headers) == [403, 403, 403]
    assert {e["denied"] for e in access_events(logs)} == {"oidc_state_not_granted"}
    writes = [e for e in lane.events(acme.id) if e.kind == "state_write"]
    assert len(writes) == 3
    assert json.loads(writes[0].detail)["oidc"]["repository_id"] == "74"


def test_a_pull_request_reads_app_states_anywhere(lane: OidcLane, acme: Acme) -> None:
    apps_prod = acme.places["apps/prod"]
    lane.apply(apps_prod.state("app-api"), oidc_basic(lane.token()))
    token = lane.issuer.mint(github_pull_request_claims(lane.issuer.url, iat=lane.now))
    assert lane.request("GET", apps_prod.state("app-api"),
                        headers=oidc_basic(token)).body == state_body(1)
    assert lane.request("LOCK", apps_prod.state("app-api"), lock_body(),
                        oidc_basic(token)).status == 403


def test_the_tenant_comes_from_the_workspace_in_the_path(lane: OidcLane, acme: Acme) -> None:
    """Tenant beta trusts another issuer: beta's valid tokens are refused on
    acme's states and acme's on beta's (401 wrong_issuer, before any key is
    looked at); nothing is written in either tenant."""
    beta = lane.control.ok("POST", "/tenants", {"slug": "beta", "name": "Beta"}, 201)
    beta_place = Place(beta["workspaces"][0]["id"],
                       beta["workspaces"][0]["environments"][0]["id"])
    document = hosted_policy_document(lane.other)
    document["rules"] = [{"name": "all-of-74", "issuer": "github",
                          "claims": {"repository_id": "74"},
                          "grant": {"access": "write", "states": ["*"]}}]
    lane.control.ok("PUT", "/tenants/beta/oidc-policy", document)
    beta_token = lane.other.mint(github_claims(lane.other.url, iat=lane.now))
    acme_token = lane.token()
    with captured_logs() as logs:
        assert lane.apply(acme.places["infra/production"].state("network"),
                          oidc_basic(beta_token)) == [401, 401, 401]
        assert lane.apply(beta_place.state("network"), oidc_basic(acme_token)) == [401] * 3
    assert {e["denied"] for e in access_events(logs)} == {"oidc_wrong_issuer"}
    assert "state_write" not in lane.written(acme.id) + lane.written(beta["id"])
    assert lane.apply(beta_place.state("network"), oidc_basic(beta_token)) == [200] * 3


@pytest.mark.parametrize(("case", "status", "reason"), [
    ("one segment, username oidc", 401, "oidc_no_workspace"),
    ("one segment, username the workspace", 403, "oidc_state_not_granted"),
    ("username another workspace", 403, "wrong_basic_username"),
    ("unknown workspace", 401, "oidc_unknown_workspace"),
    ("tenant without a policy", 401, "oidc_wrong_issuer"),
])
def test_where_a_token_cannot_log_in(lane: OidcLane, acme: Acme, case: str, status: int,
                                     reason: str) -> None:
    token = lane.token()
    production = acme.places["infra/production"]
    path, headers = {
        "one segment, username oidc": ("/v1/states/network", oidc_basic(token)),
        "one segment, username the workspace": ("/v1/states/network",
                                                basic(production.workspace, token)),
        "username another workspace": (production.state("network"),
                                       basic(acme.default.workspace, token)),
        "unknown workspace": ("/v1/states/ws_000000000000/env_000000000000/network",
                              oidc_basic(token)),
        "tenant without a policy": (_beta_without_policy(lane).state("network"),
                                    oidc_basic(token)),
    }[case]
    with captured_logs() as logs:
        statuses = lane.apply(path, headers)
    assert statuses == [status] * 3
    assert {e["denied"] for e in access_events(logs)} == {reason}
    assert "state_write" not in lane.written(acme.id)


def _beta_without_policy(lane: OidcLane) -> Place:
    beta = lane.control.ok("POST", "/tenants", {"slug": "beta", "name": "Beta"}, 201)
    return Place(beta["workspaces"][0]["id"], beta["workspaces"][0]["environments"][0]["id"])


def test_native_listing_with_the_workspace_as_username(lane: OidcLane, acme: Acme) -> None:
    """A listing names no state: the Basic username names the workspace
    (so the tenant); the list holds what the grants let the token read."""
    token = lane.token()
    production = acme.places["infra/production"]
    lane.apply(production.state("network"), oidc_basic(token))
    lane.apply(acme.places["apps/prod"].state("app-api"), oidc_basic(token))
    listed = lane.request("GET", "/v1/native/states",
                          headers=basic(production.workspace, token)).json()["states"]
    assert sorted(state["segments"][2] for state in listed) == ["app-api", "network"]
    assert lane.request("GET", "/v1/native/states", headers=oidc_basic(token)).status == 401


def test_the_grace_in_hosted_mode_through_state_unlock(lane: OidcLane, acme: Acme) -> None:
    """A hosted block unlocks by POST to /v1/state-unlock/...: an expired
    token releases its own lock there."""
    production = acme.places["infra/production"]
    headers = oidc_basic(lane.token())
    assert lane.request("LOCK", production.state("network"), lock_body("l1"),
                        headers).status == 200
    lane.clock.advance(20 * 60)
    assert lane.request("POST", production.state("network") + "?ID=l1", state_body(1),
                        headers).status == 200
    unlock = production.state("network").replace("/v1/states/", "/v1/state-unlock/")
    assert lane.request("POST", unlock, lock_body("l1"), headers).status == 200
    assert lane.request("GET", production.state("network"), headers=headers).status == 401


# -- static tokens in hosted mode say why they were refused ----------------------------


def test_database_token_refusals_name_their_reason(lane: OidcLane, acme: Acme) -> None:
    """revoked, tenant deleted, wrong Basic username, read-only, wrong
    environment: each refusal's reason is in the access log."""
    control = lane.control
    default = acme.default
    writer = control.ok("POST", "/tenants/acme/tokens",
                        {"name": "writer", "environment": "default"}, 201)["token_secret"]
    reader = control.ok("POST", "/tenants/acme/tokens",
                        {"name": "reader", "environment": "default", "scope": "read"},
                        201)["token_secret"]
    gone = control.ok("POST", "/tenants/acme/tokens",
                      {"name": "gone", "environment": "default"}, 201)
    control.ok("DELETE", f"/tenants/acme/tokens/{gone['id']}")
    production = acme.places["infra/production"]
    cases: list[tuple[str, dict[str, str], str]] = [
        (default.state("s"), basic(default.workspace, gone["token_secret"]), "revoked_token"),
        (default.state("s"), basic(default.workspace, "kl_" + "x" * 43), "unknown_token"),
        (default.state("s"), basic(production.workspace, writer), "wrong_basic_username"),
        (default.state("s"), basic(default.workspace, reader), "read_only"),
        (production.state("s"), basic(default.workspace, writer), "wrong_environment"),
    ]
    with captured_logs() as logs:
        for path, headers, _ in cases:
            lane.request("LOCK", path, lock_body(), headers)
    assert [e["denied"] for e in access_events(logs)] == [reason for _, _, reason in cases]
    control.ok("DELETE", "/tenants/acme?states=delete")
    with captured_logs() as logs:
        assert lane.request("GET", default.state("s"),
                            headers=basic(default.workspace, writer)).status == 401
    assert [e["denied"] for e in access_events(logs)] == ["tenant_deleted"]


# -- the control API -------------------------------------------------------------------


def test_the_policy_round_trip_and_its_events(lane: OidcLane, acme: Acme) -> None:
    """PUT answers the canonical document (defaults filled in), GET the
    same, DELETE removes it (then 404); the chain records set and delete
    with the issuers, rule names and the document's SHA-256."""
    stored = lane.control.ok("GET", "/tenants/acme/oidc-policy")
    assert stored == acme.policy and stored["tenant"] == acme.id
    issuer = stored["policy"]["issuers"][0]
    assert (issuer["leeway_seconds"], issuer["max_token_lifetime_seconds"]) == (30, 86400)
    assert [rule["name"] for rule in stored["policy"]["rules"]] == [
        "main-writes-production", "environments-write-their-own", "prs-read"]
    events = lane.control.ok("GET", "/tenants/acme/events?kind=oidc_policy_set")["events"]
    [event] = events
    assert event["detail"]["issuers"] == [{"name": "github", "url": lane.issuer.url}]
    assert event["detail"]["rules"] == ["main-writes-production",
                                        "environments-write-their-own", "prs-read"]
    assert len(event["detail"]["sha256"]) == 64
    lane.control.ok("DELETE", "/tenants/acme/oidc-policy")
    missing = lane.control.call("GET", "/tenants/acme/oidc-policy")
    assert (missing.status, missing.error_code) == (404, "oidc_policy_not_found")
    assert lane.control.call("DELETE", "/tenants/acme/oidc-policy").status == 404
    assert lane.apply(acme.places["infra/production"].state("n"),
                      oidc_basic(lane.token())) == [401] * 3
    kinds = [e["kind"] for e in lane.control.ok("GET", "/tenants/acme/events")["events"]]
    assert kinds[-1] == "oidc_policy_delete"
    assert lane.control.ok("GET", "/tenants/acme/events/verify")["ok"] is True


def _rule(**grant: Any) -> dict[str, Any]:
    return {"name": "r", "issuer": "github", "claims": {"repository_id": "74"},
            "grant": {"access": "write", "states": ["*"], **grant}}


@pytest.mark.parametrize(("mutate", "problem"), [
    (lambda d: d["rules"][0].update(claims={}), "without any claim condition"),
    (lambda d: d["rules"][0].update(claims={"ref": "refs/heads/main"}),
     "needs a condition on who the pipeline is"),
    (lambda d: d["issuers"][0].update(jwks_file="/etc/keys.json"), "jwks_file"),
    (lambda d: d["issuers"][0].update(ca_file="/etc/ssl/private/key.pem"), "ca_file"),
    (lambda d: d["issuers"][0].update(audience="https://github.com/octo-org"), "audience"),
    (lambda d: d["issuers"][0].pop("audience"), "audience"),
    (lambda d: d["issuers"][0].update(url="http://issuer.example.com"), "https"),
    (lambda d: d["rules"][0]["grant"].update(states=["{enviroment}/*"]), "enviroment"),
    (lambda d: d["rules"][0]["grant"].update(workspace="infra-*"), "exact"),
    (lambda d: d.update(version=10 ** 400), "version"),
    (lambda d: d.update(extra=True), "unknown key"),
])
def test_an_invalid_policy_is_400_listing_the_problem(lane: OidcLane, acme: Acme,
                                                      mutate: Any, problem: str) -> None:
    """Every problem named with its place; nothing stored (the old policy stays)."""
    document = hosted_policy_document(lane.issuer)
    document["rules"] = [_rule()]
    mutate(document)
    reply = lane.control.call("PUT", "/tenants/acme/oidc-policy", document)
    assert (reply.status, reply.error_code) == (400, "invalid_oidc_policy")
    assert any(problem in each for each in reply.json()["error"]["problems"])
    assert lane.control.ok("GET", "/tenants/acme/oidc-policy") == acme.policy


@pytest.mark.parametrize(("body", "code"), [
    (b"", "invalid_field"), (b"not json", "invalid_field"), (b"[1, 2]", "invalid_field"),
    (b'"a string"', "invalid_field"), (b"[" * 30000 + b"]" * 30000, "too_deep"),
    (b'{"version": 1, "issuers": ' + b"[" * 5000 + b"]" * 5000 + b"}", "too_deep"),
    (b"\xff\xfe", "invalid_unicode"), (b"1e999999", "not_finite"),
], ids=["empty", "not-json", "array", "string", "deep-array", "deep-member", "not-utf8",
        "huge-number"])
def test_a_body_that_is_no_policy_is_400(lane: OidcLane, acme: Acme, body: bytes,
                                         code: str) -> None:
    """Not a JSON object: invalid_field; a body breaking a text rule: the
    rule's code (kilolock.core.text).  Nothing stored."""
    reply = lane.control_site.request("PUT", "/v1/api/tenants/acme/oidc-policy", body,
                                      {**CONTROL_HEADERS, "Content-Type": "application/json"})
    assert (reply.status, reply.error_code) == (400, code)
    assert lane.control.ok("GET", "/tenants/acme/oidc-policy") == acme.policy


@pytest.mark.parametrize(("name", "code"), [("bad\u0000name", "nul_character"),
                                            ("\ud800", "invalid_unicode")])
def test_a_policy_with_text_a_database_cannot_hold_is_400(lane: OidcLane, acme: Acme,
                                                          name: str, code: str) -> None:
    """A NUL or an unpaired surrogate in a policy is refused by the text rule
    it breaks, naming the member; nothing stored (the old policy stays)."""
    document = hosted_policy_document(lane.issuer)
    document["rules"] = [_rule()]
    document["rules"][0]["name"] = name
    reply = lane.control.call("PUT", "/tenants/acme/oidc-policy", document)
    assert (reply.status, reply.error_code) == (400, code)
    assert reply.json()["error"]["field"] == "rules"
    assert lane.control.ok("GET", "/tenants/acme/oidc-policy") == acme.policy


def test_the_policy_of_an_unknown_tenant_and_without_the_control_token(lane: OidcLane) -> None:
    assert lane.control.call("GET", "/tenants/nobody/oidc-policy").status == 404
    assert lane.control.call("PUT", "/tenants/nobody/oidc-policy", {}).status == 404
    refused = lane.control.call("GET", "/tenants/nobody/oidc-policy", headers={})
    assert refused.status == 401
