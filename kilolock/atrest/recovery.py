"""Getting state bytes back without a running Kilolock: the offline decrypt core.

Given the key file and the columns of version rows (read from the database
or from a C{pg_dump}), reproduce every version's raw bytes and check each
against the sha256 its row records.  Nothing here needs the server, the
reactor or a network: the key file's L{KeyRing} unwraps the data keys.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence

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
    the version a delta was made against.
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
                    chain: Sequence[VersionRow] = ()) -> bytes:
    """The raw bytes of C{row}, checked against its sha256.

    A delta row needs its C{chain}: the rows it is decoded from (its base,
    its base's base, ... back to a full snapshot), in any order.  C{keys}
    may be None when no row is encrypted.  Raises the typed errors of
    L{kilolock.atrest.errors}.
    """
    return _Recovery(keys, [*chain, row]).raw(row)


def recover_state(keys: KeyRing | None,
                  rows: Iterable[VersionRow]) -> Iterator[RecoveredVersion]:
    """Every version of one state, in the order given: deltas find their
    base among C{rows} by number, and each version is decoded once (its raw
    bytes are kept while a delta not yet recovered needs them).  A row that
    fails is reported and the others go on."""
    recovery = _Recovery(keys, rows)
    for row in recovery.by_number.values():
        try:
            yield RecoveredVersion(row, recovery.raw(row))
        except StoredVersionUnreadable as error:
            yield RecoveredVersion(row, error=error)


class _Recovery:
    """Decodes the rows of one state, each base once."""

    def __init__(self, keys: KeyRing | None, rows: Iterable[VersionRow]) -> None:
        self._keys = keys
        self.by_number = {row.number: row for row in rows}
        self._waiting = Counter(row.base_number for row in self.by_number.values()
                                if row.base_number is not None
                                and row.codec == Codec.ZSTD_DELTA.value)
        self._decoded: dict[int, Base] = {}

    def raw(self, row: VersionRow) -> bytes:
        """The raw bytes of C{row}: its chain is walked back to a full
        snapshot or a version already decoded, then decoded forward."""
        chain = [row]
        while chain[-1].codec == Codec.ZSTD_DELTA.value and chain[-1].number not in self._decoded:
            link = chain[-1]
            base_row = None if link.base_number is None else self.by_number.get(link.base_number)
            if base_row is None:
                raise WrongBase(f"the base of version {link.number} is not among the rows")
            if base_row.number >= link.number:
                raise CorruptVersion(f"version {link.number} names a later version as its base")
            if base_row.number in self._decoded:
                break
            chain.append(base_row)
        if chain[-1].number in self._decoded:
            return self._decoded[chain[-1].number].raw
        base = None
        if chain[-1].codec == Codec.ZSTD_DELTA.value:
            assert chain[-1].base_number is not None
            base = self._decoded[chain[-1].base_number]
        raw = b""
        for each in reversed(chain):
            raw = decode_version(each.stored(), each.identity, base, _data_key(self._keys, each))
            self._done(each, raw)
            base = Base(raw, each.sha256)
        return raw

    def _done(self, row: VersionRow, raw: bytes) -> None:
        """Keep C{row}'s bytes while deltas wait for them; let its base go
        once no delta waits for it."""
        if self._waiting[row.number] > 0:
            self._decoded[row.number] = Base(raw, row.sha256)
        if row.codec == Codec.ZSTD_DELTA.value and row.base_number is not None:
            self._waiting[row.base_number] -= 1
            if self._waiting[row.base_number] <= 0:
                self._decoded.pop(row.base_number, None)
