"""One version's row fields, both ways: compress then encrypt, and back.

What a version row holds for its bytes is a L{StoredPayload}: the codec, the
payload, and the wrapped data key (None when the row is not encrypted).  A
delta row also needs its base's raw bytes: the store finds the base's row
(its version number is a column of its own), decodes it first (a chain of
deltas from its snapshot) and hands it to L{decode_version} as a L{Base}.

These functions are synchronous and CPU-bound; a store runs them in a
thread for large states.  The data keys come from an
L{kilolock.atrest.interfaces.IKeyProvider} beforehand (generated for a
write, unwrapped for a read), so nothing here waits on a key service.
"""

from __future__ import annotations

from collections.abc import Iterator

from attrs import field, frozen

from kilolock.atrest.compression import (
    DEFAULT_POLICY,
    Base,
    Codec,
    CompressionPolicy,
    Newest,
    Snapshot,
    compress_version,
    decompress_version,
    iter_decompress_version,
)
from kilolock.atrest.envelope import DataKey, VersionIdentity, WrappedKey, associated_data
from kilolock.atrest.errors import WrongBase
from kilolock.atrest.sealing import open_sealed, seal


@frozen
class StoredPayload:
    """The columns that hold a version's bytes: C{codec}, C{payload}, C{data_key}.

    C{base_sha256} is the sha256 of the version a delta was made against
    (None for a full payload): a store keeps the base's version number in a
    column and learns this from the base row; it is here for the writer, as
    is C{links}, the payloads a read of the version decodes (1: full).
    """

    codec: Codec
    payload: bytes = field(repr=lambda data: f"<{len(data)} bytes>")
    data_key: bytes | None = None
    base_sha256: str | None = None
    links: int = 1

    @property
    def encrypted(self) -> bool:
        return self.data_key is not None

    @property
    def key_id(self) -> str | None:
        """The KEK id the data key is wrapped under (for the rotation's column)."""
        return None if self.data_key is None else WrappedKey.from_bytes(self.data_key).key_id


def encode_version(raw: bytes, identity: VersionIdentity, snapshot: Snapshot | None,
                   data_key: DataKey | None = None,
                   policy: CompressionPolicy = DEFAULT_POLICY,
                   newest: Newest | None = None) -> StoredPayload:
    """Compress C{raw} (as a delta against C{newest} or C{snapshot} where the
    policy says so), then seal it under C{data_key} when one is given.

    C{identity} must describe C{raw} (its C{sha256} is the one the store
    computed on upload, trusted here); it becomes the associated data.
    """
    if len(raw) != identity.size:
        raise ValueError("the identity's size is not the size of the bytes")
    compressed = compress_version(raw, snapshot, policy, newest)
    if data_key is None:
        return StoredPayload(compressed.codec, compressed.data, None, compressed.base_sha256,
                             compressed.links)
    associated = associated_data(identity, compressed.codec.value, compressed.base_sha256)
    return StoredPayload(compressed.codec, seal(data_key.plaintext, compressed.data, associated),
                         data_key.wrapped.to_bytes(), compressed.base_sha256, compressed.links)


def decode_version(stored: StoredPayload, identity: VersionIdentity,
                   base: Base | None = None, data_key: bytes | None = None,
                   verify: bool = True) -> bytes:
    """The raw bytes of a version, checked against C{identity}'s size and
    sha256 (the size only without C{verify}: see L{decompress_version}).

    C{data_key} is the unwrapped data key of an encrypted row; C{base} the
    decoded base of a delta row.  Failures are the typed errors of
    L{kilolock.atrest.errors}: authentication (altered, moved, wrong key or
    base), a corrupt payload, a wrong base.
    """
    payload = _opened(stored, identity, base, data_key)
    return decompress_version(stored.codec, payload, identity.size, identity.sha256, base,
                              verify)


def iter_decode_version(stored: StoredPayload, identity: VersionIdentity,
                        base: Base | None = None, data_key: bytes | None = None,
                        chunk: int = 1 << 20) -> Iterator[bytes]:
    """L{decode_version} in pieces of at most C{chunk} bytes, for streaming a
    large version out with little memory.  The payload is authenticated (and
    the errors raised) before this returns; the decoded size and sha256 are
    checked before the last piece is yielded."""
    payload = _opened(stored, identity, base, data_key)
    return iter_decompress_version(stored.codec, payload, identity.size, identity.sha256,
                                   base, chunk)


def _opened(stored: StoredPayload, identity: VersionIdentity, base: Base | None,
            data_key: bytes | None) -> bytes:
    """The compressed payload of a row, decrypted when it is encrypted."""
    delta = stored.codec is Codec.ZSTD_DELTA
    if delta and base is None:
        raise WrongBase("a zstd-delta payload needs its base version")
    if not stored.encrypted:
        return stored.payload
    if data_key is None:
        raise ValueError("an encrypted version needs its data key")
    base_sha256 = base.sha256 if delta and base is not None else None
    associated = associated_data(identity, stored.codec.value, base_sha256)
    return open_sealed(data_key, stored.payload, associated)


def encrypt_stored(stored: StoredPayload, identity: VersionIdentity, base_sha256: str | None,
                   data_key: DataKey) -> StoredPayload:
    """An unencrypted row's payload sealed as it is (no recompression): the
    migration that encrypts an existing database.  C{base_sha256} is the
    base row's sha256 for a delta."""
    if stored.encrypted:
        raise ValueError("the version is already encrypted")
    associated = associated_data(identity, stored.codec.value, base_sha256)
    return StoredPayload(stored.codec, seal(data_key.plaintext, stored.payload, associated),
                         data_key.wrapped.to_bytes(), base_sha256)


def decrypt_stored(stored: StoredPayload, identity: VersionIdentity, base_sha256: str | None,
                   data_key: bytes) -> StoredPayload:
    """An encrypted row's payload opened but left compressed: the migration
    that turns encryption off.  Typed errors as for L{decode_version}."""
    associated = associated_data(identity, stored.codec.value, base_sha256)
    return StoredPayload(stored.codec, open_sealed(data_key, stored.payload, associated),
                         None, base_sha256)
