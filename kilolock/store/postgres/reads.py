"""The state lane's reads in PostgreSQL: bytes, summaries, versions, the
projection and resource search.

Each call is one transaction.  A version's bytes are its stored payload
decoded (with its chain's, for a delta: one statement selects them all, and
stops at a version this process holds the bytes of;
L{kilolock.store.postgres.payloads}); large values are decoded in a thread,
and a payload of at least L{large.LARGE_TRANSFER_BYTES} is read on the
blocking path with a binary result (L{large.read_payload_txn}).  The SQL is
L{kilolock.store.postgres.statements}.
"""

from __future__ import annotations

from typing import Any

from attrs import evolve
from twisted.internet.defer import Deferred, ensureDeferred
from twisted.logger import Logger

from kilolock.atrest.compression import Base, Newest, Snapshot
from kilolock.atrest.errors import StoredVersionUnreadable, WrongBase
from kilolock.atrest.versions import ChainEnds, VersionCodec
from kilolock.core.errors import StateNotFound
from kilolock.core.model import Projection, StateKey, StateSummary, StateVersion
from kilolock.retention.policy import pruned_error
from kilolock.rules.resources import ResourceMatch, ResourceQuery, check_query
from kilolock.store.postgres import large, payloads, rows, statements
from kilolock.store.postgres.codecs import bytes_from_hex
from kilolock.store.postgres.runner import TransactionRunner

__all__ = ["PostgresReads"]

#: The codecs of a tombstone's row, of a delta and of a full snapshot.
PRUNED = "pruned"
DELTA = "zstd-delta"
SNAPSHOT = "zstd"

log = Logger()

#: What is logged when a stored version fails its checks.
UNREADABLE = ("a stored version could not be read ({code}): tenant {tenant}, state {path},"
              " serial {serial}: {message}")


