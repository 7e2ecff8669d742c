"""Authentication with twisted.cred: one checker per mode, one realm.

Credentials come from the C{Authorization} header: Basic (Terraform's
C{username}/C{password}) or Bearer (OpenTofu's C{headers}).  The realm hands
back a L{Principal}: the tenant and the name recorded in the audit trail.

When the portal has a checker for L{IOidcToken} (a static mode with
C{--oidc-config}, and the database mode), a secret that is a CI job's OIDC
token (L{kilolock.auth.oidc.credential}) goes to it (L{kilolock.auth.oidc.checker});
every other secret to the mode's own checker.

A refused login says why (L{RefusedLogin}): the client gets one answer for
every bad credential, the access log the reason (C{missing_credentials},
C{malformed_credentials}, C{unknown_token}, C{revoked_token},
C{tenant_deleted}, C{oidc_...}).
"""

from __future__ import annotations

import base64
import hmac
from typing import Any

from attrs import field, frozen
from twisted.cred.checkers import ICredentialsChecker
from twisted.cred.credentials import (
    Anonymous,
    IAnonymous,
    ICredentials,
    IUsernamePassword,
    UsernamePassword,
)
from twisted.cred.error import LoginFailed, UnauthorizedLogin
from twisted.cred.portal import IRealm, Portal
from twisted.internet.defer import Deferred, ensureDeferred, fail, succeed
from zope.interface import Attribute, Interface, implementer

from kilolock.auth.oidc.credential import oidc_credential
from kilolock.core.errors import Denied, Unauthorized
from kilolock.core.model import DEFAULT_TENANT, Principal
from kilolock.rules import hosted
from kilolock.rules.hosted import ApiToken
from kilolock.store.interfaces.tenants import ITenantStore

#: What the client is told about any credential that is not accepted (the
#: reason goes to the access log only).
INVALID_CREDENTIALS = "missing or invalid credentials"

AUTH_MODES = ("open", "static", "database")


class IBearerToken(ICredentials):
    """A bearer token from C{Authorization: Bearer <token>}."""

    token = Attribute("the token, as bytes")


@implementer(IBearerToken)
@frozen
class BearerToken:
    token: bytes


class IOidcToken(ICredentials):
    """A CI job's OIDC token, as a Basic password or a Bearer token."""

    token = Attribute("the token, as bytes")
    username = Attribute("the Basic username (None for a Bearer token)")
    workspace = Attribute("the workspace id the request's state path names"
                          " (hosted mode; None otherwise)")


@implementer(IOidcToken)
@frozen
class OidcToken:
    token: bytes = field(repr=False)
    username: bytes | None = None
    workspace: str | None = None


class RefusedLogin(UnauthorizedLogin):
    """A login refused, as the error to answer (with its reason code)."""

    def __init__(self, error: Denied) -> None:
        super().__init__(error.message)
        self.error = error


def refused(reason: str) -> RefusedLogin:
    """The refusal of a credential: 401, the one message, C{reason} logged."""
    return RefusedLogin(Unauthorized(INVALID_CREDENTIALS, reason=reason))


class IPrincipal(Interface):
    """The avatar interface: a L{Principal}."""


@implementer(ICredentials)
class UnusableCredentials:
    """An C{Authorization} header that is malformed or of an unsupported
    scheme: only the C{open} mode, which ignores credentials, lets it in."""


def credentials_from_header(header: bytes | None, *, oidc: bool = False,
                            workspace: str | None = None) -> ICredentials:
    """Credentials from an C{Authorization} header value (or its absence).

    @param oidc: recognise CI tokens (L{OidcToken}, with C{workspace}).
    """
    if not header:
        return Anonymous()
    scheme, _, value = header.strip().partition(b" ")
    scheme = scheme.lower()
    value = value.strip()
    if scheme == b"basic":
        try:
            decoded = base64.b64decode(value, validate=True)
        except ValueError:
            return UnusableCredentials()
        username, separator, password = decoded.partition(b":")
        if not separator:
            return UnusableCredentials()
        found = oidc_credential(username, password) if oidc else None
        if found is not None:
            return OidcToken(found.token, found.username, workspace)
        return UsernamePassword(username, password)
    if scheme == b"bearer" and value:
        found = oidc_credential(None, value) if oidc else None
        if found is not None:
            return OidcToken(found.token, None, workspace)
        return BearerToken(value)
    return UnusableCredentials()


def presented_secret(credentials: ICredentials) -> bytes | None:
    if IUsernamePassword.providedBy(credentials):
        password: bytes = credentials.password
        return password
    if IBearerToken.providedBy(credentials):
        token: bytes = credentials.token
        return token
    return None


