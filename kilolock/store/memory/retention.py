"""L{IRetentionStore} in memory: the retention half of
L{kilolock.store.memory.store.MemoryStateStore}.

It shares the store's dict of states and its audit chain.  A tombstone is a
stored version whose raw bytes are dropped and whose metadata says when
and why.  The memory store keeps raw bytes (no deltas, no encryption), so
a purge re-encodes nothing.  Each method runs synchronously and completes
or raises before changing anything, like one database transaction.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING

from attrs import define, evolve, field
from twisted.internet.defer import Deferred, maybeDeferred, succeed
from zope.interface import implementer

from kilolock.core.audit import control_detail
from kilolock.core.errors import StateNotFound, VersionIsCurrent, VersionNotFound
from kilolock.core.events import RETENTION_CLEAR, RETENTION_SET, VERSION_PURGE, VERSIONS_PRUNE
from kilolock.core.model import Principal, StateKey, StateVersion
from kilolock.retention.model import PruneOutcome
from kilolock.retention.policy import (
    RetentionPolicy,
    RetentionSetting,
    VersionFacts,
    effective_policy,
    prunable,
    pruned_error,
)
from kilolock.store.interfaces.retention import IRetentionStore
from kilolock.store.memory.part import MemoryPart
from kilolock.store.memory.tenants import AppendEvent

if TYPE_CHECKING:
    from kilolock.store.memory.states import StoredState, StoredVersion

#: The principal the audit trail names for pruning.
RETENTION_PRINCIPAL = "retention"

#: Versions other parts of the store hold at C{now} (the TFE lane's).
HeldBy = Callable[[StateKey, datetime], set[int]]


@implementer(IRetentionStore)
@define
class MemoryRetention(MemoryPart):
    """Overrides by (tenant, path or ""), holds by state."""

    _states: dict[StateKey, StoredState]
    _append_event: AppendEvent
    clock: Callable[[], datetime]
    _held_elsewhere: HeldBy = field(default=lambda key, now: set())
    _overrides: dict[tuple[str, str], RetentionSetting] = field(factory=dict, init=False)
    _holds: dict[StateKey, dict[tuple[int, str], datetime]] = field(factory=dict, init=False)

    # -- overrides --------------------------------------------------------

    def get_retention(self, tenant: str, path: str | None) -> Deferred[RetentionSetting | None]:
        return succeed(self._overrides.get((tenant, path or "")))

    def set_retention(self, tenant: str, path: str | None, policy: RetentionPolicy,
                      actor: Principal) -> Deferred[RetentionSetting]:
        def set_() -> RetentionSetting:
            now = self.clock()
            setting = RetentionSetting(tenant, path, policy, now)
            self._overrides[(tenant, path or "")] = setting
            self._append_event(tenant, RETENTION_SET, actor.name, path, now,
                               detail=control_detail(actor, versions=policy.versions,
                                                     days=policy.days))
            return setting

        return maybeDeferred(set_)

    def clear_retention(self, tenant: str, path: str | None,
                        actor: Principal) -> Deferred[RetentionSetting | None]:
        def clear() -> RetentionSetting | None:
            setting = self._overrides.pop((tenant, path or ""), None)
            if setting is not None:
                self._append_event(tenant, RETENTION_CLEAR, actor.name, path, self.clock(),
                                   detail=control_detail(actor))
            return setting

        return maybeDeferred(clear)

    # -- pruning ----------------------------------------------------------

    def retention_candidates(self, after: StateKey | None, limit: int,
                             everywhere: bool) -> Deferred[list[StateKey]]:
        def order(key: StateKey) -> tuple[str, str]:
            return key.tenant, key.path

        found = sorted((key for key, state in self._states.items()
                        if (after is None or order(key) > order(after))
                        and sum(1 for stored in state.versions if stored.raw is not None) > 1
                        and (everywhere or (key.tenant, key.path) in self._overrides
                             or (key.tenant, "") in self._overrides)), key=order)
        return succeed(found[:limit])

    def prune_state(self, key: StateKey, server: RetentionPolicy, now: datetime,
                    limit: int) -> Deferred[PruneOutcome]:
        def prune() -> PruneOutcome:
            state = self._states.get(key)
            if state is None:
                return PruneOutcome(key)
            tenant = self._overrides.get((key.tenant, ""))
            own = self._overrides.get((key.tenant, key.path))
            policy = effective_policy(server, None if tenant is None else tenant.policy,
                                      None if own is None else own.policy).policy
            stored = {version.meta.number: version for version in state.versions
                      if version.raw is not None}
            numbers = prunable(
                [VersionFacts(number, version.meta.created_at)
                 for number, version in stored.items()],
                policy, now, locked=state.lock is not None,
                held=self._held(key, now) | self._held_elsewhere(key, now))[:limit]
            if not numbers:
                return PruneOutcome(key)
            freed = 0
            reason = policy.prune_reason()
            for number in numbers:
                freed += len(stored[number].raw or b"")
                self._tombstone(state, stored[number], now, reason)
            self._append_event(key.tenant, VERSIONS_PRUNE, RETENTION_PRINCIPAL, key.path, now,
                               detail={"pruned_versions": numbers, "reason": reason})
            return PruneOutcome(key, tuple(numbers), freed)

        return maybeDeferred(prune)

    # -- purging one version ----------------------------------------------

    def purge_version(self, key: StateKey, number: int, reason: str,
                      actor: Principal) -> Deferred[StateVersion]:
        def purge() -> StateVersion:
            state = self._states.get(key)
            if state is None:
                raise StateNotFound("no such state")
            version = next((stored for stored in state.versions
                            if stored.meta.number == number), None)
            if version is None:
                raise VersionNotFound(f"the state has no version {number}")
            if version.raw is None:
                raise pruned_error(number, version.meta.pruned_at, version.meta.prune_reason)
            if version is state.current:
                raise VersionIsCurrent(
                    f"version {number} is the state's current version: roll back to an"
                    " earlier version (or write a new one) first, then purge it")
            now = self.clock()
            tombstone = self._tombstone(state, version, now, reason)
            self._append_event(key.tenant, VERSION_PURGE, actor.name, key.path, now,
                               serial=tombstone.serial, sha256=tombstone.sha256,
                               detail=control_detail(actor, purged_version=number,
                                                     reason=reason, reencoded=[]))
            return tombstone

        return maybeDeferred(purge)

    # -- holds --------------------------------------------------------------

    def hold_version(self, key: StateKey, number: int, holder: str,
                     until: datetime) -> Deferred[None]:
        def hold() -> None:
            state = self._states.get(key)
            version = next((stored for stored in (state.versions if state else ())
                            if stored.meta.number == number), None)
            if version is None:
                raise VersionNotFound(f"the state has no version {number}")
            if version.raw is None:
                raise pruned_error(number, version.meta.pruned_at, version.meta.prune_reason)
            self._holds.setdefault(key, {})[(number, holder)] = until

        return maybeDeferred(hold)

    def release_version_holds(self, key: StateKey, holder: str) -> Deferred[None]:
        holds = self._holds.get(key, {})
        for held in [held for held in holds if held[1] == holder]:
            del holds[held]
        return succeed(None)

    # -- private ------------------------------------------------------------

    def _held(self, key: StateKey, now: datetime) -> set[int]:
        return {number for (number, _), until in self._holds.get(key, {}).items()
                if until > now}

    @staticmethod
    def _tombstone(state: StoredState, version: StoredVersion, now: datetime,
                   reason: str) -> StateVersion:
        """Drop C{version}'s bytes, keeping its metadata with when and why."""
        meta = evolve(version.meta, pruned_at=now, prune_reason=reason)
        version.meta, version.raw, version.projection = meta, None, None
        state.written[(meta.serial, meta.sha256)] = meta
        return meta