class PostgresReads:
    """Reads of states, run by C{runner}."""

    def __init__(self, runner: TransactionRunner, codec: VersionCodec,
                 chains: payloads.ChainCache | None = None) -> None:
        self._runner = runner
        self._codec = codec
        self._chains = chains if chains is not None else payloads.ChainCache()

    # -- bytes ----------------------------------------------------------

    def read_current(self, key: StateKey) -> Deferred[bytes | None]:
        """@return: a Deferred firing with the current version's exact bytes,
        or None when the state has no version."""
        return ensureDeferred(self._state_bytes(key, statements.CURRENT_STORED_VERSION, {}))

    def read_version(self, key: StateKey, number: int) -> Deferred[bytes | None]:
        """@return: a Deferred firing with the bytes of version C{number}, or
        None when the state has no such version."""
        return ensureDeferred(self._state_bytes(key, statements.STORED_VERSION,
                                                {"number": number}))

    async def _state_bytes(self, key: StateKey, query: str,
                           params: dict[str, Any]) -> bytes | None:
        """Select one version's chain of payload columns (C{query}), down to
        a delta whose base the chain cache holds; read a payload too large
        for the pool on the blocking path; decode.  A read of the current
        version leaves what it decoded in the cache.
        @return: the bytes (None: no such version)."""
        cached = self._chains.get(key)
        held = {} if cached is None else cached.held

        async def select(cursor: Any) -> Any:
            await cursor.execute(query, {**params, "tenant": key.tenant, "path": key.path,
                                         "known": list(held),
                                         "limit": large.LARGE_TRANSFER_BYTES})
            return [payloads.ChainRow.of(row) for row in cursor.fetchall()]

        found: list[payloads.ChainRow] = await self._runner.run_interaction(select)
        if not found:
            return None
        first, target = found[0], found[-1]
        if target.columns.codec == PRUNED:
            raise pruned_error(target.number, rows.utc(target.pruned_at), target.prune_reason)
        start = None
        if first.columns.codec == DELTA and first.base_number in held:
            start = held[first.base_number]
            if start.sha256 != first.base_sha256:
                # Another process deleted the state and wrote it again.
                self._chains.forget(key)
                return await self._state_bytes(key, query, params)
        chain: list[payloads.StoredColumns] = []
        try:
            if any(row.columns.codec == PRUNED for row in found):
                raise WrongBase(f"version {target.number} is a delta on a pruned version")
            for row in found:
                chain.append(await self._payload_read(row.columns))
            ends = await payloads.decode_chain(self._codec, key, chain, start)
        except StoredVersionUnreadable as error:
            # An operator wants to know at once: a damaged or tampered
            # row, or keys that do not match it (never bytes or keys).
            log.warn(UNREADABLE, code=error.code, tenant=key.tenant, path=key.path,
                     serial=target.columns.serial, message=error.message)
            raise
        if query is statements.CURRENT_STORED_VERSION:
            self._chains.note(key, _read_entry(
                cached if start is not None else None, found, chain, ends))
        return ends.last

    async def _payload_read(self, columns: payloads.StoredColumns) -> payloads.StoredColumns:
        """C{columns} with their payload as bytes: decoded from hex (in a
        thread when big), or read on the blocking path when it was too
        large to select on the pool."""
        hex_text: Any = columns.payload
        if hex_text is None:
            payload = await self._runner.run_interaction(large.read_payload_txn,
                                                         columns.row_id, blocking=True)
            if payload is None:
                raise StateNotFound("the version was deleted meanwhile")
        elif len(hex_text) >= 2 * large.LARGE_UPLOAD_BYTES:
            payload = await self._runner.in_thread(bytes_from_hex, hex_text)
        else:
            payload = bytes_from_hex(hex_text)
        return evolve(columns, payload=payload)

    # -- summaries and versions -----------------------------------------

    def get_summary(self, key: StateKey) -> Deferred[StateSummary | None]:
        """@return: a Deferred firing with the L{StateSummary} of C{key}, or
        None when the state does not exist."""

        async def summary(cursor: Any) -> StateSummary | None:
            summaries = await self._summaries_txn(cursor, key.tenant, key.path)
            return summaries[0] if summaries else None

        return self._runner.run_interaction(summary)

    def list_states(self, tenant: str) -> Deferred[list[StateSummary]]:
        """@return: a Deferred firing with the tenant's L{StateSummary} list,
        ordered by path (by code point, as Python sorts)."""
        return self._runner.run_interaction(self._summaries_txn, tenant, None)

    async def _summaries_txn(self, cursor: Any, tenant: str,
                             path: str | None) -> list[StateSummary]:
        await cursor.execute(
            statements.SUMMARIES + (statements.SUMMARY_OF_PATH if path is not None else "")
            + statements.SUMMARY_ORDER, {"tenant": tenant, "path": path})
        summaries = []
        for row in cursor.fetchall():
            (state_path, updated_at, version_count, info, acquired_at,
             lock_principal, token_digest, resource_count, *version_columns) = row
            summaries.append(StateSummary(
                key=StateKey(tenant, state_path),
                current=None if version_columns[0] is None else rows.version(version_columns),
                version_count=version_count,
                resource_count=resource_count or 0,
                lock=None if info is None else rows.held_lock((info, acquired_at,
                                                               lock_principal, token_digest)),
                updated_at=rows.utc(updated_at),
            ))
        return summaries

    def list_versions(self, key: StateKey) -> Deferred[list[StateVersion]]:
        """@return: a Deferred firing with the versions of C{key}, oldest first
        (empty when the state does not exist)."""
        return self._runner.run_interaction(self._list_versions_txn, key)

    async def _list_versions_txn(self, cursor: Any, key: StateKey) -> list[StateVersion]:
        await cursor.execute(statements.VERSIONS, (key.tenant, key.path))
        return [rows.listed_version(row) for row in cursor.fetchall()]

    # -- the projection -------------------------------------------------

    def get_projection(self, key: StateKey) -> Deferred[Projection | None]:
        """@return: a Deferred firing with the L{Projection} of the current
        version, or None when there is none or it was not projected.

        JSON columns come back in the parser's canonical form (compact,
        key-sorted, ASCII); PostgreSQL's jsonb keeps their values, not their
        spelling, so a float such as C{1e+16} comes back as C{10000000000000000}.
        """

        async def projection() -> Projection | None:
            found = await self._runner.run_interaction(self._projection_rows_txn, key)
            if found is None:
                return None
            if sum(len(part) for part in found) > large.LARGE_PROJECTION_ROWS:
                return await self._runner.in_thread(rows.projection_from_rows, *found)
            return rows.projection_from_rows(*found)

        return ensureDeferred(projection())

    async def _projection_rows_txn(self, cursor: Any, key: StateKey) -> Any:
        await cursor.execute(statements.READ_ONLY_SNAPSHOT)
        await cursor.execute(statements.CURRENT_PROJECTED, (key.tenant, key.path))
        row = cursor.fetchone()
        if row is None or not row[1]:
            return None
        state_id = row[0]
        found = []
        for query in (statements.SELECT_RESOURCES, statements.SELECT_DEPENDENCIES,
                      statements.SELECT_OUTPUTS):
            await cursor.execute(query, (state_id,))
            found.append(cursor.fetchall())
        return found

    def query_resources(self, tenant: str,
                        query: ResourceQuery) -> Deferred[list[ResourceMatch]]:
        """The current resource rows of C{tenant}'s states matching C{query},
        answered from the C{resources} table (see
        L{kilolock.store.interfaces.states.IStateStore}).

        @return: a Deferred firing with a list of L{ResourceMatch}; failing
            with L{kilolock.core.errors.BadRequest} for an unusable query.
        """
        statement, params = statements.select_matches(query)
        params["tenant"] = tenant

        async def select(cursor: Any) -> Any:
            await cursor.execute(statement, params)
            return cursor.fetchall()

        async def matches() -> list[ResourceMatch]:
            check_query(query)
            found = await self._runner.run_interaction(select)
            if len(found) > large.LARGE_PROJECTION_ROWS:
                return await self._runner.in_thread(rows.matches_from_rows, found)
            return rows.matches_from_rows(found)

        return ensureDeferred(matches())


