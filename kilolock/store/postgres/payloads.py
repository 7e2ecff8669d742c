"""A version's bytes as the PostgreSQL store keeps them: compressed payloads.

Writes compress with L{kilolock.atrest.versions.VersionCodec} (plaintext:
no key provider yet; encryption seals the compressed payload later, so the
layering holds): a new version is a zstd delta against the newest full
snapshot of its state when the policy says so, else a new full snapshot.
The snapshot a write needs is remembered per state in this process
(L{SnapshotCache}); a process that does not know it (its first write of the
state, or after another process wrote a newer snapshot and this one's was
dropped) writes a full snapshot.  Any full snapshot of the state is a
correct base, so a stale cache only makes a delta larger; the database
checks that the base is there (C{kl_write_state}).

Reads decode a row (and, for a delta, its base) and check the size and
sha256 the row records.  Rows written before compression are C{identity}.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from attrs import frozen
from twisted.internet.defer import Deferred

from kilolock.atrest.compression import Base, Codec, Snapshot
from kilolock.atrest.envelope import VersionIdentity
from kilolock.atrest.stored import StoredPayload
from kilolock.atrest.versions import StoredRow, VersionCodec
from kilolock.model import StateKey

__all__ = ["CachedSnapshot", "SnapshotCache", "StoredColumns", "decode_stored", "identity_of"]

#: Bytes of snapshots a process remembers (raw bytes, all states together).
SNAPSHOT_CACHE_BYTES = 64 << 20


@frozen
class CachedSnapshot:
    """The newest full snapshot of a state this process knows: its
    C{state_versions.number} and what a delta against it needs."""

    number: int
    snapshot: Snapshot


class SnapshotCache:
    """The newest full snapshot per state, least recently written dropped
    first once they hold more than C{limit} raw bytes."""

    def __init__(self, limit: int = SNAPSHOT_CACHE_BYTES) -> None:
        self._limit = limit
        self._size = 0
        self._entries: OrderedDict[StateKey, CachedSnapshot] = OrderedDict()

    def get(self, key: StateKey) -> CachedSnapshot | None:
        return self._entries.get(key)

    def forget(self, key: StateKey) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._size -= len(entry.snapshot.base.raw)

    def written(self, key: StateKey, number: int, raw: bytes, sha256: str,
                stored: StoredPayload) -> None:
        """Note that version C{number} of C{key}, C{raw} (whose sha256 is
        C{sha256}), was stored as C{stored}."""
        entry = self._entries.get(key)
        if stored.codec is Codec.ZSTD_DELTA and entry is not None:
            snapshot = entry.snapshot
            self._entries[key] = CachedSnapshot(entry.number, Snapshot(
                snapshot.base, snapshot.stored_size, snapshot.versions_since + 1))
            self._entries.move_to_end(key)
            return
        self.forget(key)
        if stored.codec is not Codec.ZSTD or len(raw) > self._limit:
            return
        self._entries[key] = CachedSnapshot(number, Snapshot(
            Base(raw, sha256), len(stored.payload), 0))
        self._size += len(raw)
        while self._size > self._limit and self._entries:
            _, dropped = self._entries.popitem(last=False)
            self._size -= len(dropped.snapshot.base.raw)


@frozen
class StoredColumns:
    """A version row's payload columns as a read selected them; C{payload}
    None: too large for the pool, read it by C{row_id} on the blocking path."""

    codec: str
    payload: bytes | None
    size: int
    sha256: str
    serial: int
    row_id: int


def identity_of(key: StateKey, columns: StoredColumns) -> VersionIdentity:
    return VersionIdentity(key.tenant, key.path, columns.serial, columns.sha256, columns.size)


def decode_stored(codec: VersionCodec, key: StateKey, row: StoredColumns,
                  base: StoredColumns | None) -> Deferred[bytes]:
    """The raw bytes of C{row} (payloads read), checked against its sha256.

    @return: a Deferred firing with them; failing with the typed errors of
        L{kilolock.atrest.errors}."""
    assert row.payload is not None
    stored = StoredRow(StoredPayload(Codec(row.codec), row.payload), identity_of(key, row))
    base_row = None
    if base is not None and row.codec == Codec.ZSTD_DELTA.value:
        assert base.payload is not None
        base_row = StoredRow(StoredPayload(Codec(base.codec), base.payload),
                             identity_of(key, base))
    return codec.decode(stored, base_row)


def columns_of(values: Any) -> StoredColumns | None:
    """A (codec, payload, size, sha256, serial, id) group of a read's row
    (payload as bytes or None); None when the codec is NULL (no base)."""
    codec, payload, size, sha256, serial, row_id = values
    if codec is None:
        return None
    return StoredColumns(str(codec), payload, int(size), str(sha256), int(serial), int(row_id))
