"""Which presented secrets are CI tokens (pure: no verification here).

Terraform's http backend sends a Basic password; OpenTofu's C{headers} can
send C{Authorization: Bearer <token>}.  A secret goes to the OIDC verifier
when the Basic username is C{oidc}, or when it has the shape of a JWT (no
Kilolock token has: they are C{kl_} and base64url, without dots).  The
username is kept: in the hosted mode it may name a workspace.
"""

from __future__ import annotations

import re

from attrs import field, frozen

#: The Basic username that marks the password as a CI token.
OIDC_USERNAME = b"oidc"
#: The longest secret taken for a JWT (CI tokens are 1-2 KiB).
MAX_JWT = 16 * 1024
#: A compact JWS: base64url header (a JSON object, so it starts C{eyJ}),
#: payload and signature (empty for C{alg: none}, which is still routed to
#: the verifier so that it is refused and logged as such).
JWT_SHAPE = re.compile(rb"eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*")


def looks_like_jwt(secret: bytes) -> bool:
    """Whether C{secret} has the shape of a compact JWS (three base64url
    segments, the first a JSON object)."""
    return len(secret) <= MAX_JWT and JWT_SHAPE.fullmatch(secret) is not None


@frozen
class OidcCredential:
    """A secret to verify as a CI token, and the Basic username it came with
    (None for a Bearer token)."""

    token: bytes = field(repr=False)
    username: bytes | None = None


def oidc_credential(username: bytes | None, secret: bytes) -> OidcCredential | None:
    """The CI token among presented credentials, or None to let the other
    checkers have them.

    @param username: the Basic username, or None for a Bearer token.
    @param secret: the Basic password or the Bearer token."""
    if username == OIDC_USERNAME or looks_like_jwt(secret.strip()):
        return OidcCredential(token=secret.strip(), username=username)
    return None
