"""Why a CI token was refused: reason codes for logs and diagnosis.

A refusal names the check that failed and, where it helps, a short detail
(the claim that was missing, the key id that is unknown).  Neither ever holds
the token, and a detail never holds a claim value from a token whose
signature was not verified.
"""

from __future__ import annotations

import enum


class Reason(enum.StrEnum):
    """The check a token failed, in the order the checks run."""

    #: Not a compact JWS with a JSON header and payload, too large, or with
    #: a critical header extension Kilolock does not understand.
    MALFORMED = "malformed"
    #: The C{iss} claim names no issuer this tenant trusts.
    WRONG_ISSUER = "wrong_issuer"
    #: The header's C{alg} is not RS256 or ES256 (C{none} and HMAC never are).
    ALGORITHM_NOT_ALLOWED = "algorithm_not_allowed"
    #: No key of the issuer has the token's C{kid} (after a refetch, if the
    #: refetch rate allowed one).
    UNKNOWN_KEY = "unknown_key"
    #: The issuer's keys were never fetched successfully.
    KEYS_UNAVAILABLE = "keys_unavailable"
    #: The signature does not verify with the issuer's key.
    BAD_SIGNATURE = "bad_signature"
    #: The C{aud} claim does not contain the audience this issuer requires.
    WRONG_AUDIENCE = "wrong_audience"
    #: A required claim (C{iss}, C{aud}, C{sub}, C{exp}, C{iat}) is missing.
    MISSING_CLAIM = "missing_claim"
    #: A registered claim has the wrong type (a string C{exp}, an empty C{sub}).
    INVALID_CLAIM = "invalid_claim"
    #: C{exp} has passed (beyond the leeway).
    EXPIRED = "expired"
    #: C{nbf} is still in the future (beyond the leeway).
    NOT_YET_VALID = "not_yet_valid"
    #: C{iat} is in the future (beyond the leeway).
    ISSUED_IN_FUTURE = "issued_in_future"
    #: C{exp - iat} is longer than the issuer's configured maximum.
    LIFETIME_TOO_LONG = "lifetime_too_long"
    #: The token is valid but no rule of the tenant matches its claims.
    NO_RULE_MATCHED = "no_rule_matched"
    #: A rule matched, but its grant does not cover the state asked for.
    STATE_NOT_GRANTED = "state_not_granted"
    #: A rule matched and covers the state, but only for reading.
    READ_ONLY = "read_only"
    #: An expired token was used for something other than finishing the
    #: locked work it started (see L{kilolock.auth.oidc.grace}).
    LOCK_GRACE_DENIED = "lock_grace_denied"


#: Reasons that mean "who are you?" (401); the others mean "not allowed" (403).
UNAUTHENTICATED = frozenset(Reason) - {
    Reason.NO_RULE_MATCHED, Reason.STATE_NOT_GRANTED, Reason.READ_ONLY}


class TokenRefused(Exception):
    """A token failed a check.

    @ivar reason: the L{Reason}.
    @ivar detail: a short explanation that is safe to log (never the token,
        never an unverified claim value).
    @ivar issuer: the URL of the trusted issuer the token named, once known.
    """

    def __init__(self, reason: Reason, detail: str = "", issuer: str | None = None) -> None:
        super().__init__(f"{reason.value}: {detail}" if detail else reason.value)
        self.reason = reason
        self.detail = detail
        self.issuer = issuer
