"""kilolock.atrest.compression: every codec gives back exactly the bytes it
was given, deltas need their own base, and damage is a typed error."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kilolock.atrest.compression import (
    DEFAULT_POLICY,
    MIN_BASE_SIZE,
    Base,
    Codec,
    CompressionPolicy,
    Newest,
    Snapshot,
    base_fingerprint,
    compress_delta,
    compress_full,
    compress_version,
    decompress_version,
    iter_decompress_version,
    sha256_hex,
)
from kilolock.atrest.errors import CorruptVersion, StoredVersionUnreadable, WrongBase
from tests.support.state_strategies import histories
from tests.support.stub_client import state_body


def base_of(raw: bytes) -> Base:
    return Base(raw, sha256_hex(raw))


def snapshot_of(raw: bytes, versions_since: int = 0) -> Snapshot:
    return Snapshot(base_of(raw), len(compress_full(raw, 3)), versions_since)


def decode(codec: Codec, data: bytes, raw: bytes, base: Base | None = None) -> bytes:
    return decompress_version(codec, data, len(raw), sha256_hex(raw), base)


def resources(count: int, changed: dict[int, str] | None = None) -> list[dict[str, object]]:
    changed = changed or {}
    return [{"mode": "managed", "type": "aws_instance", "name": f"node_{index}",
             "provider": 'provider["registry.terraform.io/hashicorp/aws"]',
             "instances": [{"schema_version": 1, "sensitive_attributes": [], "attributes": {
                 "id": f"i-{index:017x}", "etag": changed.get(index, f"{index * 7919:032x}"),
                 "tags": {"Name": f"node-{index}", "team": "platform"}}}]}
            for index in range(count)]


STATE = state_body(7, resources=resources(50))
NEXT = state_body(8, resources=resources(50, {3: "a" * 32, 41: "b" * 32}))
THIRD = state_body(9, resources=resources(50, {3: "a" * 32, 41: "b" * 32, 17: "c" * 32}))


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=4096), st.binary(min_size=64, max_size=4096))
def test_arbitrary_bytes_round_trip_through_every_codec(raw: bytes, other: bytes) -> None:
    """Any bytes, compressible or not, come back byte-exact: full, as a delta
    against unrelated bytes, and through the policy's own choice."""
    assert decode(Codec.IDENTITY, raw, raw) == raw
    assert decode(Codec.ZSTD, compress_full(raw, 3), raw) == raw
    assert decode(Codec.ZSTD_DELTA, compress_delta(raw, base_of(other), 3), raw,
                  base_of(other)) == raw
    chosen = compress_version(raw, snapshot_of(other))
    assert decode(chosen.codec, chosen.data, raw, base_of(other)) == raw


def test_bases_too_short_for_a_prefix_give_full_snapshots() -> None:
    """Empty or tiny bases are never used: the policy stores the version full."""
    assert compress_version(STATE, snapshot_of(b"{}")).codec is Codec.ZSTD
    with pytest.raises(ValueError):
        compress_delta(STATE, base_of(b"{}"), 3)


TINY = b'{"version":4,"serial":9,"lineage":"l"}'


def test_a_tiny_newest_version_is_passed_over_for_the_snapshot() -> None:
    """The newest version a delta of a few dozen bytes (a state of 38 bytes
    after a large one): the next version is a delta against the snapshot
    (2 links), never an attempt to use 38 bytes as a zstd prefix."""
    assert len(TINY) < MIN_BASE_SIZE
    chosen = compress_version(THIRD, snapshot_of(STATE, 1), newest=Newest(base_of(TINY), 2))
    assert (chosen.codec, chosen.base_sha256, chosen.links) == (
        Codec.ZSTD_DELTA, sha256_hex(STATE), 2)
    assert decode(chosen.codec, chosen.data, THIRD, base_of(STATE)) == THIRD
    again = compress_version(TINY, snapshot_of(STATE, 1), newest=Newest(base_of(TINY), 2))
    assert decode(again.codec, again.data, TINY, base_of(STATE)) == TINY


def _sized(size: int) -> st.SearchStrategy[bytes]:
    """Bytes of exactly C{size}: random (incompressible) or one byte repeated."""
    return st.one_of(st.binary(min_size=size, max_size=size),
                     st.integers(0, 255).map(lambda byte: bytes([byte]) * size))


