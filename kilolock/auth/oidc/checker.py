"""Logging in with a CI job's OIDC token: the twisted.cred checker and where
each tenant's policy comes from.

L{OidcChecker} takes the L{IOidcToken} credentials that
L{kilolock.auth.portal.credentials_from_header} recognises, asks its policy source
for the tenant and its policy, verifies the token and applies the rules
(L{kilolock.auth.oidc.decision.evaluate}, with the lock grace), and hands back a
L{Principal} carrying an L{OidcAccess}.  A refused token is a
L{RefusedLogin} whose error names the reason and carries the refusal's log
fields (issuer, rules evaluated, the verified token's identity; never the
token).

Where the policy comes from:

  - L{StaticPolicySource}: the static mode's file (C{--oidc-config}): one
    policy, the default tenant, states addressed by their whole path;
  - L{HostedPolicySource}: the database mode: the tenant owning the
    workspace that the request's state path names (or the Basic username,
    for a request that names no state), with the policy set through the
    control API.  Its grants' workspaces and environments are resolved to
    ids (L{kilolock.auth.oidc.places}).
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from typing import Any

from attrs import frozen
from twisted.cred.checkers import ICredentialsChecker
from twisted.internet.defer import Deferred, ensureDeferred, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from zope.interface import Interface, implementer

from kilolock.auth.oidc.access import OidcAccess, denial
from kilolock.auth.oidc.decision import Refusal, evaluate
from kilolock.auth.oidc.fetch import HTTPGetter, http_client
from kilolock.auth.oidc.grace import token_digest
from kilolock.auth.oidc.keys import KeyRegistry
from kilolock.auth.oidc.model import OidcTenant
from kilolock.auth.oidc.places import resolve_places
from kilolock.auth.oidc.policy import OidcPolicy
from kilolock.auth.oidc.validation import PolicyError, validate_policy
from kilolock.auth.oidc.verify import TokenVerifier
from kilolock.auth.portal import IOidcToken, OidcToken, RefusedLogin
from kilolock.core.errors import Forbidden, Unauthorized
from kilolock.core.model import DEFAULT_TENANT, Principal
from kilolock.rules import hosted
from kilolock.store.interfaces.oidc import IOidcPolicyStore

log = Logger(namespace="kilolock.auth.oidc")

#: Validated policies kept per tenant store (by the SHA-256 of their text).
POLICY_CACHE_SIZE = 256


@frozen
class TenantPolicy:
    """The tenant a CI token logs in to, and what its rules need."""

    tenant: str
    policy: OidcPolicy
    #: States are C{workspace/environment/name} (the database mode).
    hosted: bool = False
    workspaces: tuple[tuple[str, str], ...] = ()
    environments: tuple[tuple[str, str, str], ...] = ()


class IOidcPolicySource(Interface):
    """Where the policy a CI token is checked against comes from."""

    def tenant_policy(credentials: OidcToken) -> Deferred[TenantPolicy]:
        """@return: a Deferred firing with the L{TenantPolicy}, or failing
        with L{RefusedLogin} (the token names no tenant this server knows)."""


@implementer(IOidcPolicySource)
class StaticPolicySource:
    """The static mode: one policy (from C{--oidc-config}), the default tenant."""

    def __init__(self, policy: OidcPolicy) -> None:
        self.policy = policy

    def tenant_policy(self, credentials: OidcToken) -> Deferred[TenantPolicy]:
        return succeed(TenantPolicy(DEFAULT_TENANT, self.policy))


def _refused(reason: str, message: str, status: int = 401) -> RefusedLogin:
    error = Unauthorized if status == 401 else Forbidden
    return RefusedLogin(error(message, reason=reason))


@implementer(IOidcPolicySource)
class HostedPolicySource:
    """The database mode: the policy of the tenant that owns the workspace
    the request names, from C{store} (an L{IOidcPolicyStore})."""

    def __init__(self, store: IOidcPolicyStore) -> None:
        self.store = store
        self._validated: OrderedDict[str, OidcPolicy] = OrderedDict()

    def tenant_policy(self, credentials: OidcToken) -> Deferred[TenantPolicy]:
        return ensureDeferred(self._tenant_policy(credentials))

    async def _tenant_policy(self, credentials: OidcToken) -> TenantPolicy:
        workspace = credentials.workspace
        username = (credentials.username or b"").decode("utf-8", "replace")
        if hosted.is_public_id(username, hosted.WORKSPACE_PREFIX):
            if workspace is not None and workspace != username:
                raise _refused("wrong_basic_username", "the Basic username must be the"
                               " workspace id of the state's path (or oidc)", 403)
            workspace = username
        if workspace is None or not hosted.is_public_id(workspace, hosted.WORKSPACE_PREFIX):
            raise _refused("oidc_no_workspace", "an OIDC token needs the workspace: address"
                           " the state as /{workspace_id}/{env_public_id}/{state_name}, or"
                           " send the workspace id as the Basic username")
        found: OidcTenant | None = await self.store.oidc_tenant_of_workspace(workspace)
        if found is None:
            raise _refused("oidc_unknown_workspace", "no such workspace")
        return TenantPolicy(
            found.tenant_id, self._policy(found.tenant_id, found.document), hosted=True,
            workspaces=tuple((w.id, w.name) for w in found.workspaces),
            environments=tuple((e.id, e.workspace_id, e.name) for e in found.environments))

    def _policy(self, tenant: str, document: str | None) -> OidcPolicy:
        """The validated policy of a stored document (validated once per
        text: kept by its SHA-256).  A document that no longer validates
        (a stricter Kilolock) trusts nothing, and says so in the log."""
        if document is None:
            return OidcPolicy()
        digest = hashlib.sha256(document.encode()).hexdigest()
        policy = self._validated.get(digest)
        if policy is not None:
            self._validated.move_to_end(digest)
            return policy
        try:
            policy = validate_policy(json.loads(document), allow_local_files=False)
        except (ValueError, PolicyError) as error:
            log.error("the stored OIDC policy of tenant {tenant} is not valid ({problem});"
                      " it trusts no issuer until it is set again", tenant=tenant,
                      problem=str(error)[:500])
            policy = OidcPolicy()
        self._validated[digest] = policy
        while len(self._validated) > POLICY_CACHE_SIZE:
            self._validated.popitem(last=False)
        return policy


@implementer(ICredentialsChecker)
class OidcChecker:
    """CI tokens: verified against the tenant's trusted issuers, mapped to
    grants by its rules.  C{grace}: seconds after C{exp} during which a
    token may still finish the work it locked (L{kilolock.auth.oidc.grace})."""

    credentialInterfaces = (IOidcToken,)

    def __init__(self, source: IOidcPolicySource, verifier: TokenVerifier,
                 grace: float) -> None:
        self.source = source
        self.verifier = verifier
        self.grace = grace

    def requestAvatarId(self, credentials: OidcToken) -> Deferred[Principal]:  # type: ignore[override]
        return ensureDeferred(self._login(credentials))

    async def _login(self, credentials: OidcToken) -> Principal:
        tenant = await self.source.tenant_policy(credentials)
        decision = await evaluate(self.verifier, credentials.token, tenant.policy,
                                  expiry_grace=self.grace)
        if isinstance(decision, Refusal):
            raise RefusedLogin(denial(decision))
        if tenant.hosted:
            decision = resolve_places(decision, tenant.workspaces, tenant.environments)
        username = credentials.username
        return Principal(
            tenant=tenant.tenant, name=decision.principal,
            basic_username=None if username is None else username.decode("utf-8", "replace"),
            oidc=OidcAccess(decision, token_digest(credentials.token), tenant.hosted))


def oidc_checker(source: IOidcPolicySource, reactor: Any, grace: float,
                 clock: IReactorTime | None = None) -> OidcChecker:
    """The checker a server runs: one L{KeyRegistry} (keys cached per issuer,
    shared by every tenant) and one L{TokenVerifier}, both on C{clock} (the
    time tokens are verified at and keys cached by: C{reactor} when None);
    keys are fetched with C{reactor}."""
    if clock is None:
        clock = reactor
    clients: dict[str | None, HTTPGetter] = {}

    def http_for(ca_pem: str | None) -> HTTPGetter:
        if ca_pem not in clients:
            clients[ca_pem] = http_client(reactor, ca_pem)  # type: ignore[assignment]
        return clients[ca_pem]

    return OidcChecker(source, TokenVerifier(KeyRegistry(clock, http_for), clock), grace)
