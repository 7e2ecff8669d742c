"""CI identity through the lanes: the policies the tests use, an in-memory
Kilolock with the OIDC checker (static or hosted mode, on a task.Clock), a
loopback issuer served from a thread for server subprocesses, and the
tokens of the attacks.

The static-mode policy (L{static_policy_document}) follows docs/ci-identity.md:
C{main} of repository 74 writes C{prod-*}; its pull requests read C{prod-*}
and C{env/**}; a job in GitHub environment X writes C{env/X/*}; repository
99 reads the outputs of C{prod-*} only; GitLab project 20's branches write
C{gitlab-*}.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.server
import json
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from attrs import frozen
from cryptography.hazmat.primitives import serialization
from twisted.internet.task import Clock
from twisted.logger import globalLogPublisher

from kilolock.auth.oidc.checker import (
    HostedPolicySource,
    IOidcPolicySource,
    OidcChecker,
    StaticPolicySource,
)
from kilolock.auth.oidc.keys import KeyRegistry
from kilolock.auth.oidc.validation import validate_policy
from kilolock.auth.oidc.verify import TokenVerifier
from kilolock.auth.portal import DatabaseTokenChecker, StaticTokenChecker, build_portal
from kilolock.store.memory.store import MemoryStateStore
from kilolock.web.control.api import ControlAPI
from kilolock.web.control.tree import build_control_root
from kilolock.web.site import build_root
from tests.support.fixtures_server import KilolockServer
from tests.support.hosted_support import CONTROL_TOKEN, STUB_PUBLIC_URL, ControlClient
from tests.support.oidc_issuer import (
    AUDIENCE,
    GITHUB_IAT,
    LocalIssuer,
    b64url,
    github_claims,
    unsigned_token,
)
from tests.support.stub_client import Reply, SiteClient, lock_body, state_body, terraform_headers

#: The static token next to CI tokens in the static-mode tests.
STATIC_TOKEN = "kl_static-token-next-to-oidc-0123456789"
#: The lock grace of the tests (the default).
GRACE = 3600.0


def static_policy_document(github: str, gitlab: str | None = None, *,
                           inline_keys: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The static-mode policy of the module docstring for the issuers at
    these URLs (C{inline_keys}: issuer URL -> JWKS, configured inline)."""
    keys = dict(inline_keys or {})
    issuers = [{"name": "github", "url": github, "audience": AUDIENCE}]
    rules: list[dict[str, Any]] = [
        {"name": "main-writes-prod", "issuer": "github",
         "claims": {"repository_id": "74", "ref": "refs/heads/main", "ref_type": "branch"},
         "grant": {"access": "write", "states": ["prod-*"]}},
        {"name": "prs-read", "issuer": "github",
         "claims": {"repository_id": "74", "event_name": "pull_request"},
         "grant": {"access": "read", "states": ["prod-*", "env/**"]}},
        {"name": "environments-write-their-own", "issuer": "github",
         "claims": {"repository_id": "74", "ref": "refs/heads/main"},
         "grant": {"access": "write", "states": ["env/{environment}/*"]}},
        {"name": "dashboards-read-outputs", "issuer": "github",
         "claims": {"repository_id": "99"},
         "grant": {"access": "outputs-only", "states": ["prod-*"]}},
    ]
    if gitlab is not None:
        issuers.append({"name": "gitlab", "url": gitlab, "audience": AUDIENCE})
        rules.append({"name": "gitlab-branches-write", "issuer": "gitlab",
                      "claims": {"project_id": "20", "ref_type": "branch"},
                      "grant": {"access": "write", "states": ["gitlab-*"]}})
    for issuer in issuers:
        if issuer["url"] in keys:
            issuer["jwks"] = keys[issuer["url"]]
    return {"version": 1, "issuers": issuers, "rules": rules}