#: States of the sizes where the codecs change their mind: empty, below and
#: at zstd's 8-byte prefix, around the smallest base, and ordinary ones.
_EDGE_BYTES = st.one_of(
    st.sampled_from([0, 1, 7, 8, 9, MIN_BASE_SIZE - 1, MIN_BASE_SIZE, MIN_BASE_SIZE + 1, 300,
                     1024]).flatmap(_sized),
    st.binary(max_size=600),
    st.sampled_from([STATE, NEXT, THIRD, TINY]))

#: Policies whose limits small inputs reach: deltas always kept, a large
#: size of a few hundred bytes, chains of two links or two hundred bytes.
_POLICIES = st.sampled_from([
    DEFAULT_POLICY, CompressionPolicy(snapshot_ratio=1e9),
    CompressionPolicy(snapshot_ratio=1e9, large_size=MIN_BASE_SIZE + 1),
    CompressionPolicy(snapshot_ratio=1e9, large_size=300, max_links=2, chain_bytes=200),
    CompressionPolicy(snapshot_ratio=1e9, max_versions_since=1)])


@settings(max_examples=300, deadline=None)
@given(raw=_EDGE_BYTES, snapshot=_EDGE_BYTES, newest=st.none() | _EDGE_BYTES,
       links=st.integers(2, 70), since=st.integers(0, 70), policy=_POLICIES)
def test_any_pair_of_states_is_stored_and_decodes_with_the_base_it_names(
        raw: bytes, snapshot: bytes, newest: bytes | None, links: int, since: int,
        policy: CompressionPolicy) -> None:
    """Any version offered any snapshot and newest version (empty, tiny,
    random, repeated, as large as the policy's limits) is stored -- as a
    delta against one of them or in full, never an error -- and decodes
    byte-exact with the base it names; a delta against the snapshot is 2
    links, against the newest version one more than it."""
    offered = Snapshot(base_of(snapshot), len(compress_full(snapshot, 3)), since)
    offered_newest = None if newest is None else Newest(base_of(newest), links)
    chosen = compress_version(raw, offered, policy, offered_newest)
    if chosen.codec is not Codec.ZSTD_DELTA:
        assert (chosen.base_sha256, chosen.links) == (None, 1)
        assert decode(chosen.codec, chosen.data, raw) == raw
        return
    if offered_newest is not None and chosen.links == links + 1:
        base = offered_newest.base
    else:
        assert chosen.links == 2
        base = offered.base
    assert chosen.base_sha256 == base.sha256
    assert MIN_BASE_SIZE <= len(base.raw) < policy.large_size
    assert decode(chosen.codec, chosen.data, raw, base) == raw


@settings(max_examples=40, deadline=None)
@given(histories())
def test_realistic_states_round_trip_as_snapshot_and_delta(history: tuple[bytes, bytes]) -> None:
    """A v4 state and its successor: the first stored full, the second as the
    policy chooses against the first; both decode byte-exact."""
    first, second = history
    stored = compress_version(first, None)
    assert stored.codec in (Codec.ZSTD, Codec.IDENTITY)
    assert decode(stored.codec, stored.data, first) == first
    chosen = compress_version(second, Snapshot(base_of(first), len(stored.data), 0))
    assert decode(chosen.codec, chosen.data, second, base_of(first)) == second


def test_a_small_change_is_stored_as_a_small_delta() -> None:
    """Two of fifty resources changed: the delta is a small fraction of the
    full frame, names its base's sha256 and needs that base to decode."""
    chosen = compress_version(NEXT, snapshot_of(STATE))
    assert chosen.codec is Codec.ZSTD_DELTA
    assert chosen.base_sha256 == sha256_hex(STATE)
    assert len(chosen.data) < len(compress_full(NEXT, 3)) / 5
    assert base_fingerprint(chosen.data) == bytes.fromhex(sha256_hex(STATE))[:8]
    assert decode(chosen.codec, chosen.data, NEXT, base_of(STATE)) == NEXT


def test_a_delta_refuses_another_base_and_a_missing_base() -> None:
    """Decoding a delta with a base other than its own, or none, is
    L{WrongBase}: a typed error, before any bytes are produced."""
    delta = compress_delta(NEXT, base_of(STATE), 3)
    with pytest.raises(WrongBase):
        decode(Codec.ZSTD_DELTA, delta, NEXT, base_of(NEXT))
    with pytest.raises(WrongBase):
        decode(Codec.ZSTD_DELTA, delta, NEXT, None)


def test_a_base_with_the_right_fingerprint_but_wrong_bytes_is_caught_by_sha256() -> None:
    """A base that claims the right sha256 but holds other bytes decodes to
    something else, which the version's sha256 refuses."""
    delta = compress_delta(NEXT, base_of(STATE), 3)
    impostor = Base(STATE.replace(b"node-1", b"node-X"), sha256_hex(STATE))
    with pytest.raises(CorruptVersion):
        decode(Codec.ZSTD_DELTA, delta, NEXT, impostor)


