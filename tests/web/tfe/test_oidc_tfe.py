"""CI tokens on the TFE lane (static mode, in memory): a job's OIDC token
works as the Bearer token of Terraform's cloud {} block, and its rules'
grants decide there exactly as on the HTTP lane (the scope rule of
L{kilolock.rules.scope} serves every lane): main writes, a pull request reads,
an outputs-only grant reads outputs and nothing else."""

from __future__ import annotations

import json

from tests.support.oidc_issuer import github_pull_request_claims
from tests.support.oidc_support import STATIC_TOKEN, OidcLane, bearer
from tests.support.stub_client import state_body
from tests.support.tfe_support import ORG, version_document, workspace_document

JSONAPI = {"Content-Type": "application/vnd.api+json"}


def tfe(lane: OidcLane, method: str, path: str, token: str,
        document: object = None) -> tuple[int, dict[str, object]]:
    """A TFE-lane request with C{token} as Bearer: its status and JSON."""
    body = None if document is None else json.dumps(document).encode()
    reply = lane.site.request(method, path, body, {**JSONAPI, **bearer(token)})
    return reply.status, json.loads(reply.body) if reply.body else {}


def test_main_creates_locks_and_writes_a_workspace_with_its_ci_token() -> None:
    """The main branch's token (rule main-writes-prod) creates the
    workspace prod-network, locks it, creates a state version with the
    state inline, unlocks; the version is the HTTP lane's state and its
    event names the CI principal."""
    lane = OidcLane()
    token = lane.token()
    status, created = tfe(lane, "POST", f"{ORG}/workspaces", token,
                          workspace_document("prod-network"))
    assert status == 201
    workspace = created["data"]["id"]  # type: ignore[index]
    assert tfe(lane, "POST", f"/api/v2/workspaces/{workspace}/actions/lock", token,
               {})[0] == 200
    raw = state_body(1)
    status, _ = tfe(lane, "POST", f"/api/v2/workspaces/{workspace}/state-versions", token,
                    version_document(raw, 1, inline=True))
    assert status == 201
    assert tfe(lane, "POST", f"/api/v2/workspaces/{workspace}/actions/unlock", token,
               {})[0] == 200
    assert lane.request("GET", "/v1/states/prod-network",
                        headers=bearer(token)).body == raw
    writes = [e for e in lane.events() if e.kind == "state_write"]
    assert [e.principal for e in writes] == [
        "oidc:github:repo:octo-org/octo-repo:environment:prod"]


def test_a_pull_request_reads_the_workspace_and_cannot_lock_it() -> None:
    """prs-read grants reading prod-*: the workspace and its current state
    version are readable with the pull request's token, its lock action is
    a 403 and no lock is taken."""
    lane = OidcLane()
    main = lane.token()
    status, created = tfe(lane, "POST", f"{ORG}/workspaces", main,
                          workspace_document("prod-network"))
    assert status == 201
    workspace = created["data"]["id"]  # type: ignore[index]
    pull_request = lane.issuer.mint(github_pull_request_claims(lane.issuer.url, iat=lane.now))
    assert tfe(lane, "GET", f"{ORG}/workspaces/prod-network", pull_request)[0] == 200
    status, refused = tfe(lane, "POST", f"/api/v2/workspaces/{workspace}/actions/lock",
                          pull_request, {})
    assert status == 403
    assert refused["errors"][0]["status"] == "403"  # type: ignore[index]
    assert [e.kind for e in lane.events() if e.kind.startswith("lock")] == []


def test_a_token_without_a_grant_on_the_workspace_sees_nothing() -> None:
    """A main token may write prod-* and env/{environment}/*; a workspace
    outside its grants is refused (403) before anything is stored."""
    lane = OidcLane()
    status, _ = tfe(lane, "POST", f"{ORG}/workspaces", lane.token(),
                    workspace_document("staging-network"))
    assert status == 403
    assert lane.events() == []


def test_an_outputs_only_grant_reads_outputs_and_nothing_else() -> None:
    """Rule dashboards-read-outputs (repository 99) grants outputs-only on
    prod-*: the workspace's non-sensitive outputs are readable, its state
    version (the whole state) and a sensitive output's value are 403, and
    the workspace list shows only the workspaces it is granted."""
    lane = OidcLane()
    main = lane.token()
    status, created = tfe(lane, "POST", f"{ORG}/workspaces", main,
                          workspace_document("prod-network"))
    workspace = created["data"]["id"]  # type: ignore[index]
    assert tfe(lane, "POST", f"{ORG}/workspaces", STATIC_TOKEN,
               workspace_document("other-app"))[0] == 201
    raw = json.dumps({
        "version": 4, "terraform_version": "1.15.5", "serial": 1,
        "lineage": "7b1d5c1e-0000-4000-8000-000000000001", "resources": [],
        "outputs": {"region": {"value": "eu-west-1", "type": "string"},
                    "password": {"value": "hunter2", "type": "string", "sensitive": True}},
    }).encode()
    assert tfe(lane, "POST", f"/api/v2/workspaces/{workspace}/actions/lock", main, {})[0] == 200
    assert tfe(lane, "POST", f"/api/v2/workspaces/{workspace}/state-versions", main,
               version_document(raw, 1, inline=True))[0] == 201
    assert tfe(lane, "POST", f"/api/v2/workspaces/{workspace}/actions/unlock", main, {})[0] == 200

    reader = lane.token(repository_id="99")
    status, outputs = tfe(lane, "GET",
                          f"/api/v2/workspaces/{workspace}/current-state-version-outputs", reader)
    assert status == 200
    listed = {o["attributes"]["name"]: o for o in outputs["data"]}  # type: ignore[index,union-attr]
    assert listed["region"]["attributes"]["value"] == "eu-west-1"
    assert listed["password"]["attributes"]["value"] is None
    sensitive = listed["password"]["id"]
    assert tfe(lane, "GET", f"/api/v2/state-version-outputs/{sensitive}", reader)[0] == 403
    assert tfe(lane, "GET", f"/api/v2/state-version-outputs/{sensitive}", main)[0] == 200
    assert tfe(lane, "GET", f"/api/v2/workspaces/{workspace}/current-state-version",
               reader)[0] == 403
    status, listing = tfe(lane, "GET", f"{ORG}/workspaces", reader)
    assert status == 200
    assert [w["attributes"]["name"] for w in listing["data"]] == ["prod-network"]  # type: ignore[index,union-attr]
    everything = tfe(lane, "GET", f"{ORG}/workspaces", STATIC_TOKEN)[1]
    assert sorted(w["attributes"]["name"] for w in everything["data"]) == [  # type: ignore[index,union-attr]
        "other-app", "prod-network"]
    other = next(w["id"] for w in everything["data"]  # type: ignore[index,union-attr]
                 if w["attributes"]["name"] == "other-app")
    assert tfe(lane, "GET", f"/api/v2/workspaces/{other}", reader)[0] == 404
