"""L{ITFEStore} in memory: the TFE half of L{kilolock.store.memory.store.MemoryStateStore}.

The store holds a L{MemoryTFE} and forwards L{ITFEStore} to it; the two
share the dict of states (a workspace exists while its state does) and the
audit chain.  Each method runs synchronously and completes or raises before
changing anything, like one database transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from attrs import define, evolve, field
from twisted.internet.defer import Deferred, maybeDeferred, succeed
from zope.interface import implementer

from kilolock.core.audit import control_detail
from kilolock.core.errors import NotFound
from kilolock.core.model import Principal, StateKey
from kilolock.store.interfaces.tfe import ITFEStore
from kilolock.store.memory.part import MemoryPart
from kilolock.store.memory.tenants import AppendEvent
from kilolock.tfe import grants
from kilolock.tfe.errors import WorkspaceExists
from kilolock.tfe.model import (
    STATE_PART,
    TFE_TAGS_UPDATE,
    TFE_WORKSPACE_CREATE,
    TFE_WORKSPACE_DELETE,
    UPLOADING,
    PendingVersion,
    Tag,
    TFEWorkspace,
    settled_status,
)
from kilolock.tfe.names import new_workspace_id, workspace_name_of
from kilolock.tfe.tags import merge_tags, tag_detail

if TYPE_CHECKING:
    from kilolock.store.memory.states import StoredState

NO_SUCH_WORKSPACE = "no such workspace"


@implementer(ITFEStore)
@define
class MemoryTFE(MemoryPart):
    """Workspace records (by id) and pending versions (by id) in dicts.

    @ivar _states: the store's states (read only here).
    @ivar _append_event: appends to the store's audit chain.
    """

    _states: dict[StateKey, StoredState]
    _append_event: AppendEvent
    clock: Callable[[], datetime]
    _workspaces: dict[str, TFEWorkspace] = field(factory=dict, init=False)
    _by_key: dict[StateKey, str] = field(factory=dict, init=False)
    _pending: dict[str, PendingVersion] = field(factory=dict, init=False)

    def held_versions(self, key: StateKey, now: datetime) -> set[int]:
        """The versions of C{key} that pending versions not expired at
        C{now} refer to (retention keeps them)."""
        return {pending.version for pending in self._pending.values()
                if pending.key == key and pending.version is not None
                and pending.expires_at > now}

    # -- workspaces -------------------------------------------------------

    def tags_of(self, key: StateKey) -> tuple[tuple[str, str], ...]:
        """The tags of the workspace of the state at C{key} (none without
        one): what a state listing shows and filters by."""
        found = self._by_key.get(key)
        if found is None:
            return ()
        return tuple((tag.key, tag.value) for tag in self._workspaces[found].tags)

    def tfe_find_workspace(self, key: StateKey,
                           adopt: bool = True) -> Deferred[TFEWorkspace | None]:
        found = self._by_key.get(key)
        if found is not None:
            return succeed(self._workspaces[found])
        if adopt and key in self._states:
            return succeed(self._adopt(key))
        return succeed(None)

    def tfe_workspace_by_id(self, tenant: str,
                            workspace_id: str) -> Deferred[TFEWorkspace | None]:
        found = self._workspaces.get(workspace_id)
        return succeed(found if found is not None and found.key.tenant == tenant else None)

    def tfe_list_workspaces(self, tenant: str,
                            prefix: str | None) -> Deferred[list[TFEWorkspace]]:
        for key in list(self._states):
            if (key.tenant == tenant and key not in self._by_key
                    and workspace_name_of(key.path, prefix) is not None):
                self._adopt(key)
        return succeed(sorted(
            (workspace for workspace in self._workspaces.values()
             if workspace.key.tenant == tenant
             and workspace_name_of(workspace.key.path, prefix) is not None),
            key=lambda workspace: workspace.name))

    def tfe_create_workspace(self, key: StateKey, tags: Sequence[Tag],
                             principal: Principal) -> Deferred[TFEWorkspace]:
        def create() -> TFEWorkspace:
            if key in self._by_key or key in self._states:
                raise WorkspaceExists()
            now = self.clock()
            workspace = TFEWorkspace(new_workspace_id(), key, now, merge_tags((), tags))
            self._keep(workspace)
            self._append_event(key.tenant, TFE_WORKSPACE_CREATE, principal.name, key.path, now,
                               detail=control_detail(principal, workspace_id=workspace.id,
                                                     tags=tag_detail(workspace.tags)))
            return workspace

        return maybeDeferred(create)

    def tfe_add_tags(self, tenant: str, workspace_id: str, tags: Sequence[Tag],
                     principal: Principal) -> Deferred[TFEWorkspace]:
        def add() -> TFEWorkspace:
            found = self._workspaces.get(workspace_id)
            if found is None or found.key.tenant != tenant:
                raise NotFound(NO_SUCH_WORKSPACE)
            merged = merge_tags(found.tags, tags)
            if merged == found.tags:
                return found
            updated = evolve(found, tags=merged)
            self._keep(updated)
            self._append_event(tenant, TFE_TAGS_UPDATE, principal.name, found.key.path,
                               self.clock(), detail=control_detail(
                                   principal, workspace_id=workspace_id,
                                   tags=tag_detail(merged)))
            return updated

        return maybeDeferred(add)

    def tfe_delete_workspace(self, tenant: str, workspace_id: str,
                             principal: Principal) -> Deferred[None]:
        found = self._workspaces.get(workspace_id)
        if found is None or found.key.tenant != tenant:
            return succeed(None)
        del self._workspaces[workspace_id]
        del self._by_key[found.key]
        for pending in [p for p in self._pending.values() if p.workspace_id == workspace_id]:
            del self._pending[pending.id]
        self._append_event(tenant, TFE_WORKSPACE_DELETE, principal.name, found.key.path,
                           self.clock(), detail=control_detail(principal,
                                                               workspace_id=workspace_id))
        return succeed(None)

    # -- pending versions ---------------------------------------------------

    def tfe_create_pending_version(self, pending: PendingVersion) -> Deferred[None]:
        forget_before = self.clock() - grants.PENDING_RETENTION
        for old in [p for p in self._pending.values() if p.expires_at < forget_before]:
            del self._pending[old.id]
        self._pending[pending.id] = pending
        return succeed(None)

    def tfe_pending_version(self, version_id: str) -> Deferred[PendingVersion | None]:
        return succeed(self._pending.get(version_id))

    def tfe_claim_upload(self, version_id: str, grant_hash: str, part: str,
                         body_md5: str | None) -> Deferred[PendingVersion]:
        def claim() -> PendingVersion:
            pending = self._pending.get(version_id)
            grants.check_claim(pending, grant_hash, part, body_md5, self.clock())
            assert pending is not None
            self._pending[version_id] = (evolve(pending, status=UPLOADING)
                                         if part == STATE_PART
                                         else evolve(pending, json_received=True))
            return pending

        return maybeDeferred(claim)

    def tfe_settle_upload(self, version_id: str, version: int | None,
                          reopen: bool = False) -> Deferred[None]:
        pending = self._pending.get(version_id)
        if pending is not None:
            self._pending[version_id] = evolve(pending, status=settled_status(version, reopen),
                                               version=version)
        return succeed(None)

    # -- private ----------------------------------------------------------

    def _adopt(self, key: StateKey) -> TFEWorkspace:
        workspace = TFEWorkspace(new_workspace_id(), key, self._states[key].created_at)
        self._keep(workspace)
        return workspace

    def _keep(self, workspace: TFEWorkspace) -> None:
        self._workspaces[workspace.id] = workspace
        self._by_key[workspace.key] = workspace.id
