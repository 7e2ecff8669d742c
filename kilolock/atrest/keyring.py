"""Key-encryption keys held in memory: the engine of the key file provider.

A L{KeyRing} wraps data keys with AES-256-GCM under its active KEK (the KEK's
id is the associated data, so a wrapped key cannot be passed off as wrapped
by another KEK) and unwraps them under whichever of its KEKs a wrapped key
names.  It is synchronous: the offline recovery uses it directly, and
L{LocalKeyProvider} offers it to the server as an L{IKeyProvider}.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

from attrs import field, frozen
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from twisted.internet.defer import Deferred, maybeDeferred
from zope.interface import implementer

from kilolock.atrest.envelope import NONCE_BYTES, DataKey, WrappedKey
from kilolock.atrest.errors import KeyUnwrapFailed, UnknownKey
from kilolock.atrest.interfaces import IKeyProvider
from kilolock.atrest.sealing import DATA_KEY_BYTES, new_data_key

KEK_BYTES = 32
_WRAP_CONTEXT = b"kilolock data key\x00"


@frozen
class KeyEncryptionKey:
    """One KEK: its id and its 32 secret bytes (never shown by repr)."""

    key_id: str
    secret: bytes = field(repr=False)


class KeyRing:
    """Several KEKs by id, one of them active; checked once, when built."""

    def __init__(self, keys: Iterable[KeyEncryptionKey], active: str) -> None:
        self._keys: dict[str, AESGCM] = {}
        for key in keys:
            if key.key_id in self._keys:
                raise ValueError(f"two keys have the id {key.key_id!r}")
            if len(key.secret) != KEK_BYTES:
                raise ValueError(f"key {key.key_id!r} is not {KEK_BYTES} bytes long")
            self._keys[key.key_id] = AESGCM(key.secret)
        if active not in self._keys:
            raise ValueError(f"the active key {active!r} is not one of the keys")
        self.active_key_id = active

    def key_ids(self) -> list[str]:
        return list(self._keys)

    def wrap(self, data_key: bytes) -> WrappedKey:
        """C{data_key} wrapped under the active KEK."""
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._keys[self.active_key_id].encrypt(
            nonce, data_key, _WRAP_CONTEXT + self.active_key_id.encode("ascii"))
        return WrappedKey(self.active_key_id, nonce + sealed)

    def unwrap(self, wrapped: WrappedKey) -> bytes:
        """The data key in C{wrapped}: L{UnknownKey} when no KEK has its id,
        L{KeyUnwrapFailed} when that KEK does not open it."""
        kek = self._keys.get(wrapped.key_id)
        if kek is None:
            raise UnknownKey(wrapped.key_id)
        nonce, sealed = wrapped.wrapped[:NONCE_BYTES], wrapped.wrapped[NONCE_BYTES:]
        try:
            data_key = kek.decrypt(nonce, sealed, _WRAP_CONTEXT + wrapped.key_id.encode("ascii"))
        except (InvalidTag, ValueError):
            data_key = b""
        if len(data_key) != DATA_KEY_BYTES:
            raise KeyUnwrapFailed(
                f"the key-encryption key {wrapped.key_id!r} does not open this data key:"
                " the key file holds other key material under that id, or the row was altered")
        return data_key

    def rewrap(self, wrapped: WrappedKey) -> WrappedKey:
        """The same data key under the active KEK (C{wrapped} if already so)."""
        if wrapped.key_id == self.active_key_id:
            return wrapped
        return self.wrap(self.unwrap(wrapped))

    def generate(self) -> DataKey:
        """A fresh data key, wrapped under the active KEK."""
        data_key = new_data_key()
        return DataKey(data_key, self.wrap(data_key))


@implementer(IKeyProvider)
class LocalKeyProvider:
    """An L{IKeyProvider} over a L{KeyRing} (the key file's keys); every
    Deferred it returns has already fired."""

    def __init__(self, ring: KeyRing) -> None:
        self.ring = ring

    def active_key_id(self) -> str:
        return self.ring.active_key_id

    def key_ids(self) -> Sequence[str]:
        return self.ring.key_ids()

    def generate_data_key(self) -> Deferred[DataKey]:
        return maybeDeferred(self.ring.generate)

    def unwrap_data_key(self, wrapped: WrappedKey) -> Deferred[bytes]:
        return maybeDeferred(self.ring.unwrap, wrapped)

    def rewrap_data_key(self, wrapped: WrappedKey) -> Deferred[WrappedKey]:
        return maybeDeferred(self.ring.rewrap, wrapped)