def hosted_policy_document(issuer: LocalIssuer, *, inline: bool = True) -> dict[str, Any]:
    """A hosted tenant's policy: C{main} of repository 74 writes every state
    of environment C{production} of workspace C{infra} (named, not by id);
    a job in GitHub environment X writes C{app-*} in the environment named
    X of any workspace; pull requests read C{app-*} everywhere."""
    document: dict[str, Any] = {"version": 1, "issuers": [
        {"name": "github", "url": issuer.url, "audience": AUDIENCE}], "rules": [
        {"name": "main-writes-production", "issuer": "github",
         "claims": {"repository_id": "74", "ref": "refs/heads/main"},
         "grant": {"access": "write", "workspace": "infra", "environment": "production",
                   "states": ["*"]}},
        {"name": "environments-write-their-own", "issuer": "github",
         "claims": {"repository_id": "74", "ref": "refs/heads/main"},
         "grant": {"access": "write", "environment": "{environment}", "states": ["app-*"]}},
        {"name": "prs-read", "issuer": "github",
         "claims": {"repository_id": "74", "event_name": "pull_request"},
         "grant": {"access": "read", "states": ["app-*"]}},
    ]}
    if inline:
        document["issuers"][0]["jwks"] = issuer.jwks()
    return document


def basic(username: str, password: str) -> dict[str, str]:
    value = base64.b64encode(f"{username}:{password}".encode()).decode()
    return {"Authorization": f"Basic {value}"}


def oidc_basic(token: str) -> dict[str, str]:
    """The backend block's credentials: username C{oidc}, the token as password."""
    return basic("oidc", token)


def bearer(token: str) -> dict[str, str]:
    """OpenTofu's C{headers = { Authorization = "Bearer ..." }}."""
    return {"Authorization": f"Bearer {token}"}


# -- the attacks ----------------------------------------------------------------


def _segments(token: str) -> list[str]:
    return token.split(".")


def _decoded(segment: str) -> dict[str, Any]:
    padded = segment + "=" * (-len(segment) % 4)
    value: dict[str, Any] = json.loads(base64.urlsafe_b64decode(padded))
    return value


def attack_tokens(issuer: LocalIssuer, other: LocalIssuer, now: int) -> dict[str, str]:
    """Tokens an attacker may present, each of which must be refused (401),
    by name.  The legitimate claims are main's, issued at C{now}."""
    claims = github_claims(issuer.url, iat=now)
    good = issuer.mint(claims)
    header, payload, signature = _segments(good)
    tampered = dict(_decoded(payload), ref="refs/heads/main", repository_id="75")
    # The classic key confusion: HMAC "signed" with the issuer's public key.
    confused = ".".join((b64url(json.dumps({"alg": "HS256", "typ": "JWT",
                                            "kid": issuer.rsa_kid}).encode()),
                         b64url(json.dumps(claims).encode())))
    mac = hmac.new(issuer.public_pem(issuer.rsa_kid), confused.encode(), hashlib.sha256)
    return {
        "alg_none": unsigned_token({"alg": "none", "typ": "JWT"}, claims),
        "alg_none_with_kid": unsigned_token({"alg": "none", "kid": issuer.rsa_kid}, claims),
        "hs256_with_public_key": f"{confused}.{b64url(mac.digest())}",
        "wrong_issuer": other.mint(github_claims(other.url, iat=now)),
        "iss_claims_trusted_issuer_signed_by_other": other.mint(claims),
        "wrong_audience": issuer.mint(github_claims(issuer.url, iat=now,
                                                    audience="https://github.com/octo-org")),
        "expired": issuer.mint(github_claims(issuer.url, iat=now - 2 * 3600 - 400)),
        "not_yet_valid": issuer.mint(github_claims(issuer.url, iat=now, nbf=now + 600)),
        "issued_in_future": issuer.mint(github_claims(issuer.url, iat=now + 600)),
        "tampered_payload": f"{header}.{b64url(json.dumps(tampered).encode())}.{signature}",
        "stripped_signature": f"{header}.{payload}.",
        "missing_sub": issuer.mint(github_claims(issuer.url, iat=now, sub=None)),
        "missing_exp": issuer.mint(github_claims(issuer.url, iat=now, exp=None)),
        "missing_aud": issuer.mint(github_claims(issuer.url, iat=now, aud=None)),
        "unknown_kid": issuer.mint(claims, kid=issuer.add_key("RSA", publish=False)),
        "not_a_jwt_for_oidc": "definitely-not-a-token",
    }


