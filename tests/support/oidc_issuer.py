"""A small, real OIDC issuer for tests: a discovery document and a JWKS
served by twisted.web, signing keys made with C{cryptography}, and the
documented claim sets of GitHub Actions and GitLab CI ID tokens.

Two ways to serve it:

- in memory, through C{treq.testing.StubTreq(issuer.resource)}: requests
  complete synchronously, so tests drive all time with C{task.Clock};
- on loopback (C{issuer.listen(reactor)}, 127.0.0.1 and a random port),
  for end-to-end tests (Terraform with C{TF_HTTP_PASSWORD=<token>}).

Knobs: C{available} (503 when False), C{hang} (never answer), C{max_age}
or C{cache_control} (the JWKS's C{Cache-Control}), C{rotate()} (a new key and kid), and request
counters per document.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm
from treq.testing import StubTreq
from twisted.internet.interfaces import IListeningPort
from twisted.internet.task import Clock
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Site

from kilolock.auth.oidc.decision import Decision, evaluate
from kilolock.auth.oidc.keys import IKeySource, KeyCacheSettings, KeyRegistry
from kilolock.auth.oidc.policy import OidcPolicy
from kilolock.auth.oidc.validation import validate_policy
from kilolock.auth.oidc.verify import TokenVerifier

#: The audience the tests' Kilolock requires.
AUDIENCE = "https://kilolock.example.test"
#: The moment the documented GitHub example token was issued: tests set
#: their clock shortly after it.
GITHUB_IAT = 1632493567
GITLAB_IAT = 1681395193

PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey


def github_claims(issuer: str, *, audience: str = AUDIENCE, iat: int = GITHUB_IAT,
                  **overrides: Any) -> dict[str, Any]:
    """The example token of GitHub's "About security hardening with OpenID
    Connect" (a job in environment C{prod} of C{octo-org/octo-repo} on
    C{main}), with this issuer and audience, times shifted to C{iat} with
    the documented offsets (nbf 600 s before, exp 300 s after).  Claims
    given as None in C{overrides} are removed."""
    claims: dict[str, Any] = {
        "jti": "example-id",
        "sub": "repo:octo-org/octo-repo:environment:prod",
        "environment": "prod",
        "aud": audience,
        "ref": "refs/heads/main",
        "sha": "example-sha",
        "repository": "octo-org/octo-repo",
        "repository_owner": "octo-org",
        "actor_id": "12",
        "repository_visibility": "private",
        "repository_id": "74",
        "repository_owner_id": "65",
        "run_id": "example-run-id",
        "run_number": "10",
        "run_attempt": "2",
        "runner_environment": "github-hosted",
        "actor": "octocat",
        "workflow": "example-workflow",
        "head_ref": "",
        "base_ref": "",
        "event_name": "workflow_dispatch",
        "ref_type": "branch",
        "job_workflow_ref": "octo-org/octo-automation/.github/workflows/oidc.yml@refs/heads/main",
        "iss": issuer,
        "nbf": iat - 600,
        "exp": iat + 300,
        "iat": iat,
    }
    return _applied(claims, overrides)


def github_pull_request_claims(issuer: str, *, number: int = 42, **overrides: Any
                               ) -> dict[str, Any]:
    """The same repository's token for a C{pull_request} event: GitHub's
    documented subject C{repo:<owner>/<repo>:pull_request}, the merge ref,
    no environment."""
    pull_request = {"sub": "repo:octo-org/octo-repo:pull_request",
                    "ref": f"refs/pull/{number}/merge", "event_name": "pull_request",
                    "head_ref": "feature-1", "base_ref": "main", "environment": None}
    return github_claims(issuer, **{**pull_request, **overrides})


def gitlab_claims(issuer: str, *, audience: str = AUDIENCE, iat: int = GITLAB_IAT,
                  **overrides: Any) -> dict[str, Any]:
    """The example payload of GitLab's "OpenID Connect (OIDC) Authentication
    Using ID Tokens" (project C{my-group/my-project}, branch
    C{feature-branch-1}), with this issuer and audience, times shifted to
    C{iat} with the documented offsets (nbf 5 s before, exp one hour after)."""
    claims: dict[str, Any] = {
        "namespace_id": "72",
        "namespace_path": "my-group",
        "project_id": "20",
        "project_path": "my-group/my-project",
        "user_id": "1",
        "user_login": "sample-user",
        "user_email": "sample-user@example.com",
        "user_identities": [
            {"provider": "github", "extern_uid": "2435223452345"},
            {"provider": "bitbucket", "extern_uid": "john.smith"},
        ],
        "pipeline_id": "574",
        "pipeline_source": "push",
        "job_id": "302",
        "ref": "feature-branch-1",
        "ref_type": "branch",
        "ref_path": "refs/heads/feature-branch-1",
        "ref_protected": "false",
        "groups_direct": ["mygroup/mysubgroup", "myothergroup/myothersubgroup"],
        "environment": "test-environment2",
        "environment_protected": "false",
        "deployment_tier": "testing",
        "environment_action": "start",
        "runner_id": 1,
        "runner_environment": "self-hosted",
        "sha": "714a629c0b401fdce83e847fc9589983fc6f46bc",
        "project_visibility": "public",
        "ci_config_ref_uri": "gitlab.example.com/my-group/my-project//.gitlab-ci.yml"
                             "@refs/heads/main",
        "ci_config_sha": "714a629c0b401fdce83e847fc9589983fc6f46bc",
        "jti": "235b3a54-b797-45c7-ae9a-f72d7bc6ef5b",
        "iss": issuer,
        "iat": iat,
        "nbf": iat - 5,
        "exp": iat + 3600,
        "sub": "project_path:my-group/my-project:ref_type:branch:ref:feature-branch-1",
        "aud": audience,
    }
    return _applied(claims, overrides)


def _applied(claims: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    for name, value in overrides.items():
        if value is None:
            claims.pop(name, None)
        else:
            claims[name] = value
    return claims


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsigned_token(header: Mapping[str, Any], claims: Mapping[str, Any],
                   signature: bytes = b"") -> str:
    """A compact JWS put together by hand (for C{alg: none} and tampering)."""
    return ".".join((b64url(json.dumps(dict(header)).encode()),
                     b64url(json.dumps(dict(claims)).encode()), b64url(signature)))


class _Document(Resource):
    isLeaf = True

    def __init__(self, issuer: LocalIssuer, name: str) -> None:
        super().__init__()
        self.issuer = issuer
        self.name = name

    def render_GET(self, request: Any) -> Any:
        issuer = self.issuer
        issuer.requests[self.name] += 1
        if issuer.hang:
            issuer.hanging.append(request)
            return NOT_DONE_YET
        if not issuer.available:
            request.setResponseCode(503)
            return b"down"
        request.setHeader(b"content-type", b"application/json")
        if self.name == "jwks" and issuer.cache_control is not None:
            request.setHeader(b"cache-control", issuer.cache_control.encode())
        elif self.name == "jwks" and issuer.max_age is not None:
            request.setHeader(b"cache-control", f"public, max-age={issuer.max_age}".encode())
        document = issuer.discovery() if self.name == "discovery" else issuer.jwks()
        return json.dumps(document).encode()


class LocalIssuer:
    """An OIDC issuer with RSA (RS256) and EC (ES256) signing keys."""

    def __init__(self, url: str = "http://127.0.0.1:8900") -> None:
        self.url = url
        self.keys: dict[str, PrivateKey] = {}
        #: The kids the JWKS publishes (a retired key still signs, for tests).
        self.published: list[str] = []
        self.available = True
        self.hang = False
        self.hanging: list[Any] = []
        self.max_age: int | None = None
        #: A Cache-Control value sent verbatim with the JWKS (overrides max_age).
        self.cache_control: str | None = None
        self.requests = {"discovery": 0, "jwks": 0}
        self._serial = 0
        self.rsa_kid = self.add_key("RSA")
        self.ec_kid = self.add_key("EC")
        self.resource = Resource()
        well_known = Resource()
        self.resource.putChild(b".well-known", well_known)
        well_known.putChild(b"openid-configuration", _Document(self, "discovery"))
        well_known.putChild(b"jwks", _Document(self, "jwks"))
        self.port: IListeningPort | None = None

    # -- keys -----------------------------------------------------------------

    def add_key(self, kind: str = "RSA", *, publish: bool = True) -> str:
        """A new signing key; its kid."""
        self._serial += 1
        kid = f"{kind.lower()}-key-{self._serial}"
        self.keys[kid] = (rsa.generate_private_key(public_exponent=65537, key_size=2048)
                          if kind == "RSA" else ec.generate_private_key(ec.SECP256R1()))
        if publish:
            self.published.append(kid)
        return kid

    def rotate(self, kind: str = "RSA", *, retire: str | None = None) -> str:
        """Publish a new key (and stop publishing C{retire}); the new kid."""
        kid = self.add_key(kind)
        if retire is not None:
            self.published.remove(retire)
        return kid

    def public_pem(self, kid: str) -> bytes:
        return self.keys[kid].public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)

    def jwk(self, kid: str) -> dict[str, Any]:
        key = self.keys[kid]
        if isinstance(key, rsa.RSAPrivateKey):
            jwk = RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
            jwk["alg"] = "RS256"
        else:
            jwk = ECAlgorithm.to_jwk(key.public_key(), as_dict=True)
            jwk["alg"] = "ES256"
        jwk.update(kid=kid, use="sig")
        return dict(jwk)

    def jwks(self) -> dict[str, Any]:
        return {"keys": [self.jwk(kid) for kid in self.published]}

    def discovery(self) -> dict[str, Any]:
        return {"issuer": self.url,
                "jwks_uri": self.url + "/.well-known/jwks",
                "subject_types_supported": ["public", "pairwise"],
                "response_types_supported": ["id_token"],
                "claims_supported": ["sub", "aud", "exp", "iat", "iss", "jti", "nbf"],
                "id_token_signing_alg_values_supported": ["RS256"],
                "scopes_supported": ["openid"]}

    # -- tokens ---------------------------------------------------------------

    def mint(self, claims: Mapping[str, Any], *, kid: str | None = None,
             headers: Mapping[str, Any] | None = None) -> str:
        """A token signed with key C{kid} (the RSA key by default), with the
        algorithm that fits the key and GitHub's header shape."""
        kid = kid or self.rsa_kid
        key = self.keys[kid]
        algorithm = "RS256" if isinstance(key, rsa.RSAPrivateKey) else "ES256"
        header = {"typ": "JWT", "kid": kid, "x5t": "example-thumbprint", **(headers or {})}
        return jwt.encode(dict(claims), key, algorithm=algorithm, headers=header)

    def github(self, **overrides: Any) -> str:
        return self.mint(github_claims(self.url, **overrides))

    def gitlab(self, **overrides: Any) -> str:
        return self.mint(gitlab_claims(self.url, **overrides))

    # -- serving on loopback --------------------------------------------------

    def listen(self, reactor: Any, tls: Any = None) -> IListeningPort:
        """Serve on 127.0.0.1 with a random port, over TLS with the context
        factory C{tls} if given; the URL follows the port."""
        if tls is None:
            self.port = reactor.listenTCP(0, Site(self.resource), interface="127.0.0.1")
        else:
            self.port = reactor.listenSSL(0, Site(self.resource), tls, interface="127.0.0.1")
        scheme = "http" if tls is None else "https"
        self.url = f"{scheme}://127.0.0.1:{self.port.getHost().port}"
        return self.port


