"""The binary layouts of an encrypted version, and what its AES-GCM binds.

An encrypted version row holds two blobs, in two columns, so that rotating
key-encryption keys rewrites a few dozen bytes per row and never the payload
(PostgreSQL keeps an unchanged TOASTed value as it is on UPDATE):

C{data_key} (the wrapped data key)::

    0x01 | n (1 byte) | key id (n bytes of ASCII) | wrapped key (the rest)

  The wrapped key is the key provider's own bytes: for the key file,
  nonce (12) | AES-256-GCM(KEK, data key) (32 + 16 tag) = 60 bytes; a KMS
  puts its ciphertext blob there.

C{payload} (the sealed payload)::

    0x01 | nonce (12 bytes) | AES-256-GCM(data key, compressed bytes) | tag (16)

The payload's associated data is the version's identity (tenant, state path,
serial, sha256, size) and how it is stored (codec, and the base version's
sha256 for a delta), together with the payload's format byte.  A payload
copied into another row, or re-pointed at another base, fails to decrypt.
The version's number is not bound: a write learns it only inside its
transaction, and two rows with the same identity hold the same bytes.

A chunk of an upload session is sealed the same way (the same two blobs, in
the C{data} and C{data_key} columns of its row), its associated data naming
its session (id, tenant, owner), its place in the upload (offset, length)
and its bytes' sha256 (L{ChunkIdentity}), after a context of its own: a
chunk cannot be moved to another session or offset, nor passed off as a
version, nor a version as a chunk.
"""

from __future__ import annotations

import re
import struct

from attrs import field, frozen

from kilolock.atrest.errors import CorruptVersion

DATA_KEY_FORMAT = 0x01
PAYLOAD_FORMAT = 0x01
NONCE_BYTES = 12
TAG_BYTES = 16

#: What a key id may be: short, printable, safe in a file name and a log line.
KEY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


@frozen
class VersionIdentity:
    """What the row says the version is; C{sha256} is lowercase hex of the raw bytes."""

    tenant: str
    path: str
    serial: int
    sha256: str
    size: int


@frozen
class VersionColumns:
    """The columns that name a version row: its state, its number, what the
    row says its bytes are (L{identity}) and C{codec}, the text of the
    column saying how they are stored."""

    tenant: str
    path: str
    number: int
    serial: int
    sha256: str
    size: int
    codec: str

    @property
    def identity(self) -> VersionIdentity:
        return VersionIdentity(self.tenant, self.path, self.serial, self.sha256, self.size)


@frozen
class WrappedKey:
    """A data key wrapped by the key-encryption key C{key_id}."""

    key_id: str
    wrapped: bytes

    def to_bytes(self) -> bytes:
        """The C{data_key} column's bytes."""
        ident = self.key_id.encode("ascii")
        return bytes((DATA_KEY_FORMAT, len(ident))) + ident + self.wrapped

    @classmethod
    def from_bytes(cls, blob: bytes) -> WrappedKey:
        """Parse a C{data_key} column; L{CorruptVersion} if it is not one."""
        if len(blob) < 3 or blob[0] != DATA_KEY_FORMAT:
            raise CorruptVersion("the wrapped data key has an unknown format")
        end = 2 + blob[1]
        try:
            key_id = blob[2:end].decode("ascii")
        except UnicodeDecodeError:
            key_id = ""
        if len(blob) <= end or KEY_ID.fullmatch(key_id) is None:
            raise CorruptVersion("the wrapped data key is truncated or names no valid key id")
        return cls(key_id, blob[end:])


@frozen
class DataKey:
    """A fresh data key and its wrapping, as a key provider hands them out."""

    plaintext: bytes = field(repr=False)
    wrapped: WrappedKey


@frozen
class SealedPayload:
    """The C{payload} column of an encrypted version: nonce and ciphertext (tag included)."""

    nonce: bytes
    ciphertext: bytes = field(repr=lambda data: f"<{len(data)} bytes>")

    def to_bytes(self) -> bytes:
        return bytes((PAYLOAD_FORMAT,)) + self.nonce + self.ciphertext

    @classmethod
    def from_bytes(cls, blob: bytes) -> SealedPayload:
        """Parse a C{payload} column; L{CorruptVersion} if it is too short to be one."""
        if len(blob) < 1 + NONCE_BYTES + TAG_BYTES or blob[0] != PAYLOAD_FORMAT:
            raise CorruptVersion("the encrypted payload is truncated or has an unknown format")
        return cls(blob[1:1 + NONCE_BYTES], blob[1 + NONCE_BYTES:])


def _field(value: str | int) -> bytes:
    data = str(value).encode("utf-8")
    return struct.pack(">I", len(data)) + data


@frozen
class ChunkIdentity:
    """What a sealed chunk of an upload session is bound to: the session
    (its id, and the tenant and principal that own it), where the chunk
    lies in the upload (C{offset}, C{length}) and the sha256 (lowercase
    hex) of its bytes."""

    session_id: str
    tenant: str
    principal: str
    offset: int
    length: int
    sha256: str


def chunk_associated_data(identity: ChunkIdentity) -> bytes:
    """The bytes AES-GCM binds to a sealed chunk (length-prefixed fields after
    a context no version's associated data starts with)."""
    fields = (identity.session_id, identity.tenant, identity.principal, identity.offset,
              identity.length, identity.sha256)
    return (b"kilolock upload chunk" + bytes((PAYLOAD_FORMAT,))
            + b"".join(_field(value) for value in fields))


def associated_data(identity: VersionIdentity, codec: str, base_sha256: str | None) -> bytes:
    """The bytes AES-GCM binds to a payload: every field length-prefixed, so no
    two different identities encode alike."""
    fields = (identity.tenant, identity.path, identity.serial, identity.sha256,
              identity.size, codec, base_sha256 or "")
    return (b"kilolock version" + bytes((PAYLOAD_FORMAT,))
            + b"".join(_field(value) for value in fields))