@pytest.mark.parametrize("damage", ["truncate", "extend", "flip", "empty"])
def test_a_damaged_frame_is_a_typed_error(damage: str) -> None:
    """Truncated, extended, bit-flipped or empty zstd frames never return
    bytes: each is a L{CorruptVersion} (no crash, no partial output)."""
    frame = compress_full(STATE, 3)
    damaged = {"truncate": frame[:-5], "extend": frame + b"\x00" * 3,
               "flip": frame[:40] + bytes([frame[40] ^ 0x10]) + frame[41:],
               "empty": b""}[damage]
    with pytest.raises(CorruptVersion):
        decode(Codec.ZSTD, damaged, STATE)


def test_sizes_and_digests_are_checked_for_every_codec() -> None:
    """Right bytes, wrong recorded size or sha256: refused, for identity too."""
    for codec, data in ((Codec.IDENTITY, STATE), (Codec.ZSTD, compress_full(STATE, 3))):
        with pytest.raises(CorruptVersion):
            decompress_version(codec, data, len(STATE) + 1, sha256_hex(STATE))
        with pytest.raises(CorruptVersion):
            decompress_version(codec, data, len(STATE), sha256_hex(NEXT))


def test_the_errors_are_502s_with_stable_codes() -> None:
    """A stored version that cannot be reproduced is the storage's fault:
    502 with a JSON code, never an opaque 500."""
    assert issubclass(WrongBase, CorruptVersion)
    assert StoredVersionUnreadable.status == 502
    assert (CorruptVersion.code, WrongBase.code) == (
        "stored_version_corrupt", "stored_version_wrong_base")


def test_the_policy_starts_a_new_snapshot_when_deltas_grow_or_age() -> None:
    """A delta larger than the ratio allows, or a snapshot with enough
    versions after it, gives a new full snapshot instead."""
    assert compress_version(NEXT, snapshot_of(STATE, 63)).codec is Codec.ZSTD_DELTA
    assert compress_version(NEXT, snapshot_of(STATE, 64)).codec is Codec.ZSTD
    strict = CompressionPolicy(snapshot_ratio=0.001)
    assert compress_version(NEXT, snapshot_of(STATE), strict).codec is Codec.ZSTD



def test_a_delta_is_the_next_link_of_the_newest_versions_chain() -> None:
    """Offered the newest version, the delta is made against it (one link
    more than it), holds only what changed since it, and decodes with it;
    without it, against the snapshot (2 links)."""
    newest = Newest(base_of(NEXT), 5)
    chained = compress_version(THIRD, snapshot_of(STATE, 4), newest=newest)
    assert (chained.codec, chained.base_sha256, chained.links) == (
        Codec.ZSTD_DELTA, sha256_hex(NEXT), 6)
    against_snapshot = compress_version(THIRD, snapshot_of(STATE, 4))
    assert (against_snapshot.base_sha256, against_snapshot.links) == (sha256_hex(STATE), 2)
    assert len(chained.data) < len(against_snapshot.data)
    assert decode(Codec.ZSTD_DELTA, chained.data, THIRD, base_of(NEXT)) == THIRD
    with pytest.raises(WrongBase):
        decode(Codec.ZSTD_DELTA, chained.data, THIRD, base_of(STATE))


def test_a_chain_stops_at_its_link_and_byte_limits() -> None:
    """A chain as long as max_links ends: a new snapshot.  A chain whose
    links times the state's size would pass chain_bytes is not extended:
    the delta goes against the snapshot.  Past max_versions_since, a new
    snapshot."""
    policy = CompressionPolicy(max_links=6)
    assert compress_version(THIRD, snapshot_of(STATE, 4), policy,
                            Newest(base_of(NEXT), 5)).links == 6
    assert compress_version(THIRD, snapshot_of(STATE, 5), policy,
                            Newest(base_of(NEXT), 6)).codec is Codec.ZSTD
    tight = CompressionPolicy(chain_bytes=3 * len(THIRD))
    assert compress_version(THIRD, snapshot_of(STATE, 1), tight,
                            Newest(base_of(NEXT), 2)).links == 3
    assert compress_version(THIRD, snapshot_of(STATE, 2), tight,
                            Newest(base_of(NEXT), 3)).links == 2
    assert compress_version(THIRD, snapshot_of(STATE, 64),
                            newest=Newest(base_of(NEXT), 2)).codec is Codec.ZSTD