# -- a verifier wired to the issuer, for Clock-driven tests ---------------------

def github_policy_document(url: str, *, audience: str = AUDIENCE) -> dict[str, Any]:
    """The policy of docs/ci-identity.md's GitHub example: C{main} of
    repository 74 writes C{prod/*}, pull requests of it read, and every
    environment's job writes its own C{env/<environment>/*}."""
    return {
        "issuers": [{"name": "github", "url": url, "audience": audience}],
        "rules": [
            {"name": "main-writes-prod", "issuer": "github",
             "claims": {"repository_id": "74", "ref": "refs/heads/main", "ref_type": "branch"},
             "grant": {"access": "write", "states": ["prod/*"]}},
            {"name": "prs-read", "issuer": "github",
             "claims": {"repository_id": "74", "event_name": "pull_request"},
             "grant": {"access": "read", "states": ["prod/*", "env/**"]}},
            {"name": "environments-write-their-own", "issuer": "github",
             "claims": {"repository_id": "74", "ref": "refs/heads/main"},
             "grant": {"access": "write", "states": ["env/{environment}/*"]}},
        ],
    }


class Harness:
    """A LocalIssuer served in memory (StubTreq), a KeyRegistry and a
    TokenVerifier on a task.Clock set just after the documented GitHub
    example token was issued."""

    def __init__(self, issuer: LocalIssuer | None = None,
                 settings: KeyCacheSettings | None = None) -> None:
        self.issuer = issuer or LocalIssuer()
        self.clock = Clock()
        self.clock.advance(GITHUB_IAT + 10)
        self.http = StubTreq(self.issuer.resource)
        self.registry = KeyRegistry(self.clock, lambda ca_pem: self.http, settings)
        self.verifier = TokenVerifier(self.registry, self.clock)
        self.policy = validate_policy(github_policy_document(self.issuer.url))

    def decide(self, token: str | bytes, policy: OidcPolicy | None = None, *,
               grace: float = 0.0) -> Decision:
        """The decision on C{token}, which must be ready at once (all
        fetches go through StubTreq and complete synchronously)."""
        results: list[Decision] = []
        evaluate(self.verifier, token, policy or self.policy,
                 expiry_grace=grace).addBoth(results.append)
        self.http.flush()
        assert results, "the decision is still pending"
        return results[0]

    def source(self) -> IKeySource:
        return self.registry.source_for(self.policy.issuers[0])
