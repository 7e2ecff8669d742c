"""Applying a tenant's rules to a verified token: a typed decision.

L{decide} evaluates every rule of the token's issuer, in order, and keeps
every one that matches: a pipeline may, say, write its own environment's
state and read a shared one.  The result is either L{Accepted} (the grants,
each with its placeholders rendered from the token's claims) or L{Refusal}
(a reason code, the rules evaluated and why each did not match, by claim
name only).  L{evaluate} runs verification and decision together and never
fails: every refusal is a value.
"""

from __future__ import annotations

from collections.abc import Mapping

from attrs import field, frozen
from twisted.internet.defer import Deferred, ensureDeferred

from kilolock.auth.oidc.claims import audit_detail, claim_texts, principal_name
from kilolock.auth.oidc.patterns import TemplateError, matches, render
from kilolock.auth.oidc.policy import OidcPolicy, Rule
from kilolock.auth.oidc.refusal import UNAUTHENTICATED, Reason, TokenRefused
from kilolock.auth.oidc.verify import TokenVerifier, VerifiedToken
from kilolock.core.model import Access


@frozen
class GrantedAccess:
    """One matching rule's grant, its templates rendered."""

    rule: str
    access: Access
    states: tuple[str, ...]
    workspace: str | None = None
    environment: str | None = None

    def covers(self, state: str, workspace: str | None, environment: str | None) -> bool:
        """Whether the grant names this state (access aside)."""
        if self.workspace is not None and self.workspace != workspace:
            return False
        if self.environment is not None and self.environment != environment:
            return False
        return any(matches(pattern, state) for pattern in self.states)


@frozen
class Refusal:
    """A token refused, with everything a log line needs and nothing secret.

    @ivar reason: the L{Reason}.
    @ivar detail: a short explanation (claim names, never unverified values).
    @ivar issuer: the trusted issuer's URL, once the token named one.
    @ivar rules_evaluated: (rule name, why it did not match) for each rule
        of the issuer, when the token was verified.
    @ivar audit: the audit detail of a verified token (empty otherwise).
    """

    reason: Reason
    detail: str = ""
    issuer: str | None = None
    rules_evaluated: tuple[tuple[str, str], ...] = ()
    audit: Mapping[str, str] = field(factory=dict)

    @property
    def status(self) -> int:
        """401 when the token itself is not good, 403 when it is but the
        rules do not allow the request."""
        return 401 if self.reason in UNAUTHENTICATED else 403

    def log_fields(self) -> dict[str, str]:
        """Fields for a structured log line."""
        fields = {"oidc_reason": self.reason.value, "oidc_detail": self.detail}
        if self.issuer is not None:
            fields["oidc_issuer"] = self.issuer
        if self.rules_evaluated:
            fields["oidc_rules"] = "; ".join(f"{name}: {why}"
                                             for name, why in self.rules_evaluated)
        fields.update({f"oidc_{key}": value for key, value in self.audit.items()
                       if key != "issuer"})
        return fields


@frozen
class Accepted:
    """A verified token and the grants of the rules it matches."""

    principal: str
    issuer: str
    grants: tuple[GrantedAccess, ...]
    audit: Mapping[str, str]
    expires_at: float
    #: Past C{exp}, verified within an expiry grace: it may only finish
    #: locked work (L{kilolock.auth.oidc.grace}), so L{check} refuses everything.
    expired: bool = False

    def check(self, state: str, needed: Access, *, workspace: str | None = None,
              environment: str | None = None) -> Refusal | None:
        """None when a grant allows C{needed} on the state, else the refusal
        (C{read_only} when a grant names the state but only for reading)."""
        if self.expired:
            return self.refusal(Reason.LOCK_GRACE_DENIED,
                                "an expired token may only finish the work it locked")
        covering = [grant for grant in self.grants
                    if grant.covers(state, workspace, environment)]
        if any(grant.access.covers(needed) for grant in covering):
            return None
        if covering:
            return self.refusal(Reason.READ_ONLY, f"{needed.value} needs a write grant;"
                                f" rules {', '.join(grant.rule for grant in covering)} grant"
                                f" {', '.join(grant.access.value for grant in covering)}")
        return self.refusal(Reason.STATE_NOT_GRANTED, "no grant of rules "
                            + ", ".join(grant.rule for grant in self.grants)
                            + " names this state")

    def allows(self, state: str, needed: Access, *, workspace: str | None = None,
               environment: str | None = None) -> bool:
        return self.check(state, needed, workspace=workspace, environment=environment) is None

    def refusal(self, reason: Reason, detail: str) -> Refusal:
        return Refusal(reason=reason, detail=detail, issuer=self.issuer, audit=self.audit)


Decision = Accepted | Refusal


def _rendered(rule: Rule, texts: Mapping[str, str]) -> GrantedAccess:
    grant = rule.grant
    return GrantedAccess(
        rule=rule.name, access=grant.access,
        states=tuple(render(state, texts) for state in grant.states),
        workspace=None if grant.workspace is None else render(grant.workspace, texts),
        environment=None if grant.environment is None else render(grant.environment, texts))


def _mismatch(rule: Rule, texts: Mapping[str, str]) -> str | None:
    for condition in rule.conditions:
        if condition.claim not in texts:
            return f"{condition.claim} missing"
        if not condition.holds(texts):
            return f"{condition.claim} did not match"
    return None


def decide(verified: VerifiedToken, policy: OidcPolicy) -> Decision:
    """The grants of every rule of C{policy} that C{verified} satisfies, or a
    C{no_rule_matched} refusal naming each rule and why it did not match."""
    issuer = verified.issuer
    texts = claim_texts(verified.claims)
    audit = audit_detail(issuer.url, verified.claims)
    grants: list[GrantedAccess] = []
    evaluated: list[tuple[str, str]] = []
    for rule in policy.rules_for(issuer):
        why = _mismatch(rule, texts)
        if why is None:
            try:
                grants.append(_rendered(rule, texts))
                continue
            except TemplateError as error:
                why = f"grant template: {error}"
        evaluated.append((rule.name, why))
    if not grants:
        return Refusal(reason=Reason.NO_RULE_MATCHED,
                       detail=f"none of the {len(evaluated)} rule(s) of issuer {issuer.name}"
                       " matched", issuer=issuer.url, rules_evaluated=tuple(evaluated),
                       audit=audit)
    return Accepted(principal=principal_name(issuer.name, verified.claims), issuer=issuer.url,
                    grants=tuple(grants), audit=audit, expires_at=verified.expires_at,
                    expired=verified.expired)


async def _evaluate(verifier: TokenVerifier, token: bytes | str, policy: OidcPolicy,
                    expiry_grace: float) -> Decision:
    try:
        verified = await verifier.verify(token, policy, expiry_grace=expiry_grace)
    except TokenRefused as refused:
        return Refusal(reason=refused.reason, detail=refused.detail, issuer=refused.issuer)
    return decide(verified, policy)


def evaluate(verifier: TokenVerifier, token: bytes | str, policy: OidcPolicy, *,
             expiry_grace: float = 0.0) -> Deferred[Decision]:
    """Verify C{token} and apply C{policy}'s rules.

    @return: a Deferred firing with L{Accepted} or L{Refusal} (never failing
        for a bad token)."""
    return ensureDeferred(_evaluate(verifier, token, policy, expiry_grace))
