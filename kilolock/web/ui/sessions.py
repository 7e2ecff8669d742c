"""Browser sessions: a random secret in an C{HttpOnly}, C{SameSite=Strict}
cookie (C{Secure} under TLS), the session itself in the store.

Why in the store rather than a signed cookie: several Kilolock processes
share one database and must all know a session, sign-out must end it at
once everywhere (a signed cookie stays valid until it expires), and no
server secret has to be configured and shared.  The store keeps the SHA-256
of the cookie's secret, never the secret; and the SHA-256 of the token the
session signed in with, which every request checks again (L{CredentialCheck}):
revoking the token, or changing the static token, ends its sessions.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import UTC, datetime, timedelta
from typing import Any

from attrs import define, frozen
from twisted.internet.interfaces import IReactorTime
from twisted.web.server import Request

from kilolock.core.model import Principal, UiSession
from kilolock.store.interfaces.sessions import ISessionStore
from kilolock.store.interfaces.tenants import ITenantStore
from kilolock.web.request import KilolockRequest
from kilolock.web.ui import BASE_PATH

#: The cookie's name.
COOKIE = b"kl_ui"
#: How long a session lasts from sign-in (KL_UI_SESSION_SECONDS).
DEFAULT_SESSION_SECONDS = 8 * 3600


def digest(secret: bytes) -> str:
    return hashlib.sha256(secret).hexdigest()


@frozen
class CredentialCheck:
    """Whether the token a session signed in with still lets it in: in the
    C{static} mode it is still the static token; in the C{database} mode
    the token is live (not revoked, its tenant not deleted)."""

    auth_mode: str
    static_token: str = ""
    tenants: ITenantStore | None = None

    async def still_valid(self, session: UiSession) -> bool:
        """@return: (awaited) True while the session's credential is good."""
        if self.auth_mode == "open":
            return True
        if session.credential_digest is None:
            return False
        if self.auth_mode == "static":
            return hmac.compare_digest(session.credential_digest,
                                       digest(self.static_token.encode()))
        if self.tenants is None:
            return False
        token = await self.tenants.authenticate_token(session.credential_digest)
        return token is not None and token.id == session.principal.token_id


def is_secure(request: Request) -> bool:
    """Whether the browser reached us over TLS (directly, or through a
    trusted proxy that says so)."""
    if isinstance(request, KilolockRequest):
        return request.origin().scheme == "https"
    return bool(request.isSecure())


#: What an anonymous session's CSRF token is derived from, before its secret.
_ANONYMOUS_CSRF = b"kilolock-ui-anonymous-csrf:"


@define
class SessionKeeper:
    """Starts, finds and ends sessions; C{clock} says what time it is."""

    store: ISessionStore
    clock: IReactorTime
    credentials: CredentialCheck
    seconds: float = DEFAULT_SESSION_SECONDS

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.clock.seconds(), UTC)

    async def start(self, request: Request, principal: Principal,
                    credential: bytes | None) -> UiSession:
        """A new session for C{principal}, its cookie set on C{request}.

        @return: (awaited) the session, once stored."""
        secret = secrets.token_urlsafe(32)
        now = self.now()
        session = UiSession(
            id_hash=digest(secret.encode()),
            principal=Principal(tenant=principal.tenant, name=principal.name,
                                scope=principal.scope, workspace_id=principal.workspace_id,
                                env_public_id=principal.env_public_id,
                                token_id=principal.token_id),
            credential_digest=None if credential is None else digest(credential),
            csrf=secrets.token_urlsafe(24), created_at=now,
            expires_at=now + timedelta(seconds=self.seconds))
        await self.store.create_session(session)
        request.addCookie(COOKIE, secret.encode(), path=BASE_PATH, max_age=str(int(self.seconds)),
                          httpOnly=True, sameSite="strict", secure=is_secure(request))
        return session

    def anonymous(self, request: Request, principal: Principal) -> UiSession:
        """The open mode's session of C{principal}: kept in the browser's
        cookie alone, never stored (a visitor that keeps no cookie would
        otherwise add a stored session with every page it asks for).  Its
        CSRF token is derived from the cookie's secret, which other sites
        can neither read nor send (HttpOnly, SameSite=Strict); a request
        without the cookie gets a new secret in a new cookie."""
        secret = request.getCookie(COOKIE)
        now = self.now()
        if not secret:
            secret = secrets.token_urlsafe(32).encode()
            request.addCookie(COOKIE, secret, path=BASE_PATH, max_age=str(int(self.seconds)),
                              httpOnly=True, sameSite="strict", secure=is_secure(request))
        return UiSession(id_hash=digest(secret), principal=principal, credential_digest=None,
                         csrf=digest(_ANONYMOUS_CSRF + secret), created_at=now,
                         expires_at=now + timedelta(seconds=self.seconds))

    async def find(self, request: Request) -> UiSession | None:
        """@return: (awaited) the live session of the request's cookie, or
        None (no cookie, unknown, expired, or its credential no longer good)."""
        secret = request.getCookie(COOKIE)
        if not secret:
            return None
        id_hash = digest(secret)
        session = await self.store.find_session(id_hash, self.now())
        if session is None:
            return None
        if not await self.credentials.still_valid(session):
            await self.store.delete_session(id_hash)
            return None
        return session

    async def end(self, request: Request) -> None:
        """Forget the request's session and clear its cookie."""
        secret = request.getCookie(COOKIE)
        if secret:
            await self.store.delete_session(digest(secret))
        request.addCookie(COOKIE, b"", path=BASE_PATH, max_age="0", httpOnly=True,
                          sameSite="strict", secure=is_secure(request))


def same_token(expected: str, given: Any) -> bool:
    """A CSRF token check in constant time."""
    return isinstance(given, str) and hmac.compare_digest(expected.encode(), given.encode())
