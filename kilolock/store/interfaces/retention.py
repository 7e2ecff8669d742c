"""C{IRetentionStore}: what a store keeps and does for retention, purges and
tombstones.  Both stores provide it next to L{kilolock.store.interfaces.states.IStateStore}
(the same object).

A version pruned by retention or purged leaves a tombstone: its metadata
(number, serial, sha256, size, author, created_at) with when and why it
went (L{kilolock.core.model.StateVersion.pruned_at}, C{prune_reason}).
C{list_versions} lists tombstones; C{read_version} of one fails with
L{kilolock.core.errors.VersionPruned} (410).  What a policy lets go is decided
by L{kilolock.retention.policy.prunable} only.

Every method is one transaction; every change appends its event to the
tenant's audit chain in that transaction (C{versions_prune},
C{version_purge}, C{retention_set}, C{retention_clear}); events name
versions by number and sha256, never their content, so the chain verifies
after any prune or purge.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from zope.interface import Interface

if TYPE_CHECKING:
    from datetime import datetime

    from twisted.internet.defer import Deferred

    from kilolock.core.model import Principal, StateKey, StateVersion
    from kilolock.retention.model import PruneOutcome
    from kilolock.retention.policy import RetentionPolicy, RetentionSetting


class IRetentionStore(Interface):
    """Retention overrides, pruning, purging one version, and version holds."""

    def get_retention(tenant: str, path: str | None) -> Deferred[RetentionSetting | None]:
        """The override of the tenant's default (C{path} None) or of one
        state's policy.  @return: a Deferred firing with the
        L{RetentionSetting}, or None when there is none."""

    def set_retention(tenant: str, path: str | None, policy: RetentionPolicy,
                      actor: Principal) -> Deferred[RetentionSetting]:
        """Set (or replace) an override; appends C{retention_set}.
        @return: a Deferred firing with the stored L{RetentionSetting}."""

    def clear_retention(tenant: str, path: str | None,
                        actor: Principal) -> Deferred[RetentionSetting | None]:
        """Remove an override (its state or tenant then follows the next
        level up); appends C{retention_clear} when there was one.
        @return: a Deferred firing with the removed setting, or None."""

    def retention_candidates(after: StateKey | None, limit: int,
                             everywhere: bool) -> Deferred[list[StateKey]]:
        """Up to C{limit} states after C{after} (in (tenant, path) order)
        that a pruning pass should look at: with C{everywhere} (the server's
        policy has a limit) every state with more than one stored version,
        else only those with an override of their own or their tenant's.
        @return: a Deferred firing with their keys, in order."""

    def prune_state(key: StateKey, server: RetentionPolicy, now: datetime,
                    limit: int) -> Deferred[PruneOutcome]:
        """Turn into tombstones (at most C{limit} of) the versions of C{key}
        that its effective policy (override, else tenant's, else C{server})
        lets go at C{now}, oldest first, with one C{versions_prune} event.
        A state being written meanwhile is skipped (the next pass comes
        back); a locked state keeps everything.
        @return: a Deferred firing with a L{PruneOutcome} (empty: nothing
            pruned)."""

    def purge_version(key: StateKey, number: int, reason: str,
                      actor: Principal) -> Deferred[StateVersion]:
        """Delete the bytes of version C{number} (a leaked secret), leaving
        its tombstone with C{reason} and a C{version_purge} event; deltas
        decoded against it are re-encoded against another base in the same
        transaction.  L{kilolock.core.errors.VersionIsCurrent} (409) for the
        current version, L{kilolock.core.errors.VersionPruned} (410) for a
        tombstone, L{kilolock.core.errors.VersionNotFound} /
        L{kilolock.core.errors.StateNotFound} (404).
        @return: a Deferred firing with the tombstone's L{StateVersion}."""

    def hold_version(key: StateKey, number: int, holder: str,
                     until: datetime) -> Deferred[None]:
        """Keep version C{number} from being pruned until C{until} (or until
        L{release_version_holds}): the hook through which an operation in
        progress (an upload session, a server-side operation) protects the
        version it refers to.  Taking a hold again moves its expiry.
        L{kilolock.core.errors.VersionPruned} when only a tombstone is left,
        L{kilolock.core.errors.VersionNotFound} when there is no such version.
        @return: a Deferred firing with None."""

    def release_version_holds(key: StateKey, holder: str) -> Deferred[None]:
        """Drop the holds C{holder} has on the versions of C{key}.
        @return: a Deferred firing with None."""
