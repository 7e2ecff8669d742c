"""The verifier against a real issuer on loopback: real sockets, treq and
the reactor for I/O, a task.Clock for the key cache's time.  Plain http on
127.0.0.1, and https with the issuer's private CA given as a CA bundle."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest_twisted
from twisted.internet import ssl
from twisted.internet.task import Clock

from kilolock.auth.oidc.decision import Accepted, Decision, Refusal, evaluate
from kilolock.auth.oidc.fetch import http_client
from kilolock.auth.oidc.keys import KeyRegistry
from kilolock.auth.oidc.policy import OidcPolicy
from kilolock.auth.oidc.refusal import Reason
from kilolock.auth.oidc.validation import validate_policy
from kilolock.auth.oidc.verify import TokenVerifier
from tests.support.oidc_issuer import (
    AUDIENCE,
    GITHUB_IAT,
    LocalIssuer,
    github_claims,
    github_policy_document,
)
from tests.support.tls_material import make_certificates


def wiring(reactor: Any) -> tuple[Clock, TokenVerifier]:
    clock = Clock()
    clock.advance(GITHUB_IAT + 10)
    registry = KeyRegistry(clock, lambda ca_pem: http_client(reactor, ca_pem))
    return clock, TokenVerifier(registry, clock)


async def decide(verifier: TokenVerifier, token: str, policy: OidcPolicy) -> Decision:
    return await evaluate(verifier, token, policy)


@pytest_twisted.ensureDeferred
async def test_rotation_and_an_issuer_going_down_on_loopback() -> None:
    """A real issuer on 127.0.0.1: a token verifies; a rotated key is found
    by one refetch; after the issuer stops listening the cached keys keep
    verifying and an unknown kid is refused."""
    from twisted.internet import reactor

    issuer = LocalIssuer()
    port = issuer.listen(reactor)
    try:
        clock, verifier = wiring(reactor)
        policy = validate_policy(github_policy_document(issuer.url))
        assert isinstance(await decide(verifier, issuer.github(), policy), Accepted)
        clock.advance(61)
        new_kid = issuer.rotate("EC")
        claims = github_claims(issuer.url, iat=int(clock.seconds()))
        assert isinstance(await decide(verifier, issuer.mint(claims, kid=new_kid), policy),
                          Accepted)
        assert issuer.requests == {"discovery": 2, "jwks": 2}
    finally:
        await port.stopListening()
    clock.advance(3601)
    claims = github_claims(issuer.url, iat=int(clock.seconds()))
    assert isinstance(await decide(verifier, issuer.mint(claims), policy), Accepted)
    clock.advance(61)
    unknown = issuer.mint(claims, kid=issuer.add_key("RSA", publish=False))
    refusal = await decide(verifier, unknown, policy)
    assert isinstance(refusal, Refusal) and refusal.reason is Reason.UNKNOWN_KEY
    assert issuer.requests == {"discovery": 2, "jwks": 2}


@pytest_twisted.ensureDeferred
async def test_an_https_issuer_with_a_private_ca(tmp_path: Path) -> None:
    """An issuer behind a private CA verifies with ca_pem, and not without
    it (the system's CAs do not know it: keys_unavailable)."""
    from twisted.internet import reactor

    certificates = make_certificates(tmp_path)
    options = ssl.PrivateCertificate.loadPEM(
        certificates.cert_path.read_bytes() + certificates.key_path.read_bytes()).options()
    issuer = LocalIssuer()
    port = issuer.listen(reactor, tls=options)
    try:
        document = github_policy_document(issuer.url)
        _, verifier = wiring(reactor)
        refusal = await decide(verifier, issuer.github(), validate_policy(document))
        assert isinstance(refusal, Refusal) and refusal.reason is Reason.KEYS_UNAVAILABLE
        document["issuers"][0]["ca_pem"] = certificates.ca_pem
        _, verifier = wiring(reactor)
        decision = await decide(verifier, issuer.github(), validate_policy(document))
        assert isinstance(decision, Accepted)
        assert decision.audit["issuer"] == issuer.url and issuer.url.startswith("https://")
        assert validate_policy(document).issuers[0].audience == AUDIENCE
    finally:
        await port.stopListening()
