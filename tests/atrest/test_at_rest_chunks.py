"""kilolock.atrest.chunks: the chunks of an upload session sealed as versions
are, each bound to its session and offset, opened only there, under its own
data key; every failure a typed error."""

from __future__ import annotations

import hashlib
import os
from typing import Any

import pytest
from attrs import evolve
from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.defer import Deferred, maybeDeferred
from twisted.python.failure import Failure

from kilolock.atrest.chunks import SEAL_OVERHEAD, ChunkCodec, StoredChunk, open_chunk, seal_chunk
from kilolock.atrest.envelope import (
    ChunkIdentity,
    VersionIdentity,
    associated_data,
    chunk_associated_data,
)
from kilolock.atrest.errors import (
    AuthenticationFailed,
    ChunkUnauthentic,
    CorruptVersion,
    StoredVersionUnreadable,
    UnknownKey,
)
from kilolock.atrest.keyring import KeyEncryptionKey, KeyRing, LocalKeyProvider
from kilolock.atrest.sealing import open_sealed, seal

MARKER = b"chunk-marker-" + os.urandom(8).hex().encode()
RING = KeyRing([KeyEncryptionKey("2026-12", os.urandom(32))], "2026-12")


def identity_of(data: bytes, session: str = "up_" + "a" * 24, offset: int = 0,
                tenant: str = "acme", principal: str = "token:t1") -> ChunkIdentity:
    return ChunkIdentity(session, tenant, principal, offset, len(data),
                         hashlib.sha256(data).hexdigest())


def outcome(deferred: Deferred[Any]) -> Any:
    """What a Deferred that has already fired gave: its result or its Failure."""
    results: list[Any] = []
    deferred.addBoth(results.append)
    assert results, "the Deferred has fired"
    return results[0]


def fired(deferred: Deferred[Any]) -> Any:
    result = outcome(deferred)
    assert not isinstance(result, Failure), result
    return result


def failed_with(deferred: Deferred[Any], kind: type[Exception]) -> Exception:
    result = outcome(deferred)
    assert isinstance(result, Failure) and isinstance(result.value, kind), result
    return result.value


@settings(max_examples=50, deadline=None)
@given(st.binary(max_size=2048), st.integers(0, 2**40))
def test_a_sealed_chunk_opens_to_its_bytes_and_shows_none(data: bytes, offset: int) -> None:
    """Any bytes at any offset: sealed, the row holds none of them (only the
    nonce, ciphertext and tag: 29 bytes more) and a wrapped data key; opened
    with that key, exactly the bytes."""
    plain = MARKER + data
    identity = identity_of(plain, offset=offset)
    data_key = RING.generate()
    stored = seal_chunk(plain, identity, data_key)
    assert MARKER not in stored.data and len(stored.data) == len(plain) + SEAL_OVERHEAD
    assert stored.key_id == "2026-12"
    assert open_chunk(stored, identity, data_key.plaintext) == plain


@pytest.mark.parametrize("change", [
    {"session_id": "up_" + "b" * 24}, {"offset": 8}, {"tenant": "other"},
    {"principal": "token:t2"}, {"sha256": "0" * 64},
])
def test_a_chunk_moved_to_another_session_or_offset_fails_authentication(
        change: dict[str, Any]) -> None:
    """A sealed chunk copied into another session, another offset, another
    owner's session, or claimed for other bytes: ChunkUnauthentic (502)."""
    identity = identity_of(MARKER)
    data_key = RING.generate()
    stored = seal_chunk(MARKER, identity, data_key)
    with pytest.raises(ChunkUnauthentic) as refused:
        open_chunk(stored, evolve(identity, **change), data_key.plaintext)
    assert refused.value.status == 502 and refused.value.code == "upload_chunk_unauthentic"
    assert isinstance(refused.value, AuthenticationFailed)


