"""The frozen types of a tenant's OIDC policy: trusted issuers and rules.

Build them with L{kilolock.auth.oidc.validation.validate_policy} (or
L{kilolock.auth.oidc.policy_file.load_policy_file}), which enforces every rule
stated there; L{OidcPolicy.to_document} gives back the document form.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from attrs import field, frozen

from kilolock.auth.oidc.patterns import matches
from kilolock.core.model import Access

#: The algorithms a CI token may be signed with.  Never C{none}, never an
#: HMAC (whose secret would be the public key anyone can fetch).
ALLOWED_ALGORITHMS = ("RS256", "ES256")


@frozen
class Condition:
    """A claim must be present and match one of C{patterns} (see
    L{kilolock.auth.oidc.patterns})."""

    claim: str
    patterns: tuple[str, ...]

    def holds(self, texts: Mapping[str, str]) -> bool:
        value = texts.get(self.claim)
        return value is not None and any(matches(pattern, value) for pattern in self.patterns)

    def to_document(self) -> str | list[str]:
        return self.patterns[0] if len(self.patterns) == 1 else list(self.patterns)


@frozen
class Grant:
    """What a matching rule allows: an access on the states whose names match
    one of C{states}, optionally within one workspace and environment (the
    hosted mode's ids or names).  All of them may hold C{{claim}}
    placeholders."""

    access: Access
    states: tuple[str, ...]
    workspace: str | None = None
    environment: str | None = None

    def to_document(self) -> dict[str, Any]:
        document: dict[str, Any] = {"access": self.access.value, "states": list(self.states)}
        if self.workspace is not None:
            document["workspace"] = self.workspace
        if self.environment is not None:
            document["environment"] = self.environment
        return document


@frozen
class Rule:
    """If a token of C{issuer} satisfies every condition, C{grant} applies."""

    name: str
    issuer: str
    conditions: tuple[Condition, ...]
    grant: Grant

    def holds(self, texts: Mapping[str, str]) -> bool:
        return all(condition.holds(texts) for condition in self.conditions)

    def to_document(self) -> dict[str, Any]:
        return {"name": self.name, "issuer": self.issuer,
                "claims": {each.claim: each.to_document() for each in self.conditions},
                "grant": self.grant.to_document()}


@frozen
class TrustedIssuer:
    """An issuer whose tokens a tenant accepts, and how to get its keys.

    Keys come, in this order of preference, from C{jwks} (a JWKS document
    given inline or read from C{jwks_file}: nothing is fetched), from
    C{jwks_url}, or from the C{jwks_uri} of the discovery document at
    L{discovery_url}.  C{ca_pem} (inline, or read from C{ca_file}) replaces
    the system's CAs for those fetches.
    """

    name: str
    url: str
    audience: str
    jwks_url: str | None = None
    jwks_file: str | None = None
    #: The JWKS document as canonical JSON text.
    jwks: str | None = field(default=None, repr=False)
    ca_file: str | None = None
    ca_pem: str | None = field(default=None, repr=False)
    leeway: int = 30
    max_lifetime: int = 86400

    @property
    def discovery_url(self) -> str:
        return self.url.rstrip("/") + "/.well-known/openid-configuration"

    def to_document(self) -> dict[str, Any]:
        document: dict[str, Any] = {"name": self.name, "url": self.url,
                                    "audience": self.audience}
        if self.jwks_url is not None:
            document["jwks_url"] = self.jwks_url
        if self.jwks_file is not None:
            document["jwks_file"] = self.jwks_file
        elif self.jwks is not None:
            document["jwks"] = json.loads(self.jwks)
        if self.ca_file is not None:
            document["ca_file"] = self.ca_file
        elif self.ca_pem is not None:
            document["ca_pem"] = self.ca_pem
        document["leeway_seconds"] = self.leeway
        document["max_token_lifetime_seconds"] = self.max_lifetime
        return document


@frozen
class OidcPolicy:
    """One tenant's trusted issuers and rules (rules in their given order)."""

    issuers: tuple[TrustedIssuer, ...] = ()
    rules: tuple[Rule, ...] = ()

    def issuer_for(self, iss: str) -> TrustedIssuer | None:
        """The trusted issuer whose URL is exactly C{iss}, if any."""
        for issuer in self.issuers:
            if issuer.url == iss:
                return issuer
        return None

    def rules_for(self, issuer: TrustedIssuer) -> tuple[Rule, ...]:
        return tuple(rule for rule in self.rules if rule.issuer == issuer.name)

    def to_document(self) -> dict[str, Any]:
        """The policy as the JSON/TOML document L{validate_policy} reads."""
        return {"version": 1,
                "issuers": [issuer.to_document() for issuer in self.issuers],
                "rules": [rule.to_document() for rule in self.rules]}
