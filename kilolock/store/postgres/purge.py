"""Purging one version in PostgreSQL (a leaked secret): its bytes go, its
tombstone and a C{version_purge} event stay, in one transaction.

A version may be the base of later deltas (C{base_number}: usually the
next version, the next link of its chain); those are re-encoded in the same
transaction, before its bytes go: each is decoded against the purged
version (itself decoded from its chain), the first becomes a full snapshot,
the others are compressed again against it (as deltas where the compression
policy says so), each sealed under a fresh data key when encryption is on.
The versions decoded against a re-encoded one keep their payloads: its raw
bytes are unchanged.  So no version loses its bytes but the one purged, and
no delta's C{base_number} names a tombstone.  The transaction locks
the state's row first (like a write), so no write or prune of the state
interleaves.

The projection tables hold only the current version's rows, and the
current version cannot be purged: a purged version has no projection rows
of its own.  Rows its write produced that the current version still holds
unchanged are the current version's (a secret that is still in the current
version must first be removed by a new version).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from attrs import evolve
from twisted.internet.defer import Deferred

from kilolock.atrest.compression import Base, Codec, Snapshot
from kilolock.atrest.versions import StoredRow
from kilolock.core.audit import control_detail
from kilolock.core.errors import StateNotFound, VersionIsCurrent, VersionNotFound
from kilolock.core.events import VERSION_PURGE
from kilolock.core.model import Principal, StateKey, StateVersion
from kilolock.retention.policy import pruned_error
from kilolock.store.postgres import payloads, rows, statements
from kilolock.store.postgres.codecs import bytes_from_hex
from kilolock.store.postgres.events import append_event_and_commit_txn
from kilolock.store.postgres.part import PayloadPart
from kilolock.store.postgres.rows import VERSION_COLUMNS

__all__ = ["PostgresPurge"]

# The version to purge, its id, whether deltas are made against it, and the
# state's current number.
PURGED_VERSION = f"""
SELECT {VERSION_COLUMNS}, v.pruned_at, v.prune_reason, v.id,
       EXISTS (SELECT 1 FROM state_versions d WHERE d.state_id = v.state_id
               AND d.number > v.number AND d.base_number = v.number),
       (SELECT max(c.number) FROM state_versions c WHERE c.state_id = v.state_id)
FROM state_versions v WHERE v.state_id = %(state)s AND v.number = %(number)s
"""  # noqa: S608 - constant columns

# The deltas decoded against it, oldest first (a delta's base is an earlier
# version: the versions after it, on state_versions_number).
DEPENDANTS = """
SELECT codec, payload, size, sha256, serial, id, data_key, number FROM state_versions
WHERE state_id = %(state)s AND number > %(number)s AND base_number = %(number)s
ORDER BY number
"""

#: The limit of STORED_VERSION under which a payload is selected: all.
EVERY_PAYLOAD = 2**31 - 1

REENCODE = """
UPDATE state_versions SET codec = %(codec)s, payload = %(payload)s, data_key = %(data_key)s,
    kek_id = %(kek_id)s, base_number = %(base_number)s
WHERE id = %(id)s
"""

TOMBSTONE = """
UPDATE state_versions SET payload = NULL, codec = 'pruned', data_key = NULL, kek_id = NULL,
    base_number = NULL, pruned_at = %(now)s, prune_reason = %(reason)s
