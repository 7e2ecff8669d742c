"""Verifying CI tokens and deciding on them: the documented GitHub Actions
and GitLab CI claim sets, the rules of docs/ci-identity.md, and the attacks
a verifier must refuse.  All time is a task.Clock; the issuer is served in
memory (StubTreq)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any

import jwt
import pytest

from kilolock.auth.oidc.decision import Accepted, Refusal
from kilolock.auth.oidc.refusal import Reason
from kilolock.auth.oidc.validation import validate_policy
from kilolock.core.model import Access
from tests.support.oidc_issuer import (
    AUDIENCE,
    GITHUB_IAT,
    GITLAB_IAT,
    Harness,
    LocalIssuer,
    github_claims,
    github_pull_request_claims,
    unsigned_token,
)


def accepted(decision: object) -> Accepted:
    assert isinstance(decision, Accepted), decision
    return decision


def refused(decision: object, reason: Reason) -> Refusal:
    assert isinstance(decision, Refusal), decision
    assert decision.reason is reason, decision
    return decision


@pytest.fixture
def harness() -> Harness:
    return Harness()


# -- accepted tokens --------------------------------------------------------------

def test_github_main_token_writes_prod(harness: Harness) -> None:
    """GitHub's documented token (repository 74, main) matches the rule
    "main writes prod": write on prod/*, not on staging."""
    decision = accepted(harness.decide(harness.issuer.github()))
    assert [grant.rule for grant in decision.grants] == [
        "main-writes-prod", "environments-write-their-own"]
    assert decision.allows("prod/network", Access.WRITE)
    assert decision.allows("prod/network", Access.READ)
    assert not decision.allows("staging/network", Access.READ)
    assert decision.principal == "oidc:github:repo:octo-org/octo-repo:environment:prod"


def test_the_audit_detail_names_repository_ref_run_and_commit(harness: Harness) -> None:
    """An OIDC principal's audit detail: issuer, sub, repository (path and
    id), ref, run id and attempt, commit SHA, workflow, actor, event."""
    decision = accepted(harness.decide(harness.issuer.github(sha="a" * 40)))
    assert decision.audit == {
        "issuer": harness.issuer.url, "sub": "repo:octo-org/octo-repo:environment:prod",
        "repository": "octo-org/octo-repo", "repository_id": "74", "ref": "refs/heads/main",
        "ref_type": "branch", "environment": "prod", "run_id": "example-run-id",
        "run_attempt": "2", "sha": "a" * 40,
        "workflow_ref": "octo-org/octo-automation/.github/workflows/oidc.yml@refs/heads/main",
        "actor": "octocat", "event": "workflow_dispatch"}


def test_a_template_renders_the_environment_claim(harness: Harness) -> None:
    """C{env/{environment}/*} becomes env/prod/* for the prod job: it may
    write its own environment's states and no other's."""
    decision = accepted(harness.decide(harness.issuer.github()))
    assert decision.allows("env/prod/app", Access.WRITE)
    assert not decision.allows("env/staging/app", Access.WRITE)


def test_an_unsafe_claim_value_never_reaches_a_grant(harness: Harness) -> None:
    """An environment named C{../prod} or C{*} does not render: the rule
    using it does not match (the other rules still do)."""
    for environment in ("..", "*", "a/b", "prod/../x"):
        decision = accepted(harness.decide(harness.issuer.github(environment=environment)))
        assert [grant.rule for grant in decision.grants] == ["main-writes-prod"]


def test_an_es256_token_is_accepted(harness: Harness) -> None:
    """The issuer's EC P-256 key verifies ES256 tokens."""
    token = harness.issuer.mint(github_claims(harness.issuer.url), kid=harness.issuer.ec_kid)
    assert jwt.get_unverified_header(token)["alg"] == "ES256"
    accepted(harness.decide(token))


def test_gitlab_token_on_a_protected_branch_writes() -> None:
    """GitLab's documented payload: project 20 on a protected branch writes
    its environment's state; the same on an unprotected branch matches no
    rule."""
    harness = Harness()
    harness.clock.advance(GITLAB_IAT - GITHUB_IAT)
    url = harness.issuer.url
    policy = validate_policy({
        "issuers": [{"name": "gitlab", "url": url, "audience": AUDIENCE}],
        "rules": [{"name": "protected-writes", "issuer": "gitlab",
                   "claims": {"project_id": "20", "ref_protected": "true",
                              "ref_type": "branch"},
                   "grant": {"access": "write", "states": ["{environment}/*"]}}]})
    decision = accepted(harness.decide(harness.issuer.gitlab(ref_protected="true"), policy))
    assert decision.allows("test-environment2/app", Access.WRITE)
    assert decision.audit["repository"] == "my-group/my-project"
    assert decision.audit["run_id"] == "574"
    assert decision.audit["sha"] == "714a629c0b401fdce83e847fc9589983fc6f46bc"
    refusal = refused(harness.decide(harness.issuer.gitlab(), policy), Reason.NO_RULE_MATCHED)
    assert refusal.rules_evaluated == (("protected-writes", "ref_protected did not match"),)
    assert refusal.status == 403


# -- rules ------------------------------------------------------------------------

def test_another_branch_matches_no_rule(harness: Harness) -> None:
    """A token from refs/heads/feature of the same repository is valid but
    matches no rule: refused with the rules evaluated and why, by claim."""
    refusal = refused(harness.decide(harness.issuer.github(ref="refs/heads/feature")),
                      Reason.NO_RULE_MATCHED)
    assert refusal.rules_evaluated == (
        ("main-writes-prod", "ref did not match"),
        ("prs-read", "event_name did not match"),
        ("environments-write-their-own", "ref did not match"))
    assert refusal.status == 403
    assert refusal.audit["ref"] == "refs/heads/feature"
    assert "oidc_rules" in refusal.log_fields()


def test_another_repository_matches_no_rule(harness: Harness) -> None:
    """The same issuer, another repository (id 75): nothing matches."""
    refused(harness.decide(harness.issuer.github(repository_id="75")), Reason.NO_RULE_MATCHED)


def test_pull_request_token_is_read_only(harness: Harness) -> None:
    """A pull_request token of repository 74 reads prod and env states but
    may not write: a write is refused as read_only (403)."""
    token = harness.issuer.mint(github_pull_request_claims(harness.issuer.url))
    decision = accepted(harness.decide(token))
    assert [grant.rule for grant in decision.grants] == ["prs-read"]
    assert decision.allows("prod/network", Access.READ)
    assert decision.allows("prod/network", Access.OUTPUTS_ONLY)
    refusal = decision.check("prod/network", Access.WRITE)
    assert refusal is not None and refusal.reason is Reason.READ_ONLY
    assert refusal.status == 403
    other = decision.check("private/secrets", Access.READ)
    assert other is not None and other.reason is Reason.STATE_NOT_GRANTED


def test_a_hosted_grant_names_workspace_and_environment(harness: Harness) -> None:
    """A grant with workspace and environment covers only that pair."""
    document: dict[str, Any] = {
        "issuers": [{"name": "github", "url": harness.issuer.url, "audience": AUDIENCE}],
        "rules": [{"name": "hosted", "issuer": "github",
                   "claims": {"repository_owner_id": "65"},
                   "grant": {"access": "write", "states": ["*"], "workspace": "ws_platform",
                             "environment": "{environment}"}}]}
    decision = accepted(harness.decide(harness.issuer.github(), validate_policy(document)))
    assert decision.allows("network", Access.WRITE, workspace="ws_platform", environment="prod")
    assert not decision.allows("network", Access.WRITE, workspace="ws_platform",
                               environment="staging")
    assert not decision.allows("network", Access.WRITE)


def test_another_tenants_issuer_is_not_trusted() -> None:
    """Tenant A trusts issuer A only: a perfectly valid token of tenant B's
    issuer is refused as wrong_issuer, before any key of B is fetched."""
    harness = Harness()
    other = LocalIssuer(url="http://127.0.0.1:8901")
    token = other.mint(github_claims(other.url))
    refusal = refused(harness.decide(token), Reason.WRONG_ISSUER)
    assert refusal.status == 401 and refusal.issuer is None
    assert other.requests == {"discovery": 0, "jwks": 0}


# -- attacks ----------------------------------------------------------------------

def test_alg_none_is_refused(harness: Harness) -> None:
    """An unsigned token (C{alg: none}) is refused before any key lookup."""
    token = unsigned_token({"alg": "none", "typ": "JWT"}, github_claims(harness.issuer.url))
    refused(harness.decide(token), Reason.ALGORITHM_NOT_ALLOWED)
    assert harness.issuer.requests == {"discovery": 0, "jwks": 0}


@pytest.mark.parametrize("algorithm", ["HS256", "HS512"])
def test_hmac_signed_with_the_public_key_is_refused(harness: Harness, algorithm: str) -> None:
    """The key-confusion attack: HS256 "signed" with the issuer's public key
    PEM (which anyone can fetch) as the HMAC secret is refused."""
    pem = harness.issuer.public_pem(harness.issuer.rsa_kid)
    header = {"alg": algorithm, "typ": "JWT", "kid": harness.issuer.rsa_kid}
    signing_input = ".".join(unsigned_token(header, github_claims(harness.issuer.url))
                             .split(".")[:2]).encode()
    digest = hashlib.sha256 if algorithm == "HS256" else hashlib.sha512
    signature = hmac.new(pem, signing_input, digest).digest()
    token = signing_input.decode() + "." + base64.urlsafe_b64encode(signature).rstrip(
        b"=").decode()
    refused(harness.decide(token), Reason.ALGORITHM_NOT_ALLOWED)


def test_an_rs256_header_on_an_ec_key_is_refused(harness: Harness) -> None:
    """A token claiming RS256 with the kid of the EC key finds no key."""
    token = harness.issuer.mint(github_claims(harness.issuer.url), kid=harness.issuer.rsa_kid,
                                headers={"kid": harness.issuer.ec_kid})
    refused(harness.decide(token), Reason.UNKNOWN_KEY)


def test_wrong_issuer_claim(harness: Harness) -> None:
    """iss differing from the trusted URL in any way (a trailing slash) is
    not trusted."""
    token = harness.issuer.github(iss=harness.issuer.url + "/")
    refused(harness.decide(token), Reason.WRONG_ISSUER)


@pytest.mark.parametrize("audience", ["https://github.com/octo-org", "https://other.example",
                                      ["https://other.example"]])
def test_wrong_audience(harness: Harness, audience: Any) -> None:
    """A token for another audience (GitHub's default, another service) is
    refused as wrong_audience (401)."""
    refusal = refused(harness.decide(harness.issuer.github(aud=audience)), Reason.WRONG_AUDIENCE)
    assert refusal.status == 401


def test_an_audience_list_containing_ours_is_accepted(harness: Harness) -> None:
    """RFC 7519: aud may be a list; ours must be in it."""
    accepted(harness.decide(harness.issuer.github(aud=["https://other.example", AUDIENCE])))


def test_expired(harness: Harness) -> None:
    """Past exp plus the 30 s leeway: expired.  Within the leeway: fine."""
    harness.clock.advance(300 - 10 + 29)
    accepted(harness.decide(harness.issuer.github()))
    harness.clock.advance(2)
    refusal = refused(harness.decide(harness.issuer.github()), Reason.EXPIRED)
    assert refusal.status == 401


def test_not_yet_valid(harness: Harness) -> None:
    """nbf more than the leeway ahead: not yet valid."""
    now = int(harness.clock.seconds())
    token = harness.issuer.github(nbf=now + 31, iat=now - 1, exp=now + 600)
    refused(harness.decide(token), Reason.NOT_YET_VALID)
    accepted(harness.decide(harness.issuer.github(nbf=now + 29, iat=now - 1, exp=now + 600)))


def test_issued_in_the_future(harness: Harness) -> None:
    """iat far ahead of the clock is refused, even with exp after it."""
    now = int(harness.clock.seconds())
    token = harness.issuer.github(iat=now + 3600, nbf=None, exp=now + 3900)
    refused(harness.decide(token), Reason.ISSUED_IN_FUTURE)


def test_a_lifetime_over_the_maximum_is_refused(harness: Harness) -> None:
    """A token valid for more than a day (the default maximum) is refused."""
    now = int(harness.clock.seconds())
    token = harness.issuer.github(iat=now, exp=now + 86401)
    refused(harness.decide(token), Reason.LIFETIME_TOO_LONG)


def test_tampered_payload(harness: Harness) -> None:
    """Changing one claim (ref to main) of a validly signed feature-branch
    token breaks the signature."""
    token = harness.issuer.github(ref="refs/heads/feature")
    header, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=="))
    claims["ref"] = "refs/heads/main"
    forged = ".".join((header, base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(
        b"=").decode(), signature))
    refusal = refused(harness.decide(forged), Reason.BAD_SIGNATURE)
    assert refusal.audit == {}
    assert refusal.issuer == harness.issuer.url


@pytest.mark.parametrize("claim", ["sub", "aud", "exp", "iat"])
def test_missing_claims(harness: Harness, claim: str) -> None:
    """A token without sub, aud, exp or iat is refused as missing_claim."""
    claims = github_claims(harness.issuer.url)
    del claims[claim]
    refusal = refused(harness.decide(harness.issuer.mint(claims)), Reason.MISSING_CLAIM)
    assert refusal.detail == claim


@pytest.mark.parametrize(("claim", "value"), [("sub", ""), ("exp", "soon"), ("iat", True),
                                              ("sub", 74)])
def test_claims_of_the_wrong_type(harness: Harness, claim: str, value: Any) -> None:
    """An empty or non-string sub, a non-numeric exp or iat: invalid_claim."""
    refused(harness.decide(harness.issuer.github(**{claim: value})), Reason.INVALID_CLAIM)


@pytest.mark.parametrize("token", [b"", b"not-a-jwt", b"a.b.c", b"eyJhbGciOiJSUzI1NiJ9.e30",
                                   b"eyJ" + b"A" * 20000 + b".e30.x"])
def test_malformed_tokens(harness: Harness, token: bytes) -> None:
    """Anything that is not a compact JWS is malformed, not an error."""
    refused(harness.decide(token), Reason.MALFORMED)


def test_a_critical_header_extension_is_refused(harness: Harness) -> None:
    """RFC 7515: a crit header the verifier does not understand is refused."""
    token = harness.issuer.mint(github_claims(harness.issuer.url),
                                headers={"crit": ["exp"], "exp": 1})
    refused(harness.decide(token), Reason.MALFORMED)


def test_a_jku_header_fetches_nothing(harness: Harness) -> None:
    """A jku pointing elsewhere is ignored: the key still comes from the
    issuer's own JWKS (and the forged signature fails)."""
    attacker = LocalIssuer(url="http://127.0.0.1:8999")
    token = attacker.mint(github_claims(harness.issuer.url), kid=attacker.rsa_kid,
                          headers={"jku": attacker.url + "/.well-known/jwks",
                                   "kid": harness.issuer.rsa_kid})
    refused(harness.decide(token), Reason.BAD_SIGNATURE)
    assert attacker.requests == {"discovery": 0, "jwks": 0}


def test_a_refusal_never_holds_the_token(harness: Harness) -> None:
    """Neither a refusal's fields nor its log fields contain the token or
    its signature."""
    token = harness.issuer.github(ref="refs/heads/feature")
    for decision in (harness.decide(token), harness.decide(token + "x"),
                     harness.decide(harness.issuer.github(aud="x"))):
        assert isinstance(decision, Refusal)
        text = repr(decision) + json.dumps(decision.log_fields())
        assert token not in text and token.split(".")[2] not in text
