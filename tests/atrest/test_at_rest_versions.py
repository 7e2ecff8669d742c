"""kilolock.atrest.versions: the store's entry point writes and reads
versions with keys from the provider, and runs large payloads elsewhere."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.internet.defer import Deferred, maybeDeferred
from twisted.python.failure import Failure

from kilolock.atrest.compression import (
    Base,
    Codec,
    CompressionPolicy,
    Newest,
    Snapshot,
    compress_delta,
    sha256_hex,
)
from kilolock.atrest.envelope import VersionIdentity
from kilolock.atrest.errors import (
    AuthenticationFailed,
    CorruptVersion,
    StoredVersionUnreadable,
    UnknownKey,
    WrongBase,
)
from kilolock.atrest.keyring import KeyEncryptionKey, KeyRing, LocalKeyProvider
from kilolock.atrest.stored import StoredPayload
from kilolock.atrest.versions import ChainEnds, StoredRow, VersionCodec
from kilolock.core.model import StateKey
from kilolock.store.postgres.payloads import ChainCache
from tests.support.stub_client import state_body

_T = TypeVar("_T")
PROVIDER = LocalKeyProvider(KeyRing([KeyEncryptionKey("k1", os.urandom(32))], "k1"))
POLICY = CompressionPolicy(snapshot_ratio=1.0)


def fired(deferred: Deferred[_T]) -> _T:
    """The result of a Deferred that has fired (raising its failure)."""
    results: list[_T | Failure] = []
    deferred.addBoth(results.append)
    assert results, "the Deferred has not fired"
    if isinstance(results[0], Failure):
        results[0].raiseException()
    return results[0]  # type: ignore[return-value]


def version(serial: int, revision: int) -> bytes:
    return state_body(serial, resources=[{
        "mode": "managed", "type": "aws_instance", "name": f"n{index}",
        "provider": 'provider["registry.terraform.io/hashicorp/aws"]',
        "instances": [{"schema_version": 0, "sensitive_attributes": [], "attributes": {
            "id": f"i-{index:012x}", "revision": revision if index == 3 else 0}}]}
        for index in range(30)])


def row_of(codec: VersionCodec, raw: bytes, serial: int,
           base: StoredRow | None = None) -> StoredRow:
    identity = VersionIdentity("acme", "prod/app", serial, sha256_hex(raw), len(raw))
    snapshot = None if base is None else Snapshot(
        Base(fired(codec.decode(base)), base.identity.sha256), len(base.stored.payload), 0)
    return StoredRow(fired(codec.encode(raw, identity, snapshot)), identity)


@pytest.mark.parametrize("encrypted", [True, False])
def test_a_snapshot_and_a_delta_written_and_read_back(encrypted: bool) -> None:
    """Write a first version, offer it as the snapshot of the second: the
    second is a delta, and both read back byte-exact."""
    codec = VersionCodec(PROVIDER if encrypted else None, POLICY)
    first, second = version(1, 1), version(2, 2)
    base = row_of(codec, first, 1)
    delta = row_of(codec, second, 2, base)
    assert (base.stored.codec, delta.stored.codec) == (Codec.ZSTD, Codec.ZSTD_DELTA)
    assert base.stored.encrypted is encrypted and delta.stored.encrypted is encrypted
    assert fired(codec.decode(base)) == first
    assert fired(codec.decode(delta, [base])) == second


def test_large_payloads_go_to_the_injected_runner() -> None:
    """At and above the size given, encode and decode run through run_large;
    below it they run inline."""
    calls: list[str] = []

    def recording(work: Callable[[], _T]) -> Deferred[_T]:
        calls.append("large")
        return maybeDeferred(work)

    raw = version(1, 1)
    codec = VersionCodec(PROVIDER, POLICY, run_large=recording, large_size=len(raw))
    row = row_of(codec, raw, 1)
    assert fired(codec.decode(row)) == raw
    assert calls == ["large", "large"]
    small = VersionCodec(PROVIDER, POLICY, run_large=recording, large_size=len(raw) + 1)
    assert fired(small.decode(row_of(small, raw, 1))) == raw
    assert calls == ["large", "large"]


def test_an_encrypted_row_without_keys_or_with_other_keys_fails_typed() -> None:
    """Encryption off but an encrypted row: a typed error; a provider that
    lacks the row's key: L{UnknownKey} (not a FirstError wrapper)."""
    row = row_of(VersionCodec(PROVIDER), version(1, 1), 1)
    with pytest.raises(StoredVersionUnreadable, match="no encryption keys"):
        fired(VersionCodec(None).decode(row))
    other = LocalKeyProvider(KeyRing([KeyEncryptionKey("k2", os.urandom(32))], "k2"))
    with pytest.raises(UnknownKey):
        fired(VersionCodec(other).decode(row))


def chain_of(codec: VersionCodec, raws: list[bytes]) -> list[StoredRow]:
    """C{raws} written as a chain: a snapshot, then each a delta against
    the one before it."""
    first = row_of(codec, raws[0], 1)
    rows = [first]
    snapshot = Snapshot(Base(raws[0], first.identity.sha256), len(first.stored.payload), 0)
    for serial, raw in enumerate(raws[1:], 2):
        identity = VersionIdentity("acme", "prod/app", serial, sha256_hex(raw), len(raw))
        before = raws[serial - 2]
        newest = None if serial == 2 else Newest(Base(before, sha256_hex(before)), serial - 1)
        stored = fired(codec.encode(raw, identity, snapshot, newest))
        assert (stored.codec, stored.links) == (Codec.ZSTD_DELTA, serial)
        rows.append(StoredRow(stored, identity))
    return rows


