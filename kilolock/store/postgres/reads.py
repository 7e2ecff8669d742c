"""The state lane's reads in PostgreSQL: bytes, summaries, versions, the
projection and resource search.

Each call is one transaction.  A version's bytes are its stored payload
decoded (with its base snapshot's, for a delta: one statement selects both;
L{kilolock.store.postgres.payloads}); large values are decoded in a thread,
and a payload of at least L{large.LARGE_TRANSFER_BYTES} is read on the
blocking path with a binary result (L{large.read_payload_txn}).  The SQL is
L{kilolock.store.postgres.statements}.
"""

from __future__ import annotations

from typing import Any

from attrs import evolve
from twisted.internet.defer import Deferred, ensureDeferred

from kilolock.atrest.versions import VersionCodec
from kilolock.errors import StateNotFound
from kilolock.model import (
    Projection,
    ResourceMatch,
    ResourceQuery,
    StateKey,
    StateSummary,
    StateVersion,
)
from kilolock.resource_query import check_query
from kilolock.store.postgres import large, payloads, rows, statements
from kilolock.store.postgres.codecs import bytes_from_hex
from kilolock.store.postgres.runner import TransactionRunner

__all__ = ["PostgresReads"]


class PostgresReads:
    """Reads of states, run by C{runner}."""

    def __init__(self, runner: TransactionRunner, codec: VersionCodec) -> None:
        self._runner = runner
        self._codec = codec

    # -- bytes ----------------------------------------------------------

    def read_current(self, key: StateKey) -> Deferred[bytes | None]:
        """@return: a Deferred firing with the current version's exact bytes,
        or None when the state has no version."""
        return self._state_bytes(key, statements.CURRENT_STORED_VERSION, {})

    def read_version(self, key: StateKey, number: int) -> Deferred[bytes | None]:
        """@return: a Deferred firing with the bytes of version C{number}, or
        None when the state has no such version."""
        return self._state_bytes(key, statements.STORED_VERSION, {"number": number})

    def _state_bytes(self, key: StateKey, query: str,
                     params: dict[str, Any]) -> Deferred[bytes | None]:
        """Select one version's payload columns and its base's (C{query});
        read a payload too large for the pool on the blocking path; decode.
        @return: a Deferred firing with the bytes (None: no such version)."""

        async def select(cursor: Any) -> Any:
            await cursor.execute(query, {**params, "tenant": key.tenant, "path": key.path,
                                         "limit": large.LARGE_TRANSFER_BYTES})
            return cursor.fetchone()

        async def read() -> bytes | None:
            row = await self._runner.run_interaction(select)
            if row is None:
                return None
            version = await self._payload_read(payloads.columns_of(row[0:6]))
            base = await self._payload_read(payloads.columns_of(row[6:12]))
            assert version is not None
            return await payloads.decode_stored(self._codec, key, version, base)

        return ensureDeferred(read())

    async def _payload_read(self, columns: payloads.StoredColumns | None,
                            ) -> payloads.StoredColumns | None:
        """C{columns} with their payload as bytes: decoded from hex (in a
        thread when big), or read on the blocking path when it was too
        large to select on the pool."""
        if columns is None:
            return None
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
        return [rows.version(row) for row in cursor.fetchall()]

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
        L{kilolock.interfaces.IStateStore}).

        @return: a Deferred firing with a list of L{ResourceMatch}; failing
            with L{kilolock.errors.BadRequest} for an unusable query.
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
