"""CI tokens against a real Kilolock server subprocess (static mode,
C{--oidc-config}) fetching keys from a real issuer on loopback: key
rotation, the issuer going down, forged key ids, the attacks over HTTP,
Bearer tokens; and the settings, checked before the server starts.

The server verifies tokens at the time of its C{--token-clock-file} (a hook
of L{kilolock.testing.hooks}), which the tests move: no test waits for time
to pass."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from twisted.python import usage

from kilolock.server.settings import Settings
from tests.support.fixtures_server import ServerFactory
from tests.support.oidc_issuer import github_claims
from tests.support.oidc_support import (
    ATTACK_REASONS,
    STATIC_TOKEN,
    OidcServer,
    ThreadedIssuer,
    attack_tokens,
    bearer,
    oidc_basic,
    start_oidc_server,
    static_policy_document,
)
from tests.support.stub_client import lock_body, state_body

#: The server tests run on the memory store (the PostgreSQL store's part,
#: the token digest of a lock, is in the store contract and the Terraform runs).
memory_server = pytest.mark.parametrize("server_store", ["memory"], indirect=True)


@pytest.fixture
def issuer() -> Iterator[ThreadedIssuer]:
    served = ThreadedIssuer()
    yield served
    served.stop()


@pytest.fixture
def oidc(kilolock_server_factory: ServerFactory, issuer: ThreadedIssuer,
         tmp_path: Path) -> OidcServer:
    return start_oidc_server(kilolock_server_factory, tmp_path / "oidc", issuer)


def read(oidc: OidcServer, token: str, name: str = "prod-network") -> int:
    return oidc.request("GET", f"/v1/states/{name}", headers=oidc_basic(token)).status


@memory_server
def test_a_rotated_key_is_fetched_at_a_bounded_rate(oidc: OidcServer) -> None:
    """The first token fetches discovery and JWKS once.  A token signed with
    a key published since (a new kid) is refused while the last fetch is
    under a minute old, and accepted once a minute has passed: one more
    fetch, not one per request."""
    issuer = oidc.issuer.issuer
    assert read(oidc, oidc.token()) == 404
    assert issuer.requests == {"discovery": 1, "jwks": 1}
    new_kid = issuer.rotate("EC")
    rotated = issuer.mint(github_claims(issuer.url, iat=oidc.clock.now()), kid=new_kid)
    assert read(oidc, rotated) == 401
    assert issuer.requests["jwks"] == 1
    oidc.clock.advance(61)
    rotated = issuer.mint(github_claims(issuer.url, iat=oidc.clock.now()), kid=new_kid)
    assert read(oidc, rotated) == 404
    assert read(oidc, oidc.token()) == 404
    assert issuer.requests == {"discovery": 2, "jwks": 2}


@memory_server
def test_a_flood_of_forged_kids_costs_one_fetch(oidc: OidcServer) -> None:
    """Fifty tokens naming key ids the issuer never published: all 401,
    and at most one refetch of the issuer's keys."""
    issuer = oidc.issuer.issuer
    assert read(oidc, oidc.token()) == 404
    oidc.clock.advance(61)
    claims = github_claims(issuer.url, iat=oidc.clock.now())
    forged_key = issuer.add_key("RSA", publish=False)
    statuses = {read(oidc, issuer.mint(claims, kid=forged_key,
                                       headers={"kid": f"forged-{uuid.uuid4()}"}))
                for _ in range(50)}
    assert statuses == {401}
    assert issuer.requests["jwks"] == 2


@memory_server
def test_an_issuer_down_keeps_serving_the_cached_keys(oidc: OidcServer) -> None:
    """After the issuer stops answering, and past the keys' freshness (an
    hour), tokens signed with a known key still verify; a token with a kid
    never seen is refused (unknown_key); the log says the keys are kept."""
    issuer = oidc.issuer.issuer
    assert read(oidc, oidc.token()) == 404
    oidc.issuer.stop()
    oidc.clock.advance(2 * 3600)
    assert read(oidc, oidc.token()) == 404
    unknown = issuer.mint(github_claims(issuer.url, iat=oidc.clock.now()),
                          kid=issuer.add_key("RSA", publish=False))
    assert read(oidc, unknown) == 401
    log = oidc.server.log_text()
    assert "could not be fetched" in log and "keeping the previous keys" in log
    assert "denied=oidc_unknown_key" in log


@memory_server
def test_an_issuer_down_before_any_fetch_refuses_every_token(
        kilolock_server_factory: ServerFactory, issuer: ThreadedIssuer,
        tmp_path: Path) -> None:
    """Never any keys: keys_unavailable (401) for every token."""
    oidc = start_oidc_server(kilolock_server_factory, tmp_path / "down", issuer)
    issuer.issuer.available = False
    assert read(oidc, oidc.token()) == 401
    assert "denied=oidc_keys_unavailable" in oidc.server.log_text()


