"""JSON Web Key Sets to verification keys.

Only keys that can verify an allowed algorithm are kept: RSA keys of at
least 2048 bits (RS256) and EC keys on P-256 (ES256).  Symmetric (C{oct})
keys, other curves, encryption keys (C{use: enc}) and keys whose C{alg}
names another algorithm are skipped, so a JWKS can never turn an HMAC
secret or a weak key into a verification key.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

from attrs import frozen
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm

from kilolock.auth.oidc.policy import ALLOWED_ALGORITHMS

#: The smallest RSA modulus accepted, in bits.
MIN_RSA_BITS = 2048
#: The most keys read from one set (issuers publish a handful).
MAX_KEYS = 64

PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey


class JWKSError(ValueError):
    """A document is not a JSON Web Key Set with a usable key."""


@frozen
class VerificationKey:
    """One public key, the algorithm it verifies, and its C{kid} (if any)."""

    kid: str | None
    algorithm: str
    public_key: PublicKey


@frozen
class KeySet:
    """The usable keys of one JWKS document."""

    keys: tuple[VerificationKey, ...]

    def __iter__(self) -> Iterator[VerificationKey]:
        return iter(self.keys)

    def find(self, kid: str | None, algorithm: str) -> VerificationKey | None:
        """The key with this C{kid} that verifies C{algorithm}.  Without a
        C{kid}, the only key for the algorithm, if there is exactly one."""
        if kid is None:
            candidates = [key for key in self.keys if key.algorithm == algorithm]
            return candidates[0] if len(candidates) == 1 else None
        for key in self.keys:
            if key.kid == kid and key.algorithm == algorithm:
                return key
        return None

    @property
    def kids(self) -> frozenset[str]:
        return frozenset(key.kid for key in self.keys if key.kid is not None)


def _algorithm_for(jwk: Mapping[str, Any]) -> str | None:
    kty = jwk.get("kty")
    if kty == "RSA":
        algorithm = "RS256"
    elif kty == "EC" and jwk.get("crv") == "P-256":
        algorithm = "ES256"
    else:
        return None
    if jwk.get("alg", algorithm) != algorithm or jwk.get("use", "sig") != "sig":
        return None
    return algorithm


def verification_key(jwk: Mapping[str, Any]) -> VerificationKey | None:
    """The verification key of one JWK, or None when it is unusable."""
    algorithm = _algorithm_for(jwk)
    kid = jwk.get("kid")
    if algorithm is None or algorithm not in ALLOWED_ALGORITHMS or not (
            kid is None or isinstance(kid, str)):
        return None
    text = json.dumps(dict(jwk))
    key: object
    try:
        key = (RSAAlgorithm if algorithm == "RS256" else ECAlgorithm).from_jwk(text)
    except Exception:  # PyJWT raises InvalidKeyError, ValueError or TypeError alike
        return None
    if isinstance(key, rsa.RSAPublicKey) and key.key_size >= MIN_RSA_BITS:
        return VerificationKey(kid=kid, algorithm=algorithm, public_key=key)
    if isinstance(key, ec.EllipticCurvePublicKey) and isinstance(key.curve, ec.SECP256R1):
        return VerificationKey(kid=kid, algorithm=algorithm, public_key=key)
    return None  # a private key, a short RSA key or another curve


def parse_jwks(document: object) -> KeySet:
    """The usable keys of a JWKS document (an object with a C{keys} list).

    @raise JWKSError: not a JWKS, more than L{MAX_KEYS} keys, or no usable key."""
    if not isinstance(document, Mapping) or not isinstance(document.get("keys"), list):
        raise JWKSError("is not a JSON Web Key Set (an object with a \"keys\" list)")
    entries = document["keys"]
    if len(entries) > MAX_KEYS:
        raise JWKSError(f"has {len(entries)} keys (at most {MAX_KEYS})")
    keys = tuple(key for key in (verification_key(entry) for entry in entries
                                 if isinstance(entry, Mapping)) if key is not None)
    if not keys:
        raise JWKSError("has no usable key (RSA of 2048 bits or more for RS256,"
                        " EC P-256 for ES256, with use \"sig\")")
    return KeySet(keys)


def parse_jwks_text(text: str | bytes) -> KeySet:
    """L{parse_jwks} of a JSON text.

    @raise JWKSError: not JSON, or see L{parse_jwks}."""
    try:
        document = json.loads(text)
    except (ValueError, UnicodeDecodeError):
        raise JWKSError("is not valid JSON") from None
    return parse_jwks(document)
