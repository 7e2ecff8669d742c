"""A version's bytes as the PostgreSQL store keeps them: compressed payloads,
encrypted when the store has encryption keys.

Writes go through L{kilolock.atrest.versions.VersionCodec}: compressed (a
zstd delta against the state's newest version, the next link of a chain,
or against the chain's full snapshot, when the policy says so; else a new
full snapshot), then, with a key provider, sealed under a fresh data key
whose wrapping goes in C{data_key} and whose key id in C{kek_id}
(L{write_columns}).  Every write of a version, whatever path it takes, goes
through here: encryption comes with it.

The bases a write needs are remembered per state in this process
(L{ChainCache}: the newest version's raw bytes, the version's before it and
its chain's snapshot's); a process that does not know them (its first
write or read of the state, or after it dropped them) writes a full
snapshot.  Any version of the state is a correct base, so a stale cache
only makes a delta larger; the database checks that the base is there
(C{kl_write_state}).  A read selects a version's chain only down to a delta
whose base the cache holds (checked by the base's sha256), so a read of the
current version decodes its own payload against the version before it.

Reads decode a row's chain (from its snapshot or a held version, each link
opened with its own data key) and check the size of each link and the
sha256 of the version read and of the versions kept as bases.  Rows written
before compression are C{identity}; rows written before encryption was
turned on have no data key and are read as they are.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from attrs import frozen
from twisted.internet.defer import Deferred

from kilolock.atrest.compression import Base, Codec, Newest, Snapshot
from kilolock.atrest.envelope import VersionIdentity
from kilolock.atrest.stored import StoredPayload
from kilolock.atrest.versions import ChainEnds, StoredRow, VersionCodec
from kilolock.core.model import StateKey
from kilolock.store.postgres.codecs import bytes_from_hex

__all__ = ["CachedChain", "ChainCache", "ChainRow", "StoredColumns", "decode_chain",
           "identity_of", "write_columns"]

#: Raw bytes of versions a process remembers (all states together).
CHAIN_CACHE_BYTES = 64 << 20


@frozen
class CachedChain:
    """What this process knows of a state's newest version: the full
    snapshot its chain starts at (C{snapshot_number}) and, when the newest
    version is a delta on that chain, that version (C{newest_number}) and
    the version it is a delta against when that is not the snapshot
    (C{previous_number}: a read of the newest version decodes its one
    payload against it)."""

    snapshot_number: int
    snapshot: Snapshot
    newest_number: int | None = None
    newest: Newest | None = None
    previous_number: int | None = None
    previous: Base | None = None

    @property
    def held(self) -> dict[int, Base]:
        """The raw bytes held, by version number."""
        held = {self.snapshot_number: self.snapshot.base}
        if self.previous_number is not None and self.previous is not None:
            held[self.previous_number] = self.previous
        if self.newest_number is not None and self.newest is not None:
            held[self.newest_number] = self.newest.base
        return held

    @property
    def size(self) -> int:
        """The raw bytes held."""
        return sum(len(base.raw) for base in self.held.values())

    def links_of(self, number: int) -> int:
        """The payloads a read of held version C{number} decodes."""
        if number == self.snapshot_number or self.newest is None:
            return 1
        return self.newest.links - (number != self.newest_number)

    def base_number(self, stored: StoredPayload) -> int | None:
        """The number of the version C{stored} (encoded with this entry's
        bases) is a delta against; None for a full payload."""
        if stored.codec is not Codec.ZSTD_DELTA:
            return None
        # A delta against the snapshot is 2 links; the newest is 2 or more,
        # so a delta against it is 3 or more.
        return self.snapshot_number if stored.links == 2 else self.newest_number

    def followed_by(self, number: int, base_number: int, raw: bytes, sha256: str,
                    links: int) -> CachedChain | None:
        """This entry once version C{number} (C{raw}), a delta against
        version C{base_number} (the snapshot or the newest version), is the
        newest; None when C{base_number} is neither."""
        if base_number == self.snapshot_number:
            previous_number, previous = None, None
        elif base_number == self.newest_number and self.newest is not None:
            previous_number, previous = base_number, self.newest.base
        else:
            return None
        snapshot = Snapshot(self.snapshot.base, self.snapshot.stored_size,
                            number - self.snapshot_number)
        return CachedChain(self.snapshot_number, snapshot, number,
                           Newest(Base(raw, sha256), links), previous_number, previous)


class ChainCache:
    """The newest version of each state this process wrote or read, least
    recently used dropped first once they hold more than C{limit} raw bytes."""

    def __init__(self, limit: int = CHAIN_CACHE_BYTES) -> None:
        self._limit = limit
        self._size = 0
        self._entries: OrderedDict[StateKey, CachedChain] = OrderedDict()

    def get(self, key: StateKey) -> CachedChain | None:
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
        return entry

    def forget(self, key: StateKey) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._size -= entry.size

    def note(self, key: StateKey, entry: CachedChain | None) -> None:
        """Remember C{entry} as C{key}'s newest version (None: forget it)."""
        self.forget(key)
        if entry is None or entry.size > self._limit:
            return
        self._entries[key] = entry
        self._size += entry.size
        while self._size > self._limit and self._entries:
            _, dropped = self._entries.popitem(last=False)
            self._size -= dropped.size

    def written(self, key: StateKey, number: int, raw: bytes, sha256: str,
                stored: StoredPayload, offered: CachedChain | None) -> None:
        """Note that version C{number} of C{key}, C{raw} (whose sha256 is
        C{sha256}), was stored as C{stored}, encoded with the bases of
        C{offered}."""
        entry = None
        if stored.codec is Codec.ZSTD:
            entry = CachedChain(number, Snapshot(Base(raw, sha256), len(stored.payload), 0))
        elif offered is not None:
            base_number = offered.base_number(stored)
            if base_number is not None:
                entry = offered.followed_by(number, base_number, raw, sha256, stored.links)
        self.note(key, entry)


