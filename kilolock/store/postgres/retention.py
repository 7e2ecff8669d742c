"""L{IRetentionStore} in PostgreSQL: retention overrides, pruning, holds (and
the purge of one version, L{kilolock.store.postgres.purge}).

A tombstone is the version's row with its bytes gone: C{codec} C{pruned},
no payload, no data key, no base, C{pruned_at} and C{prune_reason} set
(C{010_at_rest.sql}).  What a policy lets go is L{kilolock.retention.policy}'s
decision; the store reads the facts, asks, re-encodes as full snapshots
the kept deltas whose base goes (L{kilolock.retention.policy.rebased}), and writes
the tombstones.

Pruning never waits for a write: L{PostgresRetention.prune_state} locks
the state's row with C{SKIP LOCKED} (a state being written is skipped; the
next pass comes back), in the lock order of every mutation (the state row,
its versions, the tenant's chain head last), and each state is its own
short transaction.  A write that arrives meanwhile waits for that one
state's transaction: a few statements on one state's rows.  A hold takes
the state row C{FOR SHARE}, so a hold and a prune of the same state never
interleave: a version held before a prune looks is kept, and a hold after
a prune finds a tombstone (L{kilolock.core.errors.VersionPruned}).  The SQL
stands beside its use.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from twisted.internet.defer import Deferred
from zope.interface import implementer

from kilolock.core.audit import control_detail
from kilolock.core.errors import VersionNotFound
from kilolock.core.events import RETENTION_CLEAR, RETENTION_SET, VERSIONS_PRUNE
from kilolock.core.model import Principal, StateKey, StateVersion
from kilolock.retention.model import PruneOutcome
from kilolock.retention.policy import (
    RetentionPolicy,
    RetentionSetting,
    VersionFacts,
    effective_policy,
    prunable,
    pruned_error,
    rebased,
)
from kilolock.store.interfaces.retention import IRetentionStore
from kilolock.store.postgres import rows, statements
from kilolock.store.postgres.events import append_event_and_commit_txn, append_event_txn
from kilolock.store.postgres.part import StorePart
from kilolock.store.postgres.purge import PostgresPurge
from kilolock.store.postgres.runner import TransactionRunner

__all__ = ["PostgresRetention"]

#: The principal the audit trail names for pruning.
RETENTION_PRINCIPAL = "retention"

GET_OVERRIDE = (
    "SELECT keep_versions, keep_days, updated_at FROM retention_policies"
    " WHERE tenant_id = %(tenant)s AND path = %(path)s"
)

SET_OVERRIDE = (
    "INSERT INTO retention_policies (tenant_id, path, keep_versions, keep_days, updated_at)"
    " VALUES (%(tenant)s, %(path)s, %(versions)s, %(days)s, %(now)s)"
    " ON CONFLICT (tenant_id, path) DO UPDATE SET keep_versions = EXCLUDED.keep_versions,"
    " keep_days = EXCLUDED.keep_days, updated_at = EXCLUDED.updated_at"
)

CLEAR_OVERRIDE = (
    "DELETE FROM retention_policies WHERE tenant_id = %(tenant)s AND path = %(path)s"
    " RETURNING keep_versions, keep_days, updated_at"
)

# States after the cursor with at least two stored versions; unless the
# server's policy prunes, only those with an override of their own or
# their tenant's.
CANDIDATES = """
SELECT s.tenant_id, s.path FROM states s
WHERE (%(first)s OR (s.tenant_id, s.path) > (%(tenant)s, %(path)s))
  AND (%(everywhere)s OR EXISTS (
      SELECT 1 FROM retention_policies p
      WHERE p.tenant_id = s.tenant_id AND p.path IN ('', s.path)))
  AND (SELECT count(*) FROM (SELECT 1 FROM state_versions v
                             WHERE v.state_id = s.id AND v.pruned_at IS NULL LIMIT 2) two) = 2
ORDER BY s.tenant_id, s.path
LIMIT %(limit)s
"""

# The state's row, locked unless a writer has it (then no row), whether it
# is locked, and the overrides of its tenant and its own.
LOCK_FOR_PRUNE = """
SELECT s.id, EXISTS (SELECT 1 FROM locks l WHERE l.state_id = s.id),
       t.path IS NOT NULL, t.keep_versions, t.keep_days,
       o.path IS NOT NULL, o.keep_versions, o.keep_days
