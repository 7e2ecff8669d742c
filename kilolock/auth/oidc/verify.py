"""Verifying a CI token: signature, issuer, audience, subject and time.

The checks, in order (each failure is a L{TokenRefused} with its L{Reason}):

1. shape: a compact JWS of at most L{MAX_TOKEN} bytes, JSON header and
   payload, no C{crit} header;
2. issuer: the unverified C{iss} must be exactly the URL of an issuer the
   tenant's policy trusts (a token of another tenant's issuer stops here,
   before any key is fetched);
3. algorithm: the header's C{alg} must be RS256 or ES256; C{none} and the
   HMAC algorithms never reach a key, so an HS256 token "signed" with the
   issuer's public key is refused outright;
4. key: the issuer's key with the header's C{kid} and that algorithm (see
   L{kilolock.auth.oidc.keys}); header parameters that point at keys (C{jku},
   C{x5u}, C{jwk}) are ignored;
5. signature, then C{iss} (exact), C{aud} (must contain the issuer's
   audience), and the presence of C{sub}, C{exp} and C{iat} (by PyJWT);
6. time, from the injected clock, with the issuer's leeway (at most 60 s):
   C{exp} not passed, C{nbf} (if present) reached, C{iat} not in the future,
   and C{exp - iat} within the issuer's maximum lifetime.
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Mapping
from typing import Any

import jwt
from attrs import frozen
from twisted.internet.defer import Deferred, ensureDeferred
from twisted.internet.interfaces import IReactorTime

from kilolock.auth.oidc.keys import KeyRegistry, describe_kid
from kilolock.auth.oidc.policy import ALLOWED_ALGORITHMS, OidcPolicy, TrustedIssuer
from kilolock.auth.oidc.refusal import Reason, TokenRefused

#: The largest token read (CI tokens are 1-2 KiB).
MAX_TOKEN = 16 * 1024
#: Claims every accepted token has.
REQUIRED_CLAIMS = ("iss", "aud", "sub", "exp", "iat")
_BASE64URL = re.compile(rb"[A-Za-z0-9_-]*")


@frozen
class VerifiedToken:
    """A token whose signature and claims were verified.

    @ivar expired: True only when the caller allowed an expiry grace (see
        L{TokenVerifier.verify}) and the token is past C{exp}: such a token
        may only finish locked work (L{kilolock.auth.oidc.grace}).
    """

    issuer: TrustedIssuer
    claims: Mapping[str, Any]
    algorithm: str
    kid: str | None
    expired: bool = False

    @property
    def expires_at(self) -> float:
        return float(self.claims["exp"])


def _json_segment(segment: bytes) -> dict[str, Any]:
    """A base64url segment of a compact JWS holding a JSON object."""
    if not _BASE64URL.fullmatch(segment) or len(segment) % 4 == 1:
        raise ValueError("not base64url")
    document = json.loads(base64.urlsafe_b64decode(segment + b"=" * (-len(segment) % 4)))
    if not isinstance(document, dict):
        raise ValueError("not a JSON object")
    return document


def _unverified(token: bytes) -> tuple[dict[str, Any], dict[str, Any]]:
    """The header and payload, to find the issuer, the algorithm and the key:
    decoded once here (PyJWT checks every character of a segment in Python,
    about a millisecond per pass on a CI token) and strictly again, with the
    signature, by PyJWT."""
    if len(token) > MAX_TOKEN:
        raise TokenRefused(Reason.MALFORMED, f"longer than {MAX_TOKEN} bytes")
    try:
        header_segment, payload_segment, _ = token.split(b".")
        header, payload = _json_segment(header_segment), _json_segment(payload_segment)
    except (ValueError, RecursionError):  # binascii.Error and JSONDecodeError are ValueErrors
        raise TokenRefused(Reason.MALFORMED, "not a JWT with a JSON header and payload") from None
    if "crit" in header:
        raise TokenRefused(Reason.MALFORMED, "has critical header extensions")
    return header, payload


def _number(claims: Mapping[str, Any], name: str) -> float:
    value = claims.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TokenRefused(Reason.INVALID_CLAIM, f"{name} is not a number")
    return float(value)


def _refusal(error: jwt.InvalidTokenError, issuer: TrustedIssuer,
             kid: str | None) -> TokenRefused:
    """The refusal for what PyJWT found (it checks the signature first)."""
    if isinstance(error, jwt.InvalidSignatureError):
        return TokenRefused(Reason.BAD_SIGNATURE, f"does not verify with {describe_kid(kid)}")
    if isinstance(error, jwt.MissingRequiredClaimError):
        return TokenRefused(Reason.MISSING_CLAIM, error.claim)
    if isinstance(error, jwt.InvalidAudienceError):
        return TokenRefused(Reason.WRONG_AUDIENCE,
                            f"aud does not contain {issuer.audience!r}")
    if isinstance(error, jwt.InvalidIssuerError):
        return TokenRefused(Reason.WRONG_ISSUER, "iss is not exactly the issuer's URL")
    if isinstance(error, jwt.InvalidAlgorithmError):
        return TokenRefused(Reason.ALGORITHM_NOT_ALLOWED, "alg does not match the key")
    if isinstance(error, jwt.DecodeError):
        return TokenRefused(Reason.MALFORMED, "the signature or a segment does not decode")
    return TokenRefused(Reason.INVALID_CLAIM, type(error).__name__)


def _check_time(issuer: TrustedIssuer, claims: Mapping[str, Any], now: float,
                grace: float) -> bool:
    """Raise unless the token is within its time bounds; return whether it
    is expired (only possible within C{grace})."""
    expires, issued = _number(claims, "exp"), _number(claims, "iat")
    leeway = issuer.leeway
    if issued > now + leeway:
        raise TokenRefused(Reason.ISSUED_IN_FUTURE, f"iat is {issued - now:.0f} s ahead")
    if "nbf" in claims and _number(claims, "nbf") > now + leeway:
        raise TokenRefused(Reason.NOT_YET_VALID, f"nbf is {_number(claims, 'nbf') - now:.0f} s"
                           " ahead")
    if expires - issued > issuer.max_lifetime:
        raise TokenRefused(Reason.LIFETIME_TOO_LONG, f"valid for {expires - issued:.0f} s"
                           f" (at most {issuer.max_lifetime} s)")
    if now < expires + leeway:
        return False
    if now < expires + leeway + grace:
        return True
    raise TokenRefused(Reason.EXPIRED, f"expired {now - expires:.0f} s ago")


class TokenVerifier:
    """Verifies tokens against a tenant's policy, with keys from a shared
    L{KeyRegistry} and time from C{clock}."""

    def __init__(self, keys: KeyRegistry, clock: IReactorTime) -> None:
        self.keys = keys
        self.clock = clock

    def verify(self, token: bytes | str, policy: OidcPolicy, *,
               expiry_grace: float = 0.0) -> Deferred[VerifiedToken]:
        """Verify C{token} against the issuers C{policy} trusts.

        @param expiry_grace: seconds past C{exp} (and the leeway) during
            which the token is still returned, marked C{expired}: only for
            finishing locked work.
        @return: a Deferred firing with the L{VerifiedToken}, or failing with
            L{TokenRefused}."""
        raw = token.encode("ascii", "replace") if isinstance(token, str) else token
        return ensureDeferred(self._verify(raw, policy, expiry_grace))

    async def _verify(self, token: bytes, policy: OidcPolicy, grace: float) -> VerifiedToken:
        header, unverified = _unverified(token)
        iss = unverified.get("iss")
        if not isinstance(iss, str):
            raise TokenRefused(Reason.MISSING_CLAIM, "iss")
        issuer = policy.issuer_for(iss)
        if issuer is None:
            raise TokenRefused(Reason.WRONG_ISSUER, "the issuer is not trusted by this tenant")
        try:
            return await self._verify_from(issuer, token, header, grace)
        except TokenRefused as refused:
            refused.issuer = issuer.url
            raise

    async def _verify_from(self, issuer: TrustedIssuer, token: bytes, header: dict[str, Any],
                           grace: float) -> VerifiedToken:
        algorithm = header.get("alg")
        if not isinstance(algorithm, str) or algorithm not in ALLOWED_ALGORITHMS:
            raise TokenRefused(Reason.ALGORITHM_NOT_ALLOWED,
                               f"alg must be one of {', '.join(ALLOWED_ALGORITHMS)}")
        kid = header.get("kid")
        if kid is not None and not isinstance(kid, str):
            raise TokenRefused(Reason.MALFORMED, "kid is not a string")
        key = await self.keys.source_for(issuer).key_for(kid, algorithm)
        try:
            claims = jwt.decode(
                token, key.public_key, algorithms=[key.algorithm], audience=issuer.audience,
                issuer=issuer.url, options={"verify_exp": False, "verify_nbf": False,
                                            "verify_iat": False, "require": list(REQUIRED_CLAIMS)})
        except jwt.InvalidTokenError as error:
            raise _refusal(error, issuer, kid) from None
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject:
            raise TokenRefused(Reason.INVALID_CLAIM, "sub is not a non-empty string")
        expired = _check_time(issuer, claims, self.clock.seconds(), grace)
        return VerifiedToken(issuer=issuer, claims=claims, algorithm=key.algorithm, kid=kid,
                             expired=expired)
