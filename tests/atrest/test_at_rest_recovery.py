"""kilolock.atrest.recovery: with only a key file and the rows' columns,
every version's bytes come back and match their sha256."""

from __future__ import annotations

import os

import pytest
from attrs import evolve

from kilolock.atrest.compression import (
    Base,
    Codec,
    CompressionPolicy,
    Newest,
    Snapshot,
    sha256_hex,
)
from kilolock.atrest.envelope import VersionIdentity
from kilolock.atrest.errors import AuthenticationFailed, CorruptVersion, UnknownKey, WrongBase
from kilolock.atrest.keyring import KeyEncryptionKey, KeyRing
from kilolock.atrest.recovery import VersionRow, recover_state, recover_version
from kilolock.atrest.stored import encode_version
from tests.support.stub_client import state_body

KEYS = KeyRing([KeyEncryptionKey("k1", os.urandom(32))], "k1")
POLICY = CompressionPolicy(snapshot_ratio=1.0, max_versions_since=3)


def version(serial: int) -> bytes:
    return state_body(serial, resources=[{
        "mode": "managed", "type": "aws_instance", "name": f"n{index}",
        "provider": 'provider["registry.terraform.io/hashicorp/aws"]',
        "instances": [{"schema_version": 0, "sensitive_attributes": [], "attributes": {
            "id": f"i-{index:012x}", "revision": serial if index == serial % 30 else 0}}]}
        for index in range(30)])


def write_history(count: int, keys: KeyRing | None) -> tuple[list[VersionRow], list[bytes]]:
    """What a store following the policy would hold: rows and the raw bytes."""
    rows: list[VersionRow] = []
    raws: list[bytes] = []
    snapshot: tuple[int, bytes, int] | None = None
    for number in range(1, count + 1):
        raw = version(number)
        identity = VersionIdentity("acme", "prod/app", number, sha256_hex(raw), len(raw))
        offered = None if snapshot is None else Snapshot(
            Base(snapshot[1], sha256_hex(snapshot[1])), snapshot[2], number - 1 - snapshot[0])
        stored = encode_version(raw, identity, offered,
                                keys.generate() if keys else None, POLICY)
        base_number = snapshot[0] if stored.codec is Codec.ZSTD_DELTA and snapshot else None
        if stored.codec is not Codec.ZSTD_DELTA:
            snapshot = (number, raw, len(stored.payload))
        rows.append(VersionRow("acme", "prod/app", number, number, identity.sha256, len(raw),
                               stored.codec.value, stored.payload, stored.data_key, base_number))
        raws.append(raw)
    return rows, raws


@pytest.mark.parametrize("encrypted", [True, False])
def test_every_version_of_a_history_is_recovered(encrypted: bool) -> None:
    """Ten versions, snapshots and deltas mixed: each one's bytes back, in order."""
    rows, raws = write_history(10, KEYS if encrypted else None)
    assert {row.codec for row in rows} == {"zstd", "zstd-delta"}
    recovered = list(recover_state(KEYS if encrypted else None, rows))
    assert [each.raw for each in recovered] == raws
    assert all(each.error is None for each in recovered)
    delta = next(row for row in rows if row.codec == "zstd-delta")
    base = next(row for row in rows if row.number == delta.base_number)
    assert recover_version(KEYS, delta, [base]) == raws[delta.number - 1]


def test_a_broken_row_is_reported_and_the_others_recovered() -> None:
    """A tampered row, a missing base and an unknown key: each reported with
    its typed error; every other version still comes back."""
    rows, raws = write_history(8, KEYS)
    rows[1] = evolve(rows[1], payload=rows[1].payload[:-1] + b"!")
    outcomes = {each.row.number: each for each in recover_state(KEYS, rows)}
    assert isinstance(outcomes[2].error, AuthenticationFailed)
    assert [outcomes[n].raw for n in (1, 3, 4, 5, 6, 7, 8)] == [raws[n - 1] for n in
                                                                   (1, 3, 4, 5, 6, 7, 8)]
    lonely = [row for row in rows if row.codec == "zstd-delta"][:1]
    assert isinstance(next(recover_state(KEYS, lonely)).error, WrongBase)
    other = KeyRing([KeyEncryptionKey("k2", os.urandom(32))], "k2")
    assert isinstance(next(recover_state(other, rows[:1])).error, UnknownKey)


def test_rows_need_a_key_file_when_encrypted_and_a_known_codec() -> None:
    """No key file for an encrypted row, or a codec this version does not
    know: typed errors, not crashes."""
    rows, _ = write_history(1, KEYS)
    assert next(recover_state(None, rows)).error is not None
    plain, _ = write_history(1, None)
    odd = evolve(plain[0], codec="lz4")
    with pytest.raises(CorruptVersion, match="unknown codec"):
        recover_version(None, odd)
    with pytest.raises(WrongBase):
        recover_version(KEYS, next(row for row in write_history(3, KEYS)[0]
                                   if row.codec == "zstd-delta"))


def write_chain(count: int, keys: KeyRing | None) -> tuple[list[VersionRow], list[bytes]]:
    """A history written as one chain: a snapshot, then each version a
    delta against the one before it."""
    rows: list[VersionRow] = []
    raws: list[bytes] = []
    for number in range(1, count + 1):
        raw = version(number)
        identity = VersionIdentity("acme", "prod/app", number, sha256_hex(raw), len(raw))
        snapshot = None if not rows else Snapshot(Base(raws[0], rows[0].sha256),
                                                  len(rows[0].payload), number - 2)
        newest = None if number < 3 else Newest(Base(raws[-1], rows[-1].sha256), number - 1)
        stored = encode_version(raw, identity, snapshot, keys.generate() if keys else None,
                                CompressionPolicy(snapshot_ratio=1.0), newest)
        assert stored.links == number
        rows.append(VersionRow("acme", "prod/app", number, number, identity.sha256, len(raw),
                               stored.codec.value, stored.payload, stored.data_key,
                               None if number == 1 else number - 1))
        raws.append(raw)
    return rows, raws


@pytest.mark.parametrize("encrypted", [True, False])
def test_a_chain_is_recovered_whatever_the_order_of_its_rows(encrypted: bool) -> None:
    """Six versions, each a delta against the one before: every version
    back, in the order given (newest first too); one version alone with
    its chain; a damaged link fails itself and the versions after it, and
    only those."""
    keys = KEYS if encrypted else None
    rows, raws = write_chain(6, keys)
    assert [each.raw for each in recover_state(keys, rows)] == raws
    assert [each.raw for each in recover_state(keys, rows[::-1])] == raws[::-1]
    assert recover_version(keys, rows[5], rows[:5][::-1]) == raws[5]
    with pytest.raises(WrongBase, match="the base of version 5 is not among the rows"):
        recover_version(keys, rows[5], [rows[0], rows[1], rows[2], rows[4]])
    rows[3] = evolve(rows[3], payload=rows[3].payload[:-1] + b"!")
    outcomes = list(recover_state(keys, rows))
    assert [each.raw for each in outcomes[:3]] == raws[:3]
    assert all(each.raw is None and each.error is not None for each in outcomes[3:])