#: The reason each attack is refused with (the access log's C{denied}).
ATTACK_REASONS = {
    "alg_none": "oidc_algorithm_not_allowed",
    "alg_none_with_kid": "oidc_algorithm_not_allowed",
    "hs256_with_public_key": "oidc_algorithm_not_allowed",
    "wrong_issuer": "oidc_wrong_issuer",
    "iss_claims_trusted_issuer_signed_by_other": "oidc_bad_signature",
    "wrong_audience": "oidc_wrong_audience",
    "expired": "oidc_expired",
    "not_yet_valid": "oidc_not_yet_valid",
    "issued_in_future": "oidc_issued_in_future",
    "tampered_payload": "oidc_bad_signature",
    "stripped_signature": "oidc_bad_signature",
    "missing_sub": "oidc_missing_claim",
    "missing_exp": "oidc_missing_claim",
    "missing_aud": "oidc_missing_claim",
    "unknown_kid": "oidc_unknown_key",
    "not_a_jwt_for_oidc": "oidc_malformed",
}


def pem_of(issuer: LocalIssuer, kid: str) -> str:
    return issuer.keys[kid].public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()


# -- Kilolock in memory -------------------------------------------------------------


class OidcLane:
    """A Kilolock site in memory (memory store) whose portal takes CI tokens,
    verified on a task.Clock set just after the documented GitHub token was
    issued.  Static mode by default (the static-mode policy, keys inline,
    plus L{STATIC_TOKEN}); C{hosted=True}: the database mode (policies from
    the store)."""

    def __init__(self, *, hosted: bool = False, grace: float = GRACE) -> None:
        self.issuer = LocalIssuer("http://127.0.0.1:8900")
        self.gitlab = LocalIssuer("http://127.0.0.1:8901")
        self.other = LocalIssuer("http://127.0.0.1:8902")
        self.clock = Clock()
        self.clock.advance(GITHUB_IAT + 10)
        self.store = MemoryStateStore()
        registry = KeyRegistry(self.clock, lambda ca_pem: None)  # type: ignore[arg-type,return-value]
        self.verifier = TokenVerifier(registry, self.clock)
        source: IOidcPolicySource
        if hosted:
            source = HostedPolicySource(self.store)
            checker: Any = DatabaseTokenChecker(self.store)
        else:
            document = static_policy_document(
                self.issuer.url, self.gitlab.url,
                inline_keys={self.issuer.url: self.issuer.jwks(),
                             self.gitlab.url: self.gitlab.jwks()})
            source = StaticPolicySource(validate_policy(document))
            checker = StaticTokenChecker(STATIC_TOKEN)
        self.checker = OidcChecker(source, self.verifier, grace)
        self.site = SiteClient(build_root(self.store, build_portal(checker, self.checker),
                                          reactor=None, auth_mode="database" if hosted
                                          else "static"))
        api = ControlAPI(self.store, CONTROL_TOKEN, None, lambda request: STUB_PUBLIC_URL)
        self.control_site = SiteClient(build_control_root(api))
        self.control = ControlClient(self.control_site.request)

    @property
    def now(self) -> int:
        return int(self.clock.seconds())

    def token(self, **overrides: Any) -> str:
        """A GitHub token of main (environment prod) issued now."""
        return self.issuer.mint(github_claims(self.issuer.url, iat=self.now, **overrides))

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: Mapping[str, str] | None = None) -> Reply:
        framed = {} if body is None else terraform_headers(body)
        return self.site.request(method, path, body, {**framed, **(headers or {})})

    def apply(self, path: str, headers: Mapping[str, str], serial: int = 1,
              lock_id: str = "lock-1") -> list[int]:
        """What Terraform's apply sends: LOCK, POST ?ID=, UNLOCK; the statuses."""
        body = lock_body(lock_id)
        return [self.request("LOCK", path, body, headers).status,
                self.request("POST", f"{path}?ID={lock_id}", state_body(serial),
                             headers).status,
                self.request("UNLOCK", path, body, headers).status]

    def events(self, tenant: str = "default") -> list[Any]:
        found: list[Any] = []
        self.store.list_events(tenant).addCallback(found.extend)
        return found

    def written(self, tenant: str = "default") -> list[str]:
        """The kinds of every event of the tenant: [] when nothing was done."""
        return [event.kind for event in self.events(tenant)]


