"""A write of several states in one PostgreSQL transaction (a state operation
that moves resources between states, or splits one).

The transaction runs on the blocking path (L{kilolock.store.postgres.large}:
versions and projections go in with COPY, whatever their size) and extends
the lock order of C{006_write_path.sql} to several states:

    the states' rows, in the order of their ids (one statement)
    -> their lock rows, in the same order (FOR SHARE: an UNLOCK waits)
    -> their versions and projection rows
    -> the tenant's chain head (the events, last)

Two such transactions take the rows they share in the same order, and a
single-state write takes one state row before the chain head, so no cycle
of waits can form.  Every write is checked by L{kilolock.rules.locks} before
anything is inserted; any refusal or failure rolls everything back.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from twisted.internet.defer import Deferred, ensureDeferred

from kilolock.atrest.envelope import VersionIdentity
from kilolock.core.audit import write_detail
from kilolock.core.model import Principal, StateVersion, WriteOutcome
from kilolock.rules import locks
from kilolock.rules.locks import Replay
from kilolock.stateops.model import StateWrite, version_appeared
from kilolock.store.postgres import large, rows, statements
from kilolock.store.postgres.events import append_event_txn
from kilolock.store.postgres.part import PayloadPart

__all__ = ["PostgresMultiWrites"]

_STATE_ID = "SELECT id FROM states WHERE tenant_id = %(tenant)s AND path = %(path)s"
_LOCK_STATE_ROWS = "SELECT id FROM states WHERE id = ANY(%s) ORDER BY id FOR UPDATE"


class PostgresMultiWrites(PayloadPart):
    """Writes of several states, run by C{runner}; payloads encoded by
    C{codec} (full snapshots, noted in C{chains})."""

    def write_states(self, writes: Sequence[StateWrite], principal: Principal,
                     event_kind: str) -> Deferred[list[WriteOutcome]]:
        """See L{kilolock.store.interfaces.stateops.IStateOperationsStore.write_states}."""

        async def write() -> list[WriteOutcome]:
            if len({w.key for w in writes}) != len(writes):
                raise ValueError("each state may be written once in a write of several")
            await self._runner.ready_pool()
            prepared = []
            for w in writes:
                identity = VersionIdentity(w.key.tenant, w.key.path, w.upload.parsed.serial,
                                           w.upload.sha256, len(w.upload.raw))
                stored = await self._codec.encode(w.upload.raw, identity, None)
                prepared.append(large.BulkWrite.of(w.upload, stored))
            outcomes: list[WriteOutcome] = await self._runner.run_interaction(
                self._write_states_txn, writes, principal, event_kind, prepared,
                blocking=True)
            for w, outcome, bulk in zip(writes, outcomes, prepared, strict=True):
                if outcome.created:
                    self._chains.written(w.key, outcome.version.number, w.upload.raw,
                                         w.upload.sha256, bulk.stored, None)
            return outcomes

        return ensureDeferred(write())

    async def _write_states_txn(self, cursor: Any, writes: Sequence[StateWrite],
                                principal: Principal, event_kind: str,
                                prepared: Sequence[large.BulkWrite]) -> list[WriteOutcome]:
        now = self._clock()
        ids = [await self._state_id_txn(cursor, w, now) for w in writes]
        await cursor.execute(_LOCK_STATE_ROWS, (sorted(ids),))
        order = sorted(range(len(writes)), key=ids.__getitem__)
        decisions: dict[int, locks.Replay | locks.NextVersion] = {}
        for i in order:
            upload = writes[i].upload
            await cursor.execute(statements.LOCK_AND_CANDIDATES,
                                 {"state": ids[i], "serial": upload.parsed.serial})
            found = cursor.fetchall()
            candidates = [rows.version(row[2:]) for row in found if row[2] is not None]
            locks.check_write(writes[i].lock_id, rows.holder(found[0][:2]))
            if writes[i].first_version and candidates:
                raise version_appeared(writes[i].key)
            decisions[i] = locks.decide_upload(
                upload.parsed.serial, upload.sha256, candidates,
                candidates[-1] if candidates else None)
        outcomes: dict[int, WriteOutcome] = {}
        for i in order:
            decision = decisions[i]
            if isinstance(decision, Replay):
                outcomes[i] = WriteOutcome(version=decision.version, created=False)
                continue
            version = StateVersion.of_upload(writes[i].upload, decision.number, now,
                                             principal.name)
            version_id = await large.copy_version_txn(cursor, ids[i], version, prepared[i])
            await large.copy_projection_txn(cursor, ids[i], version_id, prepared[i])
            outcomes[i] = WriteOutcome(version=version, created=True)
        for i in order:
            outcome, w = outcomes[i], writes[i]
            if outcome.created:
                await append_event_txn(
                    cursor, w.key.tenant, event_kind, principal.name, w.key.path, now,
                    lock_id=w.lock_id, serial=outcome.version.serial,
                    sha256=outcome.version.sha256,
                    detail={**write_detail(outcome.version.number, outcome.version.size,
                                           principal), **w.event_detail})
        return [outcomes[i] for i in range(len(writes))]

    async def _state_id_txn(self, cursor: Any, write: StateWrite, now: datetime) -> int:
        """The id of a write's state row, created (with its tenant) when missing."""
        params = {"tenant": write.key.tenant, "path": write.key.path, "now": now}
        await cursor.execute(_STATE_ID, params)
        row = cursor.fetchone()
        if row is None:
            await cursor.execute(statements.CREATE_STATE_ROW, params)
            await cursor.execute(_STATE_ID, params)
            row = cursor.fetchone()
        return int(row[0])