FROM states s
LEFT JOIN retention_policies t ON t.tenant_id = s.tenant_id AND t.path = ''
LEFT JOIN retention_policies o ON o.tenant_id = s.tenant_id AND o.path = s.path
WHERE s.tenant_id = %(tenant)s AND s.path = %(path)s
FOR UPDATE OF s SKIP LOCKED
"""

STORED_VERSION_FACTS = (
    "SELECT number, created_at, base_number FROM state_versions"
    " WHERE state_id = %(state)s AND pruned_at IS NULL"
)

# Versions an operation in progress refers to: holds, and the TFE lane's
# finalised uploads that have not expired.
HELD_VERSIONS = """
SELECT number FROM version_holds WHERE state_id = %(state)s AND expires_at > %(now)s
UNION
SELECT version FROM tfe_pending_versions
WHERE tenant_id = %(tenant)s AND path = %(path)s AND version IS NOT NULL
  AND expires_at > %(now)s
"""

# Tombstones; how many stored bytes went with them.
PRUNE_VERSIONS = """
WITH old AS (
    SELECT id, octet_length(payload) AS stored FROM state_versions
    WHERE state_id = %(state)s AND number = ANY(%(numbers)s) AND pruned_at IS NULL
    FOR UPDATE
), gone AS (
    UPDATE state_versions v SET payload = NULL, codec = 'pruned', data_key = NULL,
        kek_id = NULL, base_number = NULL, pruned_at = %(now)s, prune_reason = %(reason)s
    FROM old WHERE v.id = old.id
    RETURNING v.number, old.stored
)
SELECT coalesce(array_agg(number ORDER BY number), '{}'), coalesce(sum(stored), 0) FROM gone
"""

# A hold: the state row FOR SHARE first (it waits for a prune of the state),
# then the version if it is stored.
SHARE_STATE_ROW = ("SELECT id FROM states WHERE tenant_id = %(tenant)s AND path = %(path)s"
                   " FOR SHARE")
HOLD_VERSION = """
INSERT INTO version_holds (state_id, number, holder, expires_at)
SELECT state_id, number, %(holder)s, %(until)s FROM state_versions
WHERE state_id = %(state)s AND number = %(number)s AND pruned_at IS NULL
ON CONFLICT (state_id, number, holder) DO UPDATE SET expires_at = EXCLUDED.expires_at
RETURNING number
"""
TOMBSTONE_OF = ("SELECT pruned_at, prune_reason FROM state_versions"
                " WHERE state_id = %(state)s AND number = %(number)s")
RELEASE_HOLDS = """
DELETE FROM version_holds h USING states s
WHERE h.state_id = s.id AND s.tenant_id = %(tenant)s AND s.path = %(path)s
  AND h.holder = %(holder)s