def test_a_chunk_and_a_version_cannot_pass_for_each_other() -> None:
    """The same data key and bytes: a chunk's ciphertext does not open as a
    version's payload, nor a version's as a chunk (the associated data start
    with contexts of their own)."""
    chunk = identity_of(MARKER)
    version = VersionIdentity("acme", "prod", 1, chunk.sha256, len(MARKER))
    data_key = RING.generate()
    as_chunk = seal_chunk(MARKER, chunk, data_key)
    with pytest.raises(AuthenticationFailed):
        open_sealed(data_key.plaintext, as_chunk.data, associated_data(version, "identity", None))
    as_version = seal(data_key.plaintext, MARKER, associated_data(version, "identity", None))
    with pytest.raises(ChunkUnauthentic):
        open_chunk(StoredChunk(as_version, as_chunk.data_key), chunk, data_key.plaintext)
    assert not associated_data(version, "identity", None).startswith(
        chunk_associated_data(chunk)[:21])


def test_another_data_key_and_damage_are_typed_errors() -> None:
    """Opened under another chunk's data key, one bit flipped, truncated, or
    unsealed bytes of another length: typed errors, never other bytes."""
    identity = identity_of(MARKER)
    data_key = RING.generate()
    stored = seal_chunk(MARKER, identity, data_key)
    with pytest.raises(ChunkUnauthentic):
        open_chunk(stored, identity, RING.generate().plaintext)
    flipped = bytearray(stored.data)
    flipped[-1] ^= 1
    with pytest.raises(ChunkUnauthentic):
        open_chunk(StoredChunk(bytes(flipped), stored.data_key), identity, data_key.plaintext)
    with pytest.raises(CorruptVersion):
        open_chunk(StoredChunk(stored.data[:SEAL_OVERHEAD - 1], stored.data_key), identity,
                   data_key.plaintext)
    with pytest.raises(CorruptVersion):
        open_chunk(StoredChunk(MARKER + b"x"), identity, None)


def test_the_codec_seals_each_chunk_under_its_own_data_key() -> None:
    """With a key provider: every chunk sealed under a fresh data key, and
    the chunks joined in order when opened.  Without: kept as they came."""
    codec = ChunkCodec(LocalKeyProvider(RING))
    pieces = [MARKER, b"-middle-", MARKER[::-1]]
    offsets = [0, len(pieces[0]), len(pieces[0]) + len(pieces[1])]
    identities = [identity_of(piece, offset=offset) for piece, offset in zip(
        pieces, offsets, strict=True)]
    sealed = [fired(codec.seal(piece, identity)) for piece, identity in zip(
        pieces, identities, strict=True)]
    assert len({stored.data_key for stored in sealed}) == 3
    assert all(MARKER not in stored.data for stored in sealed)
    assert fired(codec.open(list(zip(sealed, identities, strict=True)))) == b"".join(pieces)
    plain = ChunkCodec(None)
    kept = fired(plain.seal(MARKER, identities[0]))
    assert (kept.data, kept.data_key) == (MARKER, None)
    assert fired(plain.open([(kept, identities[0])])) == MARKER


def test_sealed_chunks_and_no_keys_or_another_key_file_fail_typed() -> None:
    """A sealed chunk read by a store without keys, or with a key file that
    lacks its key: typed 502 errors (the commit fails, nothing is stored)."""
    identity = identity_of(MARKER)
    stored = fired(ChunkCodec(LocalKeyProvider(RING)).seal(MARKER, identity))
    error = failed_with(ChunkCodec(None).open([(stored, identity)]), StoredVersionUnreadable)
    assert "no encryption keys" in str(error)
    other = KeyRing([KeyEncryptionKey("2027-06", os.urandom(32))], "2027-06")
    failed_with(ChunkCodec(LocalKeyProvider(other)).open([(stored, identity)]), UnknownKey)


def test_large_chunks_go_to_the_injected_runner() -> None:
    """Chunks of the large size and more are sealed and opened by the
    store's runner (a thread in the store); smaller ones inline."""
    ran: list[int] = []

    def runner(work: Any) -> Deferred[Any]:
        ran.append(1)
        return maybeDeferred(work)

    codec = ChunkCodec(LocalKeyProvider(RING), run_large=runner, large_size=64)
    small, large = b"s" * 63, b"l" * 64
    stored = [fired(codec.seal(data, identity_of(data))) for data in (small, large)]
    assert ran == [1]
    fired(codec.open([(stored[1], identity_of(large))]))
    assert ran == [1, 1]

