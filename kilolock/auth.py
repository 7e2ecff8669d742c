"""Authentication with twisted.cred: one checker per mode, one realm.

Credentials come from the C{Authorization} header: Basic (Terraform's
C{username}/C{password}) or Bearer (OpenTofu's C{headers}).  The realm hands
back a L{Principal}: the tenant and the name recorded in the audit trail.
"""

from __future__ import annotations

import base64
import hmac
from typing import Any

from attrs import frozen
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
from twisted.internet.defer import Deferred, fail, succeed
from zope.interface import Attribute, Interface, implementer

from kilolock import hosted
from kilolock.errors import Unauthorized
from kilolock.interfaces import ITenantStore
from kilolock.model import DEFAULT_TENANT, ApiToken, Principal

AUTH_MODES = ("open", "static", "database")


class IBearerToken(ICredentials):
    """A bearer token from C{Authorization: Bearer <token>}."""

    token = Attribute("the token, as bytes")


@implementer(IBearerToken)
@frozen
class BearerToken:
    token: bytes


class IPrincipal(Interface):
    """The avatar interface: a L{Principal}."""


@implementer(ICredentials)
class UnusableCredentials:
    """An C{Authorization} header that is malformed or of an unsupported
    scheme: only the C{open} mode, which ignores credentials, lets it in."""


def credentials_from_header(header: bytes | None) -> ICredentials:
    """Credentials from an C{Authorization} header value (or its absence)."""
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
        return UsernamePassword(username, password)
    if scheme == b"bearer" and value:
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
    token, compared in constant time."""

    credentialInterfaces = (IAnonymous, IUsernamePassword, IBearerToken)

    def __init__(self, token: str) -> None:
        if not token:
            raise ValueError("KL_AUTH_MODE=static needs KL_AUTH_TOKEN")
        self._token = token.encode()

    def requestAvatarId(self, credentials: ICredentials) -> Deferred[Principal]:  # type: ignore[override]
        secret = presented_secret(credentials)
        if secret is None or not hmac.compare_digest(secret, self._token):
            return fail(UnauthorizedLogin())
        return succeed(Principal(tenant=DEFAULT_TENANT, name="static-token"))


@implementer(ICredentialsChecker)
class DatabaseTokenChecker:
    """C{KL_AUTH_MODE=database}: a tenant's API token (C{kl_...}), as a Basic
    password or a Bearer token, looked up by its SHA-256 in an
    L{ITenantStore} (which records its last use).

    Unknown, revoked and malformed tokens are refused alike (401).  The
    principal carries the token's tenant, workspace, environment and scope,
    and the Basic username, which the state lane compares with the token's
    workspace id (403 when they differ; see L{kilolock.scope}).
    The lookup is by digest: the secret is never compared byte by byte, so
    timing reveals nothing about it.
    """

    credentialInterfaces = (IAnonymous, IUsernamePassword, IBearerToken)

    def __init__(self, store: ITenantStore) -> None:
        self._store = store

    def requestAvatarId(self, credentials: ICredentials) -> Deferred[Principal]:  # type: ignore[override]
        secret = presented_secret(credentials)
        if secret is None or not hosted.looks_like_secret(secret):
            return fail(UnauthorizedLogin())
        username = None
        if IUsernamePassword.providedBy(credentials):
            username = credentials.username.decode("utf-8", "replace")

        def principal(token: ApiToken | None) -> Principal:
            if token is None:
                raise UnauthorizedLogin()
            return Principal(tenant=token.tenant_id, name=f"token:{token.name}",
                             scope=token.scope, workspace_id=token.workspace_id,
                             env_public_id=token.env_public_id, token_id=token.id,
                             basic_username=username)

        return self._store.authenticate_token(hosted.token_hash(secret)).addCallback(principal)


@implementer(IRealm)
class PrincipalRealm:
    """Checkers already resolve the principal; the realm hands it over."""

    def requestAvatar(self, avatarId: Any, mind: Any, *interfaces: Any) -> Any:
        if IPrincipal not in interfaces:
            raise NotImplementedError("only IPrincipal avatars")
        return IPrincipal, avatarId, lambda: None


def build_portal(checker: ICredentialsChecker) -> Portal:
    return Portal(PrincipalRealm(), [checker])


async def authenticate(portal: Portal, authorization: bytes | None) -> Principal:
    """The principal behind an C{Authorization} header.

    @raise Unauthorized: when credentials are missing, unknown or revoked.
    """
    credentials = credentials_from_header(authorization)
    try:
        _, principal, _ = await portal.login(credentials, None, IPrincipal)
    except LoginFailed:  # wrong, or no checker takes credentials of this kind
        raise Unauthorized("missing or invalid credentials") from None
    assert isinstance(principal, Principal)
    return principal