def test_large_states_are_full_frames_at_the_large_level() -> None:
    """At and above the policy's large size no delta is tried, whatever the
    snapshot offered; the frame decodes byte-exact."""
    policy = CompressionPolicy(large_size=len(NEXT))
    chosen = compress_version(NEXT, snapshot_of(STATE), policy)
    assert chosen.codec is Codec.ZSTD
    assert chosen.data == compress_full(NEXT, policy.large_level)
    assert decode(chosen.codec, chosen.data, NEXT) == NEXT


def test_bytes_zstd_cannot_shrink_are_stored_as_they_are() -> None:
    """Incompressible bytes (an encrypted OpenTofu envelope, say) are kept as
    identity: no frame overhead, nothing to decode."""
    noise = os.urandom(2048)
    chosen = compress_version(noise, snapshot_of(STATE))
    assert (chosen.codec, chosen.data) == (Codec.IDENTITY, noise)
    assert decode(chosen.codec, chosen.data, noise) == noise


def test_a_multi_megabyte_delta_uses_a_window_that_reaches_its_base() -> None:
    """A 12 MB state and its successor: the delta (long-distance matching,
    a window over base and version) is tiny and decodes byte-exact."""
    big = json.dumps({"resources": resources(25_000)}, indent=2).encode()
    changed = big.replace(b'"node-24000"', b'"node-XXXXX"')
    assert len(big) > 8 * 1024 * 1024
    delta = compress_delta(changed, base_of(big), 1)
    assert len(delta) < 2048
    assert decode(Codec.ZSTD_DELTA, delta, changed, base_of(big)) == changed


@pytest.mark.skipif(shutil.which("zstd") is None, reason="the zstd command is not installed")
def test_the_zstd_command_reads_full_and_delta_payloads(tmp_path: Path) -> None:
    """Recovery needs no Kilolock: C{zstd -d} reads a full payload, and
    C{zstd -d --patch-from BASE} a delta (its fingerprint is a skippable frame)."""
    (tmp_path / "base").write_bytes(STATE)
    (tmp_path / "full.zst").write_bytes(compress_full(STATE, 3))
    (tmp_path / "delta.zst").write_bytes(compress_delta(NEXT, base_of(STATE), 3))
    full = subprocess.run(["zstd", "-q", "-d", "-c", str(tmp_path / "full.zst")],
                          capture_output=True, check=True)
    delta = subprocess.run(["zstd", "-q", "-d", "-c", "--patch-from", str(tmp_path / "base"),
                            str(tmp_path / "delta.zst")], capture_output=True, check=True)
    assert (full.stdout, delta.stdout) == (STATE, NEXT)


@settings(max_examples=40, deadline=None)
@given(st.binary(max_size=3000), st.integers(1, 700), st.sampled_from(list(Codec)))
def test_streamed_decoding_gives_the_same_bytes_in_bounded_pieces(
        raw: bytes, chunk: int, codec: Codec) -> None:
    """Pieces of at most C{chunk} bytes that join to exactly the version."""
    base = base_of(STATE)
    data = {Codec.IDENTITY: raw, Codec.ZSTD: compress_full(raw, 3),
            Codec.ZSTD_DELTA: compress_delta(raw, base, 1)}[codec]
    pieces = list(iter_decompress_version(codec, data, len(raw), sha256_hex(raw), base, chunk))
    assert b"".join(pieces) == raw
    assert all(0 < len(piece) <= chunk for piece in pieces)


@pytest.mark.parametrize("codec", [Codec.IDENTITY, Codec.ZSTD])
def test_a_streamed_version_that_does_not_match_never_yields_its_last_piece(
        codec: Codec) -> None:
    """Wrong sha256 recorded: the pieces before the last may go out, the last
    never does, and the error is typed, so a streamed body is never complete."""
    data = STATE if codec is Codec.IDENTITY else compress_full(STATE, 3)
    received = []
    with pytest.raises(CorruptVersion):
        for piece in iter_decompress_version(codec, data, len(STATE), sha256_hex(NEXT),
                                             chunk=4096):
            received.append(piece)
    assert 0 < len(b"".join(received)) < len(STATE)
    assert STATE.startswith(b"".join(received))


def test_a_truncated_frame_fails_while_streaming() -> None:
    """A frame cut short stops with L{CorruptVersion}, never a short body."""
    frame = compress_full(STATE, 3)
    with pytest.raises(CorruptVersion):
        list(iter_decompress_version(Codec.ZSTD, frame[:-20], len(STATE), sha256_hex(STATE),
                                     chunk=1024))
