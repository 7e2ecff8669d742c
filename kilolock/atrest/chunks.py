"""The chunks of an upload session at rest: sealed as versions are.

A chunk is a piece of a state on its way in (C{kl state push} of 8 MiB or
more, C{--chunked}, imports): the whole state's secrets pass through the
chunks' rows before the commit writes the version.  With a key provider
each chunk is sealed with AES-256-GCM under a fresh data key wrapped by the
active key-encryption key -- the layouts of L{kilolock.atrest.envelope},
the associated data binding the chunk to its session and offset
(L{ChunkIdentity}) -- and opened again when the session is committed.
Without one, a chunk is kept as it came (as versions are then).  Chunks
are not compressed: they are short-lived, and their size is the client's.

L{ChunkCodec} is what a store calls: data keys from the L{IKeyProvider}
(Deferreds), the AES-GCM work run inline or, for large chunks, by the
runner the store injects (as L{kilolock.atrest.versions.VersionCodec}).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

from attrs import field, frozen
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from twisted.internet.defer import Deferred, FirstError, gatherResults, maybeDeferred, succeed
from twisted.python.failure import Failure

from kilolock.atrest.envelope import (
    NONCE_BYTES,
    PAYLOAD_FORMAT,
    TAG_BYTES,
    ChunkIdentity,
    DataKey,
    WrappedKey,
    chunk_associated_data,
)
from kilolock.atrest.errors import ChunkUnauthentic, CorruptVersion, StoredVersionUnreadable
from kilolock.atrest.interfaces import IKeyProvider
from kilolock.atrest.sealing import seal
from kilolock.atrest.versions import Runner, run_inline

__all__ = ["SEAL_OVERHEAD", "ChunkCodec", "StoredChunk", "open_chunk", "seal_chunk"]

#: The bytes sealing adds to a chunk: the format byte, the nonce, the tag.
SEAL_OVERHEAD = 1 + NONCE_BYTES + TAG_BYTES


@frozen
class StoredChunk:
    """A chunk's row columns: C{data} (sealed, or the bytes as they came) and
    C{data_key} (the wrapped data key's bytes; None: not sealed)."""

    data: Any = field(repr=lambda data: f"<{len(data)} bytes>")  # bytes or a memoryview
    data_key: bytes | None = None

    @property
    def key_id(self) -> str | None:
        """The KEK id the data key is wrapped under (the C{kek_id} column)."""
        return None if self.data_key is None else WrappedKey.from_bytes(self.data_key).key_id


def seal_chunk(data: bytes, identity: ChunkIdentity, data_key: DataKey) -> StoredChunk:
    """C{data} sealed under C{data_key}, bound to C{identity}."""
    return StoredChunk(seal(data_key.plaintext, data, chunk_associated_data(identity)),
                       data_key.wrapped.to_bytes())


def open_chunk(stored: StoredChunk, identity: ChunkIdentity, data_key: bytes | None) -> Any:
    """The bytes of a stored chunk (C{stored.data} itself when it is not
    sealed): L{ChunkUnauthentic} when AES-GCM refuses it (altered, moved, or
    another data key), L{CorruptVersion} when it is malformed or not
    C{identity.length} bytes long."""
    data = stored.data
    if stored.data_key is not None:
        if data_key is None:
            raise ValueError("a sealed chunk needs its data key")
        view = memoryview(data)
        if len(view) < SEAL_OVERHEAD or view[0] != PAYLOAD_FORMAT:
            raise CorruptVersion("a sealed chunk of the upload session is truncated or has an"
                                 " unknown format")
        try:
            data = AESGCM(data_key).decrypt(bytes(view[1:1 + NONCE_BYTES]),
                                            view[1 + NONCE_BYTES:],
                                            chunk_associated_data(identity))
        except InvalidTag:
            raise ChunkUnauthentic(
                f"the chunk at offset {identity.offset} of the upload session failed"
                " authentication: it was altered, moved from another session or offset, or"
                " sealed under another data key") from None
    if len(data) != identity.length:
        raise CorruptVersion(f"the chunk at offset {identity.offset} of the upload session"
                             f" holds {len(data)} bytes, its row {identity.length}")
    return data


def _first_failure(failure: Failure) -> Failure:
    error = failure.value
    return error.subFailure if isinstance(error, FirstError) else failure


class ChunkCodec:
    """Seals chunks as they arrive and opens them at the commit.

    C{provider} None means encryption off: chunks are kept as they came,
    and a sealed one cannot be opened.  Chunks of C{large_size} bytes or
    more are sealed and opened by C{run_large}.
    """

    def __init__(self, provider: IKeyProvider | None, run_large: Runner = run_inline,
                 large_size: int = 1024 * 1024) -> None:
        self.provider = provider
        self._run_large = run_large
        self._large_size = large_size

    def seal(self, data: bytes, identity: ChunkIdentity) -> Deferred[StoredChunk]:
        """Fires with the columns to store for C{data}: sealed under a fresh
        data key when encryption is on, else C{data} as it is."""
        if self.provider is None:
            return succeed(StoredChunk(data))

        def sealed(data_key: DataKey) -> Deferred[StoredChunk]:
            run = self._run_large if len(data) >= self._large_size else run_inline
            return run(lambda: seal_chunk(data, identity, data_key))

        return self.provider.generate_data_key().addCallback(sealed)

    def open(self, chunks: Sequence[tuple[StoredChunk, ChunkIdentity]]) -> Deferred[bytes]:
        """Fires with the bytes of C{chunks} (in the order given) joined:
        each sealed one opened with its data key and checked against its
        identity.  Fails with the typed errors of L{kilolock.atrest.errors}
        (a sealed chunk and no keys: L{StoredVersionUnreadable})."""
        def unwrapped(stored: StoredChunk) -> Deferred[bytes | None]:
            if stored.data_key is None:
                return succeed(None)
            if self.provider is None:
                raise StoredVersionUnreadable(
                    "the upload session's chunks are encrypted and no encryption keys are"
                    " configured")
            wrapped = WrappedKey.from_bytes(stored.data_key)
            return self.provider.unwrap_data_key(wrapped)  # type: ignore[return-value]

        keys = maybeDeferred(lambda: gatherResults([unwrapped(stored) for stored, _ in chunks],
                                                   consumeErrors=True))
        keys.addErrback(_first_failure)

        def opened(data_keys: list[bytes | None]) -> Deferred[bytes]:
            size = sum(identity.length for _, identity in chunks)

            def join() -> bytes:
                # Into a BytesIO sized once: its buffer becomes the result
                # without a copy, so the chunks cost their size once more
                # than what was read, one opened chunk at a time.
                out = io.BytesIO()
                if size:
                    out.seek(size - 1)
                    out.write(b"\0")
                    out.seek(0)
                for (stored, identity), data_key in zip(chunks, data_keys, strict=True):
                    out.write(open_chunk(stored, identity, data_key))
                return out.getvalue()

            return (self._run_large if size >= self._large_size else run_inline)(join)

        return keys.addCallback(opened)
