"""Getting state bytes back without a running Kilolock: the offline decrypt core.

Given the key file and the columns of version rows (read from the database
or from a C{pg_dump}), reproduce every version's raw bytes and check each
against the sha256 its row records.  Nothing here needs the server, the
reactor or a network: the key file's L{KeyRing} unwraps the data keys.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from attrs import field, frozen

from kilolock.atrest.compression import Base, Codec
from kilolock.atrest.envelope import VersionColumns, WrappedKey
from kilolock.atrest.errors import CorruptVersion, StoredVersionUnreadable, WrongBase
from kilolock.atrest.keyring import KeyRing
from kilolock.atrest.stored import StoredPayload, decode_version


@frozen
class VersionRow(VersionColumns):
    """The columns of one version row that its bytes depend on.

    C{data_key} is None for a row stored unencrypted; C{base_number} names
    the snapshot a delta was made against.
    """

    payload: bytes = field(repr=lambda data: f"<{len(data)} bytes>")
    data_key: bytes | None = None
    base_number: int | None = None

    def stored(self) -> StoredPayload:
        try:
            codec = Codec(self.codec)
        except ValueError:
            raise CorruptVersion(f"version {self.number} has an unknown codec") from None
        return StoredPayload(codec, self.payload, self.data_key)


@frozen
class RecoveredVersion:
    """One row's outcome: its raw bytes, or why they could not be reproduced."""

    row: VersionRow
    raw: bytes | None = field(default=None, repr=False)
    error: StoredVersionUnreadable | None = None


def _data_key(keys: KeyRing | None, row: VersionRow) -> bytes | None:
    if row.data_key is None:
        return None
    if keys is None:
        raise StoredVersionUnreadable(f"version {row.number} is encrypted: a key file is needed")
    return keys.unwrap(WrappedKey.from_bytes(row.data_key))


def recover_version(keys: KeyRing | None, row: VersionRow,
                    base_row: VersionRow | None = None) -> bytes:
    """The raw bytes of C{row}, checked against its sha256.

    A delta row needs C{base_row}, the row its C{base_number} names, which
    must hold a full snapshot.  C{keys} may be None when no row is encrypted.
    Raises the typed errors of L{kilolock.atrest.errors}.
    """
    base = None
    if row.codec == Codec.ZSTD_DELTA.value:
        if base_row is None or base_row.number != row.base_number:
            raise WrongBase(f"version {row.number} is a delta: its base row is needed")
        if base_row.codec == Codec.ZSTD_DELTA.value:
            raise WrongBase(f"the base of version {row.number} is itself a delta")
        base = Base(recover_version(keys, base_row), base_row.sha256)
    return decode_version(row.stored(), row.identity, base, _data_key(keys, row))


def recover_state(keys: KeyRing | None,
                  rows: Iterable[VersionRow]) -> Iterator[RecoveredVersion]:
    """Every version of one state, in the order given: deltas find their base
    among C{rows} by number; each snapshot is decoded once for the deltas
    that follow it.  A row that fails is reported and the others go on."""
    by_number = {row.number: row for row in rows}
    snapshot: tuple[int, bytes] | None = None
    for row in by_number.values():
        try:
            if row.codec != Codec.ZSTD_DELTA.value:
                raw = recover_version(keys, row)
                snapshot = (row.number, raw)
            else:
                base_row = None if row.base_number is None else by_number.get(row.base_number)
                if base_row is None:
                    raise WrongBase(f"the base of version {row.number} is not among the rows")
                if snapshot is None or snapshot[0] != base_row.number:
                    snapshot = (base_row.number, recover_version(keys, base_row))
                raw = decode_version(row.stored(), row.identity,
                                     Base(snapshot[1], base_row.sha256), _data_key(keys, row))
            yield RecoveredVersion(row, raw)
        except StoredVersionUnreadable as error:
            yield RecoveredVersion(row, error=error)