def write_columns(stored: StoredPayload) -> dict[str, Any]:
    """The columns an insert of C{stored} sets: C{codec}, C{payload},
    C{data_key} and C{kek_id} (both None when not encrypted)."""
    return {"codec": stored.codec.value, "payload": stored.payload,
            "data_key": stored.data_key, "kek_id": stored.key_id}


@frozen
class StoredColumns:
    """A version row's payload columns as a read selected them; C{payload}
    None: too large for the pool, read it by C{row_id} on the blocking path.
    C{data_key} is the wrapped data key of an encrypted row (None: plain)."""

    codec: str
    payload: bytes | None
    size: int
    sha256: str
    serial: int
    row_id: int
    data_key: bytes | None = None

    def stored(self) -> StoredPayload:
        assert self.payload is not None
        return StoredPayload(Codec(self.codec), self.payload, self.data_key)


def identity_of(key: StateKey, columns: StoredColumns) -> VersionIdentity:
    return VersionIdentity(key.tenant, key.path, columns.serial, columns.sha256, columns.size)


def decode_chain(codec: VersionCodec, key: StateKey, chain: Sequence[StoredColumns],
                 start: Base | None = None) -> Deferred[ChainEnds]:
    """The raw bytes of the last of C{chain} (payloads read; oldest first,
    from a full snapshot, or from a delta against C{start}), checked as
    L{VersionCodec.decode_chain} checks them.

    @return: a Deferred firing with the L{ChainEnds}; failing with the typed
        errors of L{kilolock.atrest.errors}."""
    return codec.decode_chain([StoredRow(row.stored(), identity_of(key, row)) for row in chain],
                              start)


@frozen
class ChainRow:
    """One row of a version's chain as C{statements.STORED_VERSION} selects
    it: its payload columns (the payload as selected: hex text, or None when
    too large for the pool), its number, when and why it was pruned (a
    tombstone), and its base's number and sha256 (None for a full row)."""

    columns: StoredColumns
    number: int
    pruned_at: Any
    prune_reason: str | None
    base_number: int | None
    base_sha256: str | None

    @classmethod
    def of(cls, row: Any) -> ChainRow:
        columns = columns_of(row[0:7])
        assert columns is not None
        number, pruned_at, prune_reason, base_number, base_sha256 = row[7:12]
        return cls(columns, int(number), pruned_at, prune_reason,
                   None if base_number is None else int(base_number),
                   None if base_sha256 is None else str(base_sha256))


def columns_of(values: Any) -> StoredColumns | None:
    """A (codec, payload, size, sha256, serial, id, data_key) group of a
    read's row (payload as bytes or None, data_key as hex text or None);
    None when the codec is NULL (no base)."""
    codec, payload, size, sha256, serial, row_id, data_key = values
    if codec is None:
        return None
    return StoredColumns(str(codec), payload, int(size), str(sha256), int(serial), int(row_id),
                         None if data_key is None else bytes_from_hex(data_key))
