"""L{ITFEStore} in PostgreSQL: TFE workspace records and pending state versions.

L{kilolock.store.postgres.store.PostgresStateStore} holds a L{PostgresTFE}
made with its transaction runner and clock, and forwards L{ITFEStore} to
it.  Every public method is one transaction; the SQL stands beside its use
(schema: C{007_tfe.sql}).  Records are created with C{INSERT ... ON
CONFLICT DO NOTHING RETURNING} (never select-then-insert); a record that is
changed (tags) or claimed (an upload) is locked first (C{FOR UPDATE}), and
the rule the change must pass is decided by the pure modules of
L{kilolock.tfe}, inside the transaction.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from twisted.internet.defer import Deferred
from zope.interface import implementer

from kilolock.core.audit import control_detail
from kilolock.core.errors import NotFound
from kilolock.core.model import Principal, StateKey
from kilolock.store.interfaces.tfe import ITFEStore
from kilolock.store.postgres.events import append_event_txn
from kilolock.store.postgres.part import StorePart
from kilolock.store.postgres.rows import utc
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

__all__ = ["PostgresTFE"]

_WORKSPACE_COLUMNS = "id, tenant_id, path, created_at, tags::text"
_PENDING_COLUMNS = ("id, workspace_id, tenant_id, path, serial, lineage, md5, lock_id,"
                    " principal, grant_hash, created_at, expires_at, status, json_received,"
                    " version")

_INSERT_WORKSPACE = (
    "INSERT INTO tfe_workspaces (id, tenant_id, path, created_at, tags)"  # noqa: S608
    " VALUES (%(id)s, %(tenant)s, %(path)s, %(created_at)s, %(tags)s::jsonb)"
    f" ON CONFLICT (tenant_id, path) DO NOTHING RETURNING {_WORKSPACE_COLUMNS}"
)
_WORKSPACE_BY_PATH = (
    f"SELECT {_WORKSPACE_COLUMNS} FROM tfe_workspaces"  # noqa: S608 - constants
    " WHERE tenant_id = %s AND path = %s"
)
_STATE_CREATED = "SELECT created_at FROM states WHERE tenant_id = %s AND path = %s"
_STATES_WITHOUT_RECORD = (
    "SELECT s.path, s.created_at FROM states s WHERE s.tenant_id = %(tenant)s"
    " AND starts_with(s.path, %(prefix)s) AND NOT EXISTS (SELECT 1 FROM tfe_workspaces w"
    " WHERE w.tenant_id = s.tenant_id AND w.path = s.path)"
)
_WORKSPACES_UNDER = (
    f"SELECT {_WORKSPACE_COLUMNS} FROM tfe_workspaces"  # noqa: S608 - constants
    " WHERE tenant_id = %(tenant)s AND starts_with(path, %(prefix)s)"
)
_PENDING_BY_ID = (f"SELECT {_PENDING_COLUMNS} FROM tfe_pending_versions"  # noqa: S608
                  " WHERE id = %s")


def _workspace(row: Any) -> TFEWorkspace:
    workspace_id, tenant, path, created_at, tags = row
    return TFEWorkspace(id=workspace_id, key=StateKey(tenant, path), created_at=utc(created_at),
                        tags=tuple(Tag(key, value) for key, value in json.loads(tags)))


def _tags_json(tags: Sequence[Tag]) -> str:
    return json.dumps([[tag.key, tag.value] for tag in tags])


def _pending(row: Any) -> PendingVersion:
    (version_id, workspace_id, tenant, path, serial, lineage, md5, lock_id, principal,
     grant_hash, created_at, expires_at, status, json_received, version) = row
    return PendingVersion(id=version_id, workspace_id=workspace_id, key=StateKey(tenant, path),
                          serial=serial, lineage=lineage, md5=md5, lock_id=lock_id,
                          principal=principal, grant_hash=grant_hash,
                          created_at=utc(created_at), expires_at=utc(expires_at),
                          status=status, json_received=json_received, version=version)


@implementer(ITFEStore)
class PostgresTFE(StorePart):
    """TFE workspace records and pending versions, run by C{runner}."""

    # -- workspaces -------------------------------------------------------

    def tfe_find_workspace(self, key: StateKey,
                           adopt: bool = True) -> Deferred[TFEWorkspace | None]:
        async def find(cursor: Any) -> TFEWorkspace | None:
            await cursor.execute(_WORKSPACE_BY_PATH, (key.tenant, key.path))
            row = cursor.fetchone()
            if row is not None:
                return _workspace(row)
            if not adopt:
                return None
            await cursor.execute(_STATE_CREATED, (key.tenant, key.path))
            state = cursor.fetchone()
            if state is None:
                return None
            return await self._adopt_txn(cursor, key, utc(state[0]))

        return self._runner.run_interaction(find)

    def tfe_workspace_by_id(self, tenant: str,
                            workspace_id: str) -> Deferred[TFEWorkspace | None]:
        async def find(cursor: Any) -> TFEWorkspace | None:
            await cursor.execute(f"SELECT {_WORKSPACE_COLUMNS} FROM tfe_workspaces"  # noqa: S608
                                 " WHERE id = %s AND tenant_id = %s", (workspace_id, tenant))
            row = cursor.fetchone()
            return None if row is None else _workspace(row)

        return self._runner.run_interaction(find)

    def tfe_list_workspaces(self, tenant: str,
                            prefix: str | None) -> Deferred[list[TFEWorkspace]]:
        params = {"tenant": tenant, "prefix": prefix or ""}

        async def select(cursor: Any) -> list[TFEWorkspace]:
            await cursor.execute(_STATES_WITHOUT_RECORD, params)
            for path, created_at in cursor.fetchall():
                if workspace_name_of(path, prefix) is not None:
                    await self._adopt_txn(cursor, StateKey(tenant, path), utc(created_at))
            await cursor.execute(_WORKSPACES_UNDER, params)
            found = [_workspace(row) for row in cursor.fetchall()]
            return sorted((workspace for workspace in found
                           if workspace_name_of(workspace.key.path, prefix) is not None),
                          key=lambda workspace: workspace.name)

        return self._runner.run_interaction(select)

    def tfe_create_workspace(self, key: StateKey, tags: Sequence[Tag],
                             principal: Principal) -> Deferred[TFEWorkspace]:
        async def create(cursor: Any) -> TFEWorkspace:
            await cursor.execute(_STATE_CREATED, (key.tenant, key.path))
            if cursor.fetchone() is not None:
                raise WorkspaceExists()
            now = self._clock()
            merged = merge_tags((), tags)
            await cursor.execute(_INSERT_WORKSPACE, {
                "id": new_workspace_id(), "tenant": key.tenant, "path": key.path,
                "created_at": now, "tags": _tags_json(merged)})
            row = cursor.fetchone()
            if row is None:
                raise WorkspaceExists()
            workspace = _workspace(row)
            await append_event_txn(cursor, key.tenant, TFE_WORKSPACE_CREATE, principal.name,
                                   key.path, now, detail=control_detail(
                                       principal, workspace_id=workspace.id,
                                       tags=tag_detail(merged)))
            return workspace

        return self._runner.run_interaction(create)

    def tfe_add_tags(self, tenant: str, workspace_id: str, tags: Sequence[Tag],
                     principal: Principal) -> Deferred[TFEWorkspace]:
        async def add(cursor: Any) -> TFEWorkspace:
            await cursor.execute(f"SELECT {_WORKSPACE_COLUMNS} FROM tfe_workspaces"  # noqa: S608
                                 " WHERE id = %s AND tenant_id = %s FOR UPDATE",
                                 (workspace_id, tenant))
            row = cursor.fetchone()
            if row is None:
                raise NotFound("no such workspace")
            found = _workspace(row)
            merged = merge_tags(found.tags, tags)
            if merged == found.tags:
                return found
            await cursor.execute("UPDATE tfe_workspaces SET tags = %s::jsonb WHERE id = %s",
                                 (_tags_json(merged), workspace_id))
            await append_event_txn(cursor, tenant, TFE_TAGS_UPDATE, principal.name,
                                   found.key.path, self._clock(), detail=control_detail(
                                       principal, workspace_id=workspace_id,
                                       tags=tag_detail(merged)))
            return TFEWorkspace(found.id, found.key, found.created_at, merged)

        return self._runner.run_interaction(add)

    def tfe_delete_workspace(self, tenant: str, workspace_id: str,
                             principal: Principal) -> Deferred[None]:
        async def delete(cursor: Any) -> None:
            await cursor.execute("DELETE FROM tfe_workspaces WHERE id = %s AND tenant_id = %s"
                                 " RETURNING path", (workspace_id, tenant))
            row = cursor.fetchone()
            if row is not None:
                await append_event_txn(cursor, tenant, TFE_WORKSPACE_DELETE, principal.name,
                                       row[0], self._clock(), detail=control_detail(
                                           principal, workspace_id=workspace_id))

        return self._runner.run_interaction(delete)

    # -- pending versions ---------------------------------------------------

    def tfe_create_pending_version(self, pending: PendingVersion) -> Deferred[None]:
        async def create(cursor: Any) -> None:
            await cursor.execute("DELETE FROM tfe_pending_versions WHERE expires_at < %s",
                                 (self._clock() - grants.PENDING_RETENTION,))
            await cursor.execute(
                f"INSERT INTO tfe_pending_versions ({_PENDING_COLUMNS}) VALUES"  # noqa: S608
                " (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (pending.id, pending.workspace_id, pending.key.tenant, pending.key.path,
                 pending.serial, pending.lineage, pending.md5, pending.lock_id,
                 pending.principal, pending.grant_hash, pending.created_at,
                 pending.expires_at, pending.status, pending.json_received, pending.version))

        return self._runner.run_interaction(create)

    def tfe_pending_version(self, version_id: str) -> Deferred[PendingVersion | None]:
        async def select(cursor: Any) -> PendingVersion | None:
            await cursor.execute(_PENDING_BY_ID, (version_id,))
            row = cursor.fetchone()
            return None if row is None else _pending(row)

        return self._runner.run_interaction(select)

    def tfe_claim_upload(self, version_id: str, grant_hash: str, part: str,
                         body_md5: str | None) -> Deferred[PendingVersion]:
        async def claim(cursor: Any) -> PendingVersion:
            await cursor.execute(_PENDING_BY_ID + " FOR UPDATE", (version_id,))
            row = cursor.fetchone()
            pending = None if row is None else _pending(row)
            grants.check_claim(pending, grant_hash, part, body_md5, self._clock())
            assert pending is not None
            if part == STATE_PART:
                await cursor.execute("UPDATE tfe_pending_versions SET status = %s WHERE id = %s",
                                     (UPLOADING, version_id))
            else:
                await cursor.execute("UPDATE tfe_pending_versions SET json_received = true"
                                     " WHERE id = %s", (version_id,))
            return pending

        return self._runner.run_interaction(claim)

    def tfe_settle_upload(self, version_id: str, version: int | None,
                          reopen: bool = False) -> Deferred[None]:
        async def settle(cursor: Any) -> None:
            await cursor.execute(
                "UPDATE tfe_pending_versions SET status = %s, version = %s WHERE id = %s",
                (settled_status(version, reopen), version, version_id))

        return self._runner.run_interaction(settle)

    # -- private ----------------------------------------------------------

    async def _adopt_txn(self, cursor: Any, key: StateKey,
                         created_at: datetime) -> TFEWorkspace:
        """The record of an existing state, created now unless another
        transaction just did."""
        await cursor.execute(_INSERT_WORKSPACE, {
            "id": new_workspace_id(), "tenant": key.tenant, "path": key.path,
            "created_at": created_at, "tags": "[]"})
        row = cursor.fetchone()
        if row is None:
            await cursor.execute(_WORKSPACE_BY_PATH, (key.tenant, key.path))
            row = cursor.fetchone()
        return _workspace(row)