WHERE id = %(id)s
"""


class PostgresPurge(PayloadPart):
    """Purges run by C{runner}, re-encoding with C{codec}; a purged state's
    entry is dropped from C{chains} (a write would find its base gone and
    write a full snapshot anyway)."""

    def purge_version(self, key: StateKey, number: int, reason: str,
                      actor: Principal) -> Deferred[StateVersion]:
        """See L{kilolock.store.interfaces.retention.IRetentionStore.purge_version}."""
        return self._runner.run_interaction(self._purge_txn, key, number, reason, actor)

    async def _purge_txn(self, cursor: Any, key: StateKey, number: int, reason: str,
                         actor: Principal) -> StateVersion:
        await cursor.execute(statements.LOCK_STATE_ROW, {"tenant": key.tenant,
                                                         "path": key.path})
        row = cursor.fetchone()
        if row is None:
            raise StateNotFound("no such state")
        params = {"state": row[0], "number": number}
        await cursor.execute(PURGED_VERSION, params)
        found = cursor.fetchone()
        if found is None:
            raise VersionNotFound(f"the state has no version {number}")
        version = rows.listed_version(found[:10])
        row_id, has_dependants, current = found[10:]
        if version.pruned:
            raise pruned_error(number, version.pruned_at, version.prune_reason)
        if number == current:
            raise VersionIsCurrent(
                f"version {number} is the state's current version: roll back to an earlier"
                " version (or write a new one) first, then purge it")
        self._chains.forget(key)
        reencoded = []
        if has_dependants:
            _, raw = await self._version_bytes_txn(cursor, key, number)
            purged = Base(raw, version.sha256)
            reencoded = await self._reencode_dependants(cursor, key, params, purged)
        now = self._clock()
        await cursor.execute(TOMBSTONE, {"id": row_id, "now": now, "reason": reason})
        await append_event_and_commit_txn(
            cursor, key.tenant, VERSION_PURGE, actor.name, key.path, now,
            serial=version.serial, sha256=version.sha256,
            detail=control_detail(actor, purged_version=number, reason=reason,
                                  reencoded=reencoded))
        return evolve(version, pruned_at=now, prune_reason=reason)

    async def make_snapshots_txn(self, cursor: Any, key: StateKey,
                                 numbers: Sequence[int]) -> None:
        """Re-encode the deltas C{numbers} as full snapshots (each sealed
        under a fresh data key when encryption is on), in the caller's
        transaction, which holds the state's row: the versions decoded
        against them keep their payloads."""
        if numbers:
            self._chains.forget(key)
        for number in numbers:
            row, raw = await self._version_bytes_txn(cursor, key, number)
            stored = await self._codec.encode(raw, payloads.identity_of(key, row), None)
            await cursor.execute(REENCODE, {**payloads.write_columns(stored),
                                            "id": row.row_id, "base_number": None})

    async def _version_bytes_txn(self, cursor: Any, key: StateKey, number: int,
                                 ) -> tuple[payloads.StoredColumns, bytes]:
        """Version C{number}'s payload columns and raw bytes, decoded from
        its chain (a delta or a base of deltas: never a large state, so
        every payload is selected here)."""
        await cursor.execute(statements.STORED_VERSION, {
            "tenant": key.tenant, "path": key.path, "number": number, "known": [],
            "limit": EVERY_PAYLOAD})
        chain = []
        for row in map(payloads.ChainRow.of, cursor.fetchall()):
            hex_text: Any = row.columns.payload  # selected as hex text
            chain.append(evolve(row.columns, payload=bytes_from_hex(hex_text)))
        return chain[-1], (await payloads.decode_chain(self._codec, key, chain)).last

    async def _reencode_dependants(self, cursor: Any, key: StateKey, params: dict[str, Any],
                                   purged: Base) -> list[int]:
        """Re-encode the deltas made against C{purged}: the first as a full
        snapshot, the others against it.  @return: their numbers."""
        await cursor.execute(DEPENDANTS, params)
        dependants = [(payloads.columns_of((*values[:1], bytes_from_hex(values[1]), *values[2:7])),
                       int(values[7])) for values in cursor.fetchall()]
        if not dependants:
            return []
        snapshot: tuple[int, Snapshot] | None = None
        numbers = []
        for dependant, dependant_number in dependants:
            assert dependant is not None
            identity = payloads.identity_of(key, dependant)
            raw = await self._codec.decode(StoredRow(dependant.stored(), identity), (), purged)
            stored = await self._codec.encode(raw, identity,
                                              None if snapshot is None else snapshot[1])
            delta = stored.codec is Codec.ZSTD_DELTA
            await cursor.execute(REENCODE, {
                **payloads.write_columns(stored), "id": dependant.row_id,
                "base_number": snapshot[0] if delta and snapshot is not None else None})
            numbers.append(dependant_number)
            if snapshot is None and stored.codec is Codec.ZSTD:
                snapshot = (dependant_number,
                            Snapshot(Base(raw, dependant.sha256), len(stored.payload), 0))
            elif snapshot is not None and delta:
                snapshot = (snapshot[0], evolve(snapshot[1],
                                                versions_since=snapshot[1].versions_since + 1))
        return numbers