# -- logs ---------------------------------------------------------------------------


@contextmanager
def captured_logs() -> Iterator[list[dict[str, Any]]]:
    """Every log event emitted while the block runs."""
    events: list[dict[str, Any]] = []
    globalLogPublisher.addObserver(events.append)
    try:
        yield events
    finally:
        globalLogPublisher.removeObserver(events.append)


def access_events(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [event for event in events if "log_access_line" in event]


# -- a loopback issuer for server subprocesses ----------------------------------------


class ThreadedIssuer:
    """A L{LocalIssuer}'s discovery document and JWKS served on 127.0.0.1 by
    a thread of the test process (a server subprocess fetches from it while
    the test blocks on Terraform or on HTTP).  C{issuer.available = False}
    answers 503; L{stop} closes the socket (the issuer is down)."""

    def __init__(self) -> None:
        self.issuer = LocalIssuer()
        issuer = self.issuer

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                names = {"/.well-known/openid-configuration": "discovery",
                         "/.well-known/jwks": "jwks"}
                name = names.get(self.path)
                if name is None:
                    self.send_error(404)
                    return
                issuer.requests[name] += 1
                if not issuer.available:
                    self.send_error(503)
                    return
                document = issuer.discovery() if name == "discovery" else issuer.jwks()
                body = json.dumps(document).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                if name == "jwks" and issuer.max_age is not None:
                    self.send_header("Cache-Control", f"max-age={issuer.max_age}")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        issuer.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return self.issuer.url

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# -- a server subprocess taking CI tokens ------------------------------------------------


class TokenClock:
    """The time a server subprocess verifies CI tokens at (and runs its key
    cache on): the file of its C{--token-clock-file} (L{hooks}, a hook of
    L{kilolock.testing.hooks}).  Starts just after the documented GitHub
    token was issued."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.set(GITHUB_IAT + 10)

    def set(self, seconds: float) -> None:
        staged = self.path.with_suffix(".new")
        staged.write_text(f"{seconds:.3f}")
        staged.replace(self.path)  # atomic: the server never reads half a number

    def now(self) -> int:
        return int(float(self.path.read_text()))

    def advance(self, seconds: float) -> None:
        self.set(self.now() + seconds)

    @property
    def hooks(self) -> tuple[str, ...]:
        """The server hook that verifies tokens at this clock's time."""
        return ("--token-clock-file", str(self.path))


@frozen
class OidcServer:
    """A static-mode server subprocess with C{--oidc-config} (the static
    policy, keys from the loopback issuer) and L{STATIC_TOKEN}."""

    server: KilolockServer
    issuer: ThreadedIssuer
    clock: TokenClock

    def token(self, **overrides: Any) -> str:
        """A GitHub token of main (environment prod), issued at the server's now."""
        return self.issuer.issuer.mint(github_claims(self.issuer.url, iat=self.clock.now(),
                                                     **overrides))

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: Mapping[str, str] | None = None) -> Reply:
        if body is None:
            return self.server.request(method, path, headers=headers)
        return self.server.with_body(method, path, body, headers)

    def stored(self, name: str) -> Reply:
        """What the static token reads of a state."""
        return self.server.request("GET", f"/v1/states/{name}", headers=bearer(STATIC_TOKEN))


def start_oidc_server(factory: Callable[..., KilolockServer], directory: Path,
                      issuer: ThreadedIssuer, **env: str) -> OidcServer:
    directory.mkdir(parents=True, exist_ok=True)
    policy = directory / "policy.json"
    policy.write_text(json.dumps(static_policy_document(issuer.url)))
    clock = TokenClock(directory / "token-clock")
    server = factory(env={"KL_AUTH_MODE": "static", "KL_AUTH_TOKEN": STATIC_TOKEN,
                          "KL_OIDC_CONFIG": str(policy), **env}, hooks=clock.hooks)
    return OidcServer(server, issuer, clock)