@implementer(ICredentialsChecker)
class OpenChecker:
    """C{KL_AUTH_MODE=open}: everyone is let in, as the default tenant."""

    credentialInterfaces = (ICredentials,)

    def requestAvatarId(self, credentials: ICredentials) -> Deferred[Principal]:  # type: ignore[override]
        return succeed(Principal(tenant=DEFAULT_TENANT, name="anonymous"))


@implementer(ICredentialsChecker)
class StaticTokenChecker:
    """C{KL_AUTH_MODE=static}: one shared token, as a Basic password or a Bearer
    token, compared in constant time.  Without one (C{None}: a server that
    only takes CI tokens) every secret is refused."""

    credentialInterfaces = (IAnonymous, IUsernamePassword, IBearerToken)

    def __init__(self, token: str | None) -> None:
        if token == "":
            raise ValueError("KL_AUTH_MODE=static needs KL_AUTH_TOKEN")
        self._token = None if token is None else token.encode()

    def requestAvatarId(self, credentials: ICredentials) -> Deferred[Principal]:  # type: ignore[override]
        secret = presented_secret(credentials)
        if secret is None:
            return fail(refused("missing_credentials"))
        if self._token is None or not hmac.compare_digest(secret, self._token):
            return fail(refused("unknown_token"))
        return succeed(Principal(tenant=DEFAULT_TENANT, name="static-token"))


@implementer(ICredentialsChecker)
class DatabaseTokenChecker:
    """C{KL_AUTH_MODE=database}: a tenant's API token (C{kl_...}), as a Basic
    password or a Bearer token, looked up by its SHA-256 in an
    L{ITenantStore} (which records its last use).

    Unknown, revoked and malformed tokens are refused alike (401).  The
    principal carries the token's tenant, workspace, environment and scope,
    and the Basic username, which the state lane compares with the token's
    workspace id (403 when they differ; see L{kilolock.rules.scope}).
    The lookup is by digest: the secret is never compared byte by byte, so
    timing reveals nothing about it.
    """

    credentialInterfaces = (IAnonymous, IUsernamePassword, IBearerToken)

    def __init__(self, store: ITenantStore) -> None:
        self._store = store

    def requestAvatarId(self, credentials: ICredentials) -> Deferred[Principal]:  # type: ignore[override]
        secret = presented_secret(credentials)
        if secret is None:
            return fail(refused("missing_credentials"))
        if not hosted.looks_like_secret(secret):
            return fail(refused("unknown_token"))
        username = None
        if IUsernamePassword.providedBy(credentials):
            username = credentials.username.decode("utf-8", "replace")
        digest = hosted.token_hash(secret)

        async def principal() -> Principal:
            token: ApiToken | None = await self._store.authenticate_token(digest)
            if token is None:
                # Only on a refusal: why (unknown, revoked, tenant deleted).
                raise refused(await self._store.refused_token_reason(digest))
            return Principal(tenant=token.tenant_id, name=f"token:{token.name}",
                             scope=token.scope, workspace_id=token.workspace_id,
                             env_public_id=token.env_public_id, token_id=token.id,
                             basic_username=username)

        return ensureDeferred(principal())


@implementer(IRealm)
class PrincipalRealm:
    """Checkers already resolve the principal; the realm hands it over."""

    def requestAvatar(self, avatarId: Any, mind: Any, *interfaces: Any) -> Any:
        if IPrincipal not in interfaces:
            raise NotImplementedError("only IPrincipal avatars")
        return IPrincipal, avatarId, lambda: None


def build_portal(*checkers: ICredentialsChecker) -> Portal:
    """The portal of a mode's checker, and the L{IOidcToken} checker where
    CI tokens are accepted."""
    return Portal(PrincipalRealm(), list(checkers))


async def authenticate(portal: Portal, authorization: bytes | None, *,
                       workspace: str | None = None) -> Principal:
    """The principal behind an C{Authorization} header.

    @param workspace: the workspace id the request's state path names (a
        CI token's tenant, in hosted mode).
    @raise Unauthorized: when credentials are missing, unknown or revoked
        (with the reason); L{kilolock.core.errors.Denied} (401 or 403) for a CI
        token that is refused.
    """
    oidc = IOidcToken in portal.listCredentialsInterfaces()
    credentials = credentials_from_header(authorization, oidc=oidc, workspace=workspace)
    try:
        _, principal, _ = await portal.login(credentials, None, IPrincipal)
    except RefusedLogin as refusal:
        raise refusal.error from None
    except LoginFailed:  # no checker takes credentials of this kind
        raise Unauthorized(INVALID_CREDENTIALS, reason="malformed_credentials") from None
    assert isinstance(principal, Principal)
    return principal