@pytest.mark.parametrize("encrypted", [True, False])
def test_a_chain_decodes_from_its_snapshot_or_from_a_version_held(encrypted: bool) -> None:
    """Four versions chained: the last decodes from the snapshot through
    every link (the ends are the snapshot's and the last's bytes), or from
    the second version's bytes through the links after it."""
    codec = VersionCodec(PROVIDER if encrypted else None, POLICY)
    raws = [version(serial, serial) for serial in range(1, 5)]
    rows = chain_of(codec, raws)
    ends = fired(codec.decode_chain(rows))
    assert (ends.last, ends.first_full, ends.before_last) == (raws[3], raws[0], raws[2])
    held = Base(raws[1], sha256_hex(raws[1]))
    assert fired(codec.decode_chain(rows[2:], held)) == ChainEnds(raws[3], None, raws[2])
    assert fired(codec.decode(rows[3], rows[:3])) == raws[3]
    # A link left out: the next one is handed the wrong base (sealed rows
    # name their base in their associated data, so they fail to open).
    with pytest.raises(AuthenticationFailed if encrypted else WrongBase):
        fired(codec.decode(rows[3], rows[:1] + rows[2:3]))


def test_a_damaged_link_fails_the_versions_after_it() -> None:
    """A link whose bytes were altered fails every read through it with the
    typed error; the versions before it still read."""
    codec = VersionCodec(None, POLICY)
    raws = [version(serial, serial) for serial in range(1, 5)]
    rows = chain_of(codec, raws)
    payload = rows[2].stored.payload
    rows[2] = StoredRow(StoredPayload(Codec.ZSTD_DELTA, payload[:-3] + b"\x00\x00\x00"),
                        rows[2].identity)
    with pytest.raises(StoredVersionUnreadable):
        fired(codec.decode(rows[3], rows[:3]))
    assert fired(codec.decode(rows[1], rows[:1])) == raws[1]


def test_a_link_decoding_to_other_bytes_fails_the_version_read() -> None:
    """Links in the middle of a chain are not hashed: one that decodes to
    other bytes of the same size (a valid delta of altered bytes) makes the
    version read fail its sha256, and so does every version after it."""
    codec = VersionCodec(None, POLICY)
    raws = [version(serial, serial) for serial in range(1, 7)]
    rows = chain_of(codec, raws)
    altered = raws[2].replace(b'"name": "n5"', b'"name": "m5"', 1)
    assert altered != raws[2] and len(altered) == len(raws[2])
    forged = compress_delta(altered, Base(raws[1], sha256_hex(raws[1])), 1)
    rows[2] = StoredRow(StoredPayload(Codec.ZSTD_DELTA, forged), rows[2].identity)
    for last in (4, 5):
        with pytest.raises(CorruptVersion, match="sha256"):
            fired(codec.decode(rows[last], rows[:last]))
    assert fired(codec.decode(rows[1], rows[:1])) == raws[1]


@settings(max_examples=40, deadline=None)
@given(st.binary(min_size=64, max_size=2000),
       st.lists(st.tuples(st.integers(min_value=0, max_value=1999), st.binary(max_size=40)),
                min_size=1, max_size=12),
       st.integers(min_value=2, max_value=5), st.booleans())
def test_any_history_written_as_the_store_writes_it_reads_back(
        first: bytes, edits: list[tuple[int, bytes]], max_links: int, tight: bool) -> None:
    """Versions made by arbitrary edits, encoded with the bases the store's
    chain cache offers (short chains, a byte limit that forces deltas
    against the snapshot when C{tight}): each decodes from its own chain,
    walked back by its base numbers, byte for byte."""
    policy = CompressionPolicy(snapshot_ratio=1.0, max_links=max_links,
                               chain_bytes=3 * 2100 if tight else 4 << 20)
    codec = VersionCodec(None, policy)
    cache, key = ChainCache(), StateKey("acme", "prod/app")
    raws, rows, bases = [first], [], []
    for at, text in edits:
        raws.append(raws[-1][:at] + text + raws[-1][at + len(text):])
    for number, raw in enumerate(raws, 1):
        cached = cache.get(key)
        identity = VersionIdentity("acme", "prod/app", number, sha256_hex(raw), len(raw))
        stored = fired(codec.encode(raw, identity, None if cached is None else cached.snapshot,
                                    None if cached is None else cached.newest))
        bases.append(None if cached is None else cached.base_number(stored))
        cache.written(key, number, raw, identity.sha256, stored, cached)
        rows.append(StoredRow(stored, identity))
    for number in range(1, len(raws) + 1):
        chain, at = [], number
        while at is not None:
            chain.insert(0, rows[at - 1])
            at = bases[at - 1]
        assert len(chain) <= max_links
        assert fired(codec.decode_chain(chain)).last == raws[number - 1]
