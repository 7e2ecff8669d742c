"""AES-256-GCM over one version's compressed bytes, under its own data key.

Each version gets a fresh random 256-bit data key and a random 96-bit nonce;
the data key never leaves memory unwrapped.  All the cryptography is
C{cryptography}'s C{AESGCM}: nothing here is hand-written beyond the layout
of L{kilolock.atrest.envelope}.
"""

from __future__ import annotations

import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from kilolock.atrest.envelope import NONCE_BYTES, SealedPayload
from kilolock.atrest.errors import AuthenticationFailed
from kilolock.core.errors import PayloadTooLarge

DATA_KEY_BYTES = 32

#: The most AESGCM takes in one call (OpenSSL counts lengths in an int).
MAX_SEALED_BYTES = 2**31 - 1


def new_data_key() -> bytes:
    """A fresh random AES-256 key."""
    return AESGCM.generate_key(bit_length=DATA_KEY_BYTES * 8)


def seal(data_key: bytes, plaintext: bytes, associated: bytes) -> bytes:
    """The sealed payload (L{SealedPayload} bytes) of C{plaintext}.

    Raises L{PayloadTooLarge} for a payload of 2 GiB or more, which AES-GCM
    cannot take in one piece (compressed state never comes near it).
    """
    if len(plaintext) > MAX_SEALED_BYTES:
        raise PayloadTooLarge("the compressed state is too large to encrypt (2 GiB or more)")
    nonce = os.urandom(NONCE_BYTES)
    return SealedPayload(nonce, AESGCM(data_key).encrypt(nonce, plaintext, associated)).to_bytes()


def open_sealed(data_key: bytes, sealed: bytes, associated: bytes) -> bytes:
    """The plaintext of a sealed payload; L{AuthenticationFailed} when the
    payload, its associated data or the data key is not the one it was
    sealed with; L{kilolock.atrest.errors.CorruptVersion} when it is too
    short to be a sealed payload."""
    payload = SealedPayload.from_bytes(sealed)
    try:
        return AESGCM(data_key).decrypt(payload.nonce, payload.ciphertext, associated)
    except InvalidTag:
        raise AuthenticationFailed(
            "the stored version failed authentication: it was altered, copied from"
            " another row, or sealed under another data key") from None