@memory_server
def test_attacks_over_http_are_401_and_write_nothing(oidc: OidcServer) -> None:
    """Every attack token, on LOCK, POST and GET: 401 with the reason in
    the access log; the state does not exist afterwards and the tenant's
    audit trail is empty."""
    other = ThreadedIssuer()
    try:
        tokens = attack_tokens(oidc.issuer.issuer, other.issuer, oidc.clock.now())
    finally:
        other.stop()
    for name, token in tokens.items():
        headers = oidc_basic(token)
        statuses = [oidc.request("LOCK", "/v1/states/prod-network", lock_body("x"),
                                 headers).status,
                    oidc.request("POST", "/v1/states/prod-network", state_body(1),
                                 headers).status,
                    oidc.request("GET", "/v1/states/prod-network", headers=headers).status]
        assert statuses == [401, 401, 401], name
    log = oidc.server.log_text()
    for reason in set(ATTACK_REASONS.values()):
        assert f"denied={reason}" in log, reason
    assert oidc.stored("prod-network").status == 404
    events = oidc.request("GET", "/v1/native/events", headers=bearer(STATIC_TOKEN)).json()
    assert events["events"] == []
    assert all(token not in log for token in tokens.values())


@memory_server
def test_opentofu_bearer_tokens_over_http(oidc: OidcServer) -> None:
    """OpenTofu's headers = { Authorization = "Bearer <jwt>" }: LOCK, POST
    ?ID=, UNLOCK, GET."""
    headers = bearer(oidc.token())
    body = lock_body("tofu-lock")
    assert oidc.request("LOCK", "/v1/states/prod-network", body, headers).status == 200
    assert oidc.request("POST", "/v1/states/prod-network?ID=tofu-lock", state_body(1),
                        headers).status == 200
    assert oidc.request("UNLOCK", "/v1/states/prod-network", body, headers).status == 200
    assert oidc.request("GET", "/v1/states/prod-network", headers=headers).body == \
        state_body(1)
    assert oidc.request("GET", "/v1/states/prod-network",
                        headers=bearer(STATIC_TOKEN)).status == 200


# -- settings --------------------------------------------------------------------------


def settings(tmp_path: Path, document: Any = None, **environ: str) -> Settings:
    if document is not None:
        path = tmp_path / "policy.json"
        path.write_text(json.dumps(document))
        environ.setdefault("KL_OIDC_CONFIG", str(path))
    return Settings.from_sources({"store": "memory"}, {"KL_AUTH_MODE": "static", **environ})


def test_a_static_server_may_take_ci_tokens_only(tmp_path: Path) -> None:
    """KL_AUTH_MODE=static with --oidc-config needs no KL_AUTH_TOKEN; with
    neither it does not start."""
    accepted = settings(tmp_path, static_policy_document("https://token.actions."
                                                         "githubusercontent.com"))
    assert accepted.auth_token == "" and accepted.oidc_lock_grace == 3600
    with pytest.raises(usage.UsageError, match="needs KL_AUTH_TOKEN, --oidc-config"):
        settings(tmp_path)


@pytest.mark.parametrize(("document", "environ", "message"), [
    ({"issuers": [], "rules": [{"name": "x", "issuer": "github", "claims": {},
                                "grant": {"access": "write", "states": ["*"]}}]}, {},
     "without any claim condition"),
    ("not json", {}, "does not parse"),
    (None, {"KL_OIDC_CONFIG": "/nonexistent/policy.toml"}, "cannot read"),
    ({"version": 1}, {"KL_OIDC_LOCK_GRACE": "99999"}, "0 to 21600 seconds"),
    ({"version": 1}, {"KL_OIDC_LOCK_GRACE": "soon"}, "must be a number"),
    ({"version": 1}, {"KL_AUTH_MODE": "database", "KL_CONTROL_TOKEN": "x" * 20},
     "is for KL_AUTH_MODE=static"),
    ({"version": 1, "issuers": [{"name": "github", "url": "https://t.example",
                                 "audience": "kl"}],
      "rules": [{"name": "r", "issuer": "github", "claims": {"repository_id": "74"},
                 "grant": {"access": "write", "states": ["*"], "workspace": "infra"}}]}, {},
     "for the database auth mode"),
])
def test_bad_oidc_settings_stop_the_server(tmp_path: Path, document: Any,
                                           environ: dict[str, str], message: str) -> None:
    """A policy file that breaks a rule, does not parse or cannot be read, a
    grace out of range, --oidc-config outside the static mode, a grant on
    workspaces in the static mode: a usage error naming the problem."""
    if document == "not json":
        (tmp_path / "policy.json").write_text("{")
        environ = {"KL_OIDC_CONFIG": str(tmp_path / "policy.json"), **environ}
        document = None
    with pytest.raises(usage.UsageError, match=message):
        settings(tmp_path, document, KL_AUTH_TOKEN=STATIC_TOKEN, **environ)