"""


def _policy(present: bool, versions: int | None, days: int | None) -> RetentionPolicy | None:
    return RetentionPolicy(versions, days) if present else None


@implementer(IRetentionStore)
class PostgresRetention(StorePart):
    """Retention and purges, run by C{runner}; a purge re-encodes with
    C{purge}'s codec."""

    def __init__(self, runner: TransactionRunner, clock: Callable[[], datetime],
                 purge: PostgresPurge) -> None:
        super().__init__(runner, clock)
        self._purge = purge

    # -- overrides --------------------------------------------------------

    def get_retention(self, tenant: str, path: str | None) -> Deferred[RetentionSetting | None]:
        """See L{IRetentionStore.get_retention}."""

        async def get(cursor: Any) -> RetentionSetting | None:
            await cursor.execute(GET_OVERRIDE, {"tenant": tenant, "path": path or ""})
            row = cursor.fetchone()
            return None if row is None else RetentionSetting(
                tenant, path, RetentionPolicy(row[0], row[1]), rows.utc(row[2]))

        return self._runner.run_interaction(get)

    def set_retention(self, tenant: str, path: str | None, policy: RetentionPolicy,
                      actor: Principal) -> Deferred[RetentionSetting]:
        """See L{IRetentionStore.set_retention}."""

        async def set_(cursor: Any) -> RetentionSetting:
            now = self._clock()
            await cursor.execute(statements.CREATE_TENANT, (tenant,))
            await cursor.execute(SET_OVERRIDE, {"tenant": tenant, "path": path or "",
                                                "versions": policy.versions,
                                                "days": policy.days, "now": now})
            await append_event_and_commit_txn(
                cursor, tenant, RETENTION_SET, actor.name, path, now,
                detail=control_detail(actor, versions=policy.versions, days=policy.days))
            return RetentionSetting(tenant, path, policy, now)

        return self._runner.run_interaction(set_)

    def clear_retention(self, tenant: str, path: str | None,
                        actor: Principal) -> Deferred[RetentionSetting | None]:
        """See L{IRetentionStore.clear_retention}."""

        async def clear(cursor: Any) -> RetentionSetting | None:
            await cursor.execute(CLEAR_OVERRIDE, {"tenant": tenant, "path": path or ""})
            row = cursor.fetchone()
            if row is None:
                return None
            await append_event_txn(cursor, tenant, RETENTION_CLEAR, actor.name, path,
                                   self._clock(), detail=control_detail(actor))
            return RetentionSetting(tenant, path, RetentionPolicy(row[0], row[1]),
                                    rows.utc(row[2]))

        return self._runner.run_interaction(clear)

    # -- pruning ----------------------------------------------------------

    def retention_candidates(self, after: StateKey | None, limit: int,
                             everywhere: bool) -> Deferred[list[StateKey]]:
        """See L{IRetentionStore.retention_candidates}."""

        async def select(cursor: Any) -> list[StateKey]:
            await cursor.execute(CANDIDATES, {
                "first": after is None, "tenant": after.tenant if after else "",
                "path": after.path if after else "", "everywhere": everywhere,
                "limit": limit})
            return [StateKey(tenant, path) for tenant, path in cursor.fetchall()]

        return self._runner.run_interaction(select)

    def prune_state(self, key: StateKey, server: RetentionPolicy, now: datetime,
                    limit: int) -> Deferred[PruneOutcome]:
        """See L{IRetentionStore.prune_state}."""
        return self._runner.run_interaction(self._prune_txn, key, server, now, limit)

    async def _prune_txn(self, cursor: Any, key: StateKey, server: RetentionPolicy,
                         now: datetime, limit: int) -> PruneOutcome:
        place = {"tenant": key.tenant, "path": key.path}
        await cursor.execute(LOCK_FOR_PRUNE, place)
        row = cursor.fetchone()
        if row is None:  # gone, or being written: the next pass comes back
            return PruneOutcome(key)
        state_id, locked = row[0], row[1]
        policy = effective_policy(server, _policy(*row[2:5]), _policy(*row[5:8])).policy
        if policy.keeps_everything or locked:
            return PruneOutcome(key)
        params = {**place, "state": state_id, "now": now}
        await cursor.execute(STORED_VERSION_FACTS, params)
        facts = [VersionFacts(number, rows.utc(created_at), base)
                 for number, created_at, base in cursor.fetchall()]
        await cursor.execute(HELD_VERSIONS, params)
        held = {number for (number,) in cursor.fetchall()}
        numbers = prunable(facts, policy, now, held=held)[:limit]
        if not numbers:
            return PruneOutcome(key)
        reason = policy.prune_reason()
        reencoded = rebased(facts, numbers)
        await self._purge.make_snapshots_txn(cursor, key, reencoded)
        await cursor.execute(PRUNE_VERSIONS, {**params, "numbers": numbers, "reason": reason})
        pruned, freed = cursor.fetchone()
        detail: dict[str, Any] = {"pruned_versions": list(pruned), "reason": reason}
        if reencoded:
            detail["reencoded"] = reencoded
        await append_event_and_commit_txn(
            cursor, key.tenant, VERSIONS_PRUNE, RETENTION_PRINCIPAL, key.path, now,
            detail=detail)
        return PruneOutcome(key, tuple(pruned), int(freed))

    # -- purging one version: PostgresPurge -----------------------------------

    def purge_version(self, key: StateKey, number: int, reason: str,
                      actor: Principal) -> Deferred[StateVersion]:
        """See L{IRetentionStore.purge_version}."""
        return self._purge.purge_version(key, number, reason, actor)

    # -- holds --------------------------------------------------------------

    def hold_version(self, key: StateKey, number: int, holder: str,
                     until: datetime) -> Deferred[None]:
        """See L{IRetentionStore.hold_version}."""

        async def hold(cursor: Any) -> None:
            place = {"tenant": key.tenant, "path": key.path}
            await cursor.execute(SHARE_STATE_ROW, place)
            row = cursor.fetchone()
            if row is None:
                raise VersionNotFound(f"the state has no version {number}")
            params = {"state": row[0], "number": number, "holder": holder, "until": until}
            await cursor.execute(HOLD_VERSION, params)
            if cursor.fetchone() is not None:
                return
            await cursor.execute(TOMBSTONE_OF, params)
            tombstone = cursor.fetchone()
            if tombstone is None:
                raise VersionNotFound(f"the state has no version {number}")
            raise pruned_error(number, rows.utc(tombstone[0]), tombstone[1])

        return self._runner.run_interaction(hold)

    def release_version_holds(self, key: StateKey, holder: str) -> Deferred[None]:
        """See L{IRetentionStore.release_version_holds}."""

        async def release(cursor: Any) -> None:
            await cursor.execute(RELEASE_HOLDS, {"tenant": key.tenant, "path": key.path,
                                                 "holder": holder}, commit=True)

        return self._runner.run_interaction(release)