def _read_entry(cached: payloads.CachedChain | None, found: list[payloads.ChainRow],
                chain: list[payloads.StoredColumns],
                ends: ChainEnds) -> payloads.CachedChain | None:
    """What a read of the current version leaves in the chain cache: the
    chain read, from its snapshot (C{cached} None) or from a version
    C{cached} holds, ending at the current version.  None: forget the
    state (its current version is not compressed, or its chain starts at a
    row that is not a zstd snapshot)."""
    last, number = chain[-1], found[-1].number
    if last.codec == SNAPSHOT:
        assert last.payload is not None
        return payloads.CachedChain(number, Snapshot(Base(ends.last, last.sha256),
                                                     len(last.payload), 0))
    if last.codec != DELTA or ends.before_last is None:
        return None
    if cached is not None:
        entry = payloads.CachedChain(cached.snapshot_number, cached.snapshot)
        assert found[0].base_number is not None
        links = len(chain) + cached.links_of(found[0].base_number)
    elif chain[0].codec == SNAPSHOT and ends.first_full is not None:
        first = chain[0]
        assert first.payload is not None
        entry = payloads.CachedChain(found[0].number, Snapshot(
            Base(ends.first_full, first.sha256), len(first.payload), 0))
        links = len(chain)
    else:
        return None
    base_number, base_sha256 = found[-1].base_number, found[-1].base_sha256
    assert base_number is not None and base_sha256 is not None
    if base_number != entry.snapshot_number:
        entry = evolve(entry, newest_number=base_number,
                       newest=Newest(Base(ends.before_last, base_sha256), links - 1))
    return entry.followed_by(number, base_number, ends.last, last.sha256, links)
