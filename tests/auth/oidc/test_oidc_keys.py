"""Issuer keys: fetched from the discovery document and JWKS, cached with a
bounded TTL, refetched at a bounded rate on an unknown kid, shared between
concurrent requests, and kept while the issuer is down.  Time is a
task.Clock; the issuer is served in memory (StubTreq)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from treq.testing import StubTreq
from twisted.internet.defer import Deferred

from kilolock.auth.oidc.decision import Accepted, Refusal
from kilolock.auth.oidc.fetch import fetch_keys
from kilolock.auth.oidc.jwks import JWKSError, parse_jwks
from kilolock.auth.oidc.keys import KeyCacheSettings
from kilolock.auth.oidc.refusal import Reason
from kilolock.auth.oidc.validation import validate_policy
from tests.support.oidc_issuer import AUDIENCE, Harness, LocalIssuer, github_claims
from tests.support.oidc_support import captured_logs


def reason_of(decision: object) -> Reason | None:
    return decision.reason if isinstance(decision, Refusal) else None


def fetches(harness: Harness) -> int:
    return harness.issuer.requests["jwks"]


@pytest.fixture
def harness() -> Harness:
    return Harness()


def test_keys_are_fetched_once_and_reused(harness: Harness) -> None:
    """The first token fetches discovery + JWKS; the next ones use the cache."""
    for _ in range(5):
        assert isinstance(harness.decide(harness.issuer.github()), Accepted)
    assert harness.issuer.requests == {"discovery": 1, "jwks": 1}


def test_key_rotation_costs_one_refetch(harness: Harness) -> None:
    """The issuer publishes a new key: the first token signed with it
    triggers one refetch and is accepted; later ones use the cache."""
    assert isinstance(harness.decide(harness.issuer.github()), Accepted)
    harness.clock.advance(61)
    new_kid = harness.issuer.rotate("RSA", retire=harness.issuer.rsa_kid)
    token = harness.issuer.mint(github_claims(harness.issuer.url, iat=int(
        harness.clock.seconds())), kid=new_kid)
    assert isinstance(harness.decide(token), Accepted)
    assert isinstance(harness.decide(token), Accepted)
    assert fetches(harness) == 2


def test_rotation_right_after_a_fetch_waits_for_the_interval(harness: Harness) -> None:
    """A new kid seen less than refetch_interval after the last fetch is
    unknown until the interval has passed (then one refetch finds it)."""
    assert isinstance(harness.decide(harness.issuer.github()), Accepted)
    new_kid = harness.issuer.rotate("EC")
    token = harness.issuer.mint(github_claims(harness.issuer.url), kid=new_kid)
    harness.clock.advance(30)
    assert reason_of(harness.decide(token)) is Reason.UNKNOWN_KEY
    assert fetches(harness) == 1
    harness.clock.advance(31)
    assert isinstance(harness.decide(token), Accepted)
    assert fetches(harness) == 2


def test_a_flood_of_forged_kids_costs_at_most_one_fetch_per_interval(
        harness: Harness) -> None:
    """200 tokens with made-up kids within one refetch interval: one
    refetch in all; the next interval allows exactly one more."""
    assert isinstance(harness.decide(harness.issuer.github()), Accepted)
    harness.clock.advance(61)
    forger = LocalIssuer(url=harness.issuer.url)
    claims = github_claims(harness.issuer.url)
    for number in range(200):
        token = forger.mint(claims, headers={"kid": f"forged-{number}"})
        assert reason_of(harness.decide(token)) is Reason.UNKNOWN_KEY
        harness.clock.advance(0.1)
    assert fetches(harness) == 2
    harness.clock.advance(60)
    for number in range(50):
        harness.decide(forger.mint(claims, headers={"kid": f"again-{number}"}))
    assert fetches(harness) == 3


def test_issuer_down_with_cached_keys_still_verifies(harness: Harness) -> None:
    """The issuer goes down and the keys go stale: the refetch fails (once
    per interval) and the last good keys keep verifying."""
    assert isinstance(harness.decide(harness.issuer.github()), Accepted)
    harness.issuer.available = False
    harness.clock.advance(3601)
    now = int(harness.clock.seconds())
    for _ in range(20):
        assert isinstance(harness.decide(harness.issuer.github(iat=now)), Accepted)
    assert harness.issuer.requests["discovery"] == 2
    harness.issuer.available = True
    harness.clock.advance(61)
    assert isinstance(harness.decide(harness.issuer.github(iat=now)), Accepted)
    assert harness.issuer.requests == {"discovery": 3, "jwks": 2}


def test_issuer_down_with_an_unknown_kid_is_refused_without_a_fetch_storm(
        harness: Harness) -> None:
    """The issuer is down and tokens name kids the cache lacks: each is
    refused with unknown_key, and N of them cost at most one fetch attempt
    per refetch interval."""
    assert isinstance(harness.decide(harness.issuer.github()), Accepted)
    harness.issuer.available = False
    harness.clock.advance(61)
    unpublished = harness.issuer.add_key("RSA", publish=False)
    token = harness.issuer.mint(github_claims(harness.issuer.url), kid=unpublished)
    for _ in range(100):
        refusal = harness.decide(token)
        assert reason_of(refusal) is Reason.UNKNOWN_KEY
        assert isinstance(refusal, Refusal) and refusal.status == 401
        harness.clock.advance(0.5)
    assert harness.issuer.requests == {"discovery": 2, "jwks": 1}


def test_the_first_fetch_failing_gives_keys_unavailable(harness: Harness) -> None:
    """No keys were ever fetched and the issuer is down: keys_unavailable,
    one attempt per interval."""
    harness.issuer.available = False
    for _ in range(10):
        assert reason_of(harness.decide(harness.issuer.github())) is Reason.KEYS_UNAVAILABLE
    assert harness.issuer.requests["discovery"] == 1
    harness.issuer.available = True
    harness.clock.advance(60)
    assert isinstance(harness.decide(harness.issuer.github()), Accepted)


@pytest.mark.parametrize(("max_age", "fresh_for"), [
    (600, 600),          # honoured
    (10, 300),           # raised to the minimum
    (0, 300),
    (10 ** 9, 86400),    # cut to the maximum
    (None, 3600),        # no Cache-Control: the default
])
def test_cache_control_max_age_is_honoured_within_bounds(
        harness: Harness, max_age: int | None, fresh_for: int) -> None:
    """Keys stay fresh for the JWKS's max-age, clamped to 5 min .. 24 h
    (1 h without one): no fetch just before, one fetch just after."""
    harness.issuer.max_age = max_age
    start = int(harness.clock.seconds())
    assert isinstance(harness.decide(harness.issuer.github()), Accepted)
    harness.clock.advance(fresh_for - 1)
    assert isinstance(harness.decide(harness.issuer.github(iat=start + fresh_for - 20)),
                      Accepted)
    assert fetches(harness) == 1
    harness.clock.advance(2)
    assert isinstance(harness.decide(harness.issuer.github(iat=start + fresh_for - 20)),
                      Accepted)
    assert fetches(harness) == 2


@pytest.mark.parametrize(("header", "seconds"), [
    ("no-store", 0), ("private, no-cache", 0), ("public, max-age=60, must-revalidate", 60),
    ('max-age="120"', 120), ("s-maxage=5", None), ("max-age=soon", None)])
def test_cache_control_is_read(harness: Harness, header: str, seconds: int | None) -> None:
    """max-age (quoted or not) is read; no-store and no-cache count as 0
    (then the minimum TTL applies); anything else says nothing."""
    harness.issuer.cache_control = header
    fetched: list[Any] = []
    fetch_keys(StubTreq(harness.issuer.resource), harness.policy.issuers[0],
               harness.clock).addBoth(fetched.append)
    assert fetched[0].max_age == seconds
    assert KeyCacheSettings().ttl(0) == 300


def test_concurrent_requests_share_one_fetch(harness: Harness) -> None:
    """Ten tokens arriving while the first fetch hangs wait for it; when
    the issuer answers, all are decided with one fetch."""
    harness.issuer.hang = True
    source = harness.source()
    pending: list[Deferred[Any]] = [
        source.key_for(harness.issuer.rsa_kid, "RS256") for _ in range(10)]
    assert harness.issuer.requests["discovery"] == 1
    assert not any(each.called for each in pending)
    harness.issuer.hang = False
    request = harness.issuer.hanging.pop()
    request.setHeader(b"content-type", b"application/json")
    request.write(json.dumps(harness.issuer.discovery()).encode())
    request.finish()
    harness.http.flush()
    results: list[Any] = []
    for each in pending:
        each.addBoth(results.append)
    assert len(results) == 10 and all(key.kid == harness.issuer.rsa_kid for key in results)
    assert harness.issuer.requests == {"discovery": 1, "jwks": 1}


def test_a_hanging_issuer_times_out_on_the_clock() -> None:
    """A fetch that gets no answer fails after fetch_timeout seconds of the
    clock; the waiting request is refused (keys_unavailable)."""
    harness = Harness(settings=KeyCacheSettings(fetch_timeout=10))
    harness.issuer.hang = True
    results: list[Any] = []
    harness.source().key_for(harness.issuer.rsa_kid, "RS256").addBoth(results.append)
    harness.clock.advance(9)
    assert results == []
    harness.clock.advance(2)
    assert results[0].value.reason is Reason.KEYS_UNAVAILABLE


def test_a_discovery_document_for_another_issuer_is_not_used(harness: Harness) -> None:
    """The discovery document must name the configured issuer exactly."""
    harness.issuer.discovery = lambda: {  # type: ignore[method-assign]
        "issuer": "https://evil.example", "jwks_uri": harness.issuer.url + "/.well-known/jwks"}
    assert reason_of(harness.decide(harness.issuer.github())) is Reason.KEYS_UNAVAILABLE
    assert harness.issuer.requests["jwks"] == 0


@pytest.mark.parametrize("jwks_uri", [
    "http://keys.example/jwks", "http://10.0.0.7/jwks", "ftp://127.0.0.1/jwks",
    "https://user:pw@keys.example/jwks", "https://keys.example/jwks#top", 42])
def test_a_jwks_uri_that_is_not_https_or_loopback_is_not_fetched(
        harness: Harness, jwks_uri: object) -> None:
    """A discovery document's jwks_uri follows the rule of the issuer's url:
    plain http on another host (a private address too), another scheme, user
    info, a fragment or no text at all: nothing fetched, keys_unavailable,
    and the warning names the rule."""
    harness.issuer.discovery = lambda: {  # type: ignore[method-assign]
        "issuer": harness.issuer.url, "jwks_uri": jwks_uri}
    with captured_logs() as logs:
        assert reason_of(harness.decide(harness.issuer.github())) is Reason.KEYS_UNAVAILABLE
    assert fetches(harness) == 0
    problems = [event["problem"] for event in logs if "problem" in event]
    assert len(problems) == 1
    assert problems[0].startswith(f"{harness.issuer.url}/.well-known/openid-configuration")
    if isinstance(jwks_uri, str) and jwks_uri.startswith(("http:", "ftp:")):
        assert "must be https (http only for a loopback host, for tests)" in problems[0]


@pytest.mark.parametrize("host", ["127.0.0.1:8900", "localhost:8900"])
def test_a_plain_http_jwks_uri_on_loopback_is_fetched(host: str) -> None:
    """The loopback exception of the issuer's url holds for jwks_uri too
    (docs/ci-identity.md): an https issuer whose discovery document names
    http on 127.0.0.1 or localhost has its keys fetched there."""
    harness = Harness(LocalIssuer(url="https://issuer.example"))
    harness.issuer.discovery = lambda: {  # type: ignore[method-assign]
        "issuer": "https://issuer.example", "jwks_uri": f"http://{host}/.well-known/jwks"}
    assert isinstance(harness.decide(harness.issuer.github()), Accepted)
    assert harness.issuer.requests == {"discovery": 1, "jwks": 1}


def test_a_configured_jwks_url_skips_discovery(harness: Harness) -> None:
    """With jwks_url the discovery document is never asked for."""
    policy = validate_policy({
        "issuers": [{"name": "github", "url": harness.issuer.url, "audience": AUDIENCE,
                     "jwks_url": harness.issuer.url + "/.well-known/jwks"}],
        "rules": harness.policy.to_document()["rules"]})
    assert isinstance(harness.decide(harness.issuer.github(), policy), Accepted)
    assert harness.issuer.requests == {"discovery": 0, "jwks": 1}


def test_local_jwks_never_fetches(harness: Harness) -> None:
    """An issuer with an inline JWKS (closed networks) verifies without any
    request; a kid missing from it is unknown_key."""
    policy = validate_policy({
        "issuers": [{"name": "github", "url": harness.issuer.url, "audience": AUDIENCE,
                     "jwks": harness.issuer.jwks()}],
        "rules": harness.policy.to_document()["rules"]})
    assert isinstance(harness.decide(harness.issuer.github(), policy), Accepted)
    other = harness.issuer.add_key("RSA", publish=False)
    token = harness.issuer.mint(github_claims(harness.issuer.url), kid=other)
    assert reason_of(harness.decide(token, policy)) is Reason.UNKNOWN_KEY
    assert harness.issuer.requests == {"discovery": 0, "jwks": 0}


def test_tenants_trusting_the_same_issuer_share_its_keys(harness: Harness) -> None:
    """Two tenants' policies for the same issuer (different audiences and
    rules) use one cache: one fetch for both."""
    other = validate_policy({
        "issuers": [{"name": "gh", "url": harness.issuer.url, "audience": "https://b.example"}],
        "rules": [{"name": "b", "issuer": "gh", "claims": {"repository_owner_id": "65"},
                   "grant": {"access": "read", "states": ["**"]}}]})
    assert isinstance(harness.decide(harness.issuer.github()), Accepted)
    assert isinstance(harness.decide(harness.issuer.github(aud="https://b.example"), other),
                      Accepted)
    assert harness.issuer.requests == {"discovery": 1, "jwks": 1}


def test_an_oversized_jwks_is_refused(harness: Harness) -> None:
    """A JWKS over the size cap is not read (keys_unavailable)."""
    harness.issuer.jwks = lambda: {  # type: ignore[method-assign]
        "keys": [], "padding": "x" * (600 * 1024)}
    assert reason_of(harness.decide(harness.issuer.github())) is Reason.KEYS_UNAVAILABLE


# -- JWKS parsing ---------------------------------------------------------------

def test_unusable_keys_are_skipped() -> None:
    """oct keys, encryption keys, other curves, short RSA keys and keys whose
    alg is another algorithm never become verification keys."""
    issuer = LocalIssuer()
    rsa_jwk, ec_jwk = issuer.jwk(issuer.rsa_kid), issuer.jwk(issuer.ec_kid)
    bad = [
        {"kty": "oct", "k": "c2VjcmV0", "kid": "hmac", "alg": "HS256"},
        {**rsa_jwk, "kid": "enc", "use": "enc"},
        {**rsa_jwk, "kid": "ps", "alg": "PS256"},
        {**rsa_jwk, "kid": "short", "n": "AQAB"},
        {**ec_jwk, "kid": "p384", "crv": "P-384"},
        {"kty": "RSA", "kid": "broken", "n": "!!", "e": "AQAB"},
        "not an object",
    ]
    keys = parse_jwks({"keys": [*bad, rsa_jwk, ec_jwk]})
    assert keys.kids == {issuer.rsa_kid, issuer.ec_kid}
    with pytest.raises(JWKSError, match="no usable key"):
        parse_jwks({"keys": bad})
    with pytest.raises(JWKSError, match="not a JSON Web Key Set"):
        parse_jwks([rsa_jwk])
