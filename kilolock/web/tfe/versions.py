"""State versions on the TFE lane: a workspace's current version, creating
one, reading one, downloading one.

  GET   /api/v2/workspaces/{ws-id}/current-state-version   404 while it has none
  POST  /api/v2/workspaces/{ws-id}/state-versions          L{CreateVersionResource}
  GET   /api/v2/state-versions/{sv-id}                     L{VersionResource}
  GET   /api/v2/state-versions/{sv-id}/download            L{DownloadResource}

A state version is created by a caller holding the workspace's lock
through this lane.  With the raw state inline (the legacy C{state}
attribute) it is stored at once, through the state store's write (the
serial rule, projection and audit event in one transaction); without it,
the answer is a pending version with two upload URLs (L{kilolock.tfe.grants},
L{kilolock.web.tfe.uploads}), stored when its bytes arrive.
"""

from __future__ import annotations

import hashlib

from twisted.web.server import Request

from kilolock.core.errors import ChecksumMismatch, NotFound, SerialConflict
from kilolock.core.model import Principal, StateVersion
from kilolock.tfe import grants
from kilolock.tfe.errors import WorkspaceLocked
from kilolock.tfe.locks import owns
from kilolock.tfe.model import PendingVersion, TFEWorkspace
from kilolock.tfe.names import is_pending_id, new_pending_id, parse_version_id, version_id
from kilolock.tfe.requests import parse_state_version_create
from kilolock.web.body import in_thread_if_large, prepare_upload, read_body
from kilolock.web.request import DEFAULT_MAX_BODY_BYTES
from kilolock.web.resource import JSON, Response, render_async
from kilolock.web.tfe.base import TFEResource
from kilolock.web.tfe.documents import pending_version_resource, state_version_resource
from kilolock.web.tfe.jsonapi import api_headers, jsonapi_response
from kilolock.web.tfe.lane import TFELane, visible_to
from kilolock.web.tfe.workspaces import BelowWorkspace

NOT_HELD = ("the workspace must be locked by you through this API (actions/lock) before a"
            " state version is created")


async def stored_version(lane: TFELane, workspace: TFEWorkspace, number: int) -> StateVersion:
    """Version C{number} of the workspace's state.  @raise NotFound: none."""
    for version in await lane.store.list_versions(workspace.key):
        if version.number == number:
            assert isinstance(version, StateVersion)
            return version
    raise NotFound("no such state version")


class CurrentVersionResource(BelowWorkspace):
    """The workspace's current version (404 while the state has none)."""

    route = "/api/v2/workspaces/{workspace}/current-state-version"

    @render_async
    async def render_GET(self, request: Request) -> Response:
        _, workspace = await self.workspace.find(request)
        summary = await self.lane.store.get_summary(workspace.key)
        if summary is None or summary.current is None:
            raise NotFound("the workspace has no state yet")
        identifier = version_id(workspace.id, summary.current.number)
        return jsonapi_response({"data": state_version_resource(
            identifier, summary.current, self.lane.base_url(request))})


class CreateVersionResource(BelowWorkspace):
    """C{POST}: a new state version of a workspace the caller has locked."""

    route = "/api/v2/workspaces/{workspace}/state-versions"

    @render_async
    async def render_POST(self, request: Request) -> Response:
        principal, workspace = await self.workspace.find(request, write=True)
        body = await read_body(request, self.lane.reactor)
        create = parse_state_version_create(body, DEFAULT_MAX_BODY_BYTES)
        held = await self.lane.store.get_lock(workspace.key)
        if held is None or not owns(held, principal):
            raise WorkspaceLocked(NOT_HELD)
        base = self.lane.base_url(request)
        if create.state is not None:
            if hashlib.md5(create.state).hexdigest() != create.md5:  # noqa: S324 - integrity
                raise ChecksumMismatch("the state's MD5 is not the md5 attribute; nothing"
                                       " was stored")
            upload = await in_thread_if_large(self.lane.reactor, len(create.state),
                                              prepare_upload, create.state)
            outcome = await self.lane.store.write_state(workspace.key, upload, held.info.id,
                                                        principal)
            self.lane.states.count_write(outcome)
            return jsonapi_response({"data": state_version_resource(
                version_id(workspace.id, outcome.version.number), outcome.version, base)}, 201)
        await self._check_serial(workspace, create.serial, create.md5)
        now = self.lane.clock()
        grant = grants.new_grant()
        pending = PendingVersion(
            id=new_pending_id(), workspace_id=workspace.id, key=workspace.key,
            serial=create.serial, lineage=create.lineage, md5=create.md5,
            lock_id=held.info.id, principal=principal.name,
            grant_hash=grants.grant_hash(grant), created_at=now,
            expires_at=now + grants.GRANT_LIFETIME)
        await self.lane.store.tfe_create_pending_version(pending)
        return jsonapi_response({"data": pending_version_resource(pending, pending.status,
                                                                  base, grant)}, 201)

    async def _check_serial(self, workspace: TFEWorkspace, serial: int, md5: str) -> None:
        """Refuse at once what the upload would be refused for (the serial
        rule): the current version's serial with other bytes."""
        summary = await self.lane.store.get_summary(workspace.key)
        if summary is None or summary.current is None or summary.current.serial != serial:
            return
        current = await self.lane.store.read_current(workspace.key)
        if current is None or hashlib.md5(current).hexdigest() != md5:  # noqa: S324
            raise SerialConflict(serial)


class VersionResource(TFEResource):
    """One state version: a stored one (C{sv-WS-N}) or a pending one."""

    route = "/api/v2/state-versions/{state-version}"

    def __init__(self, lane: TFELane, identifier: str) -> None:
        super().__init__(lane)
        self.identifier = identifier
        self.putChild(b"download", DownloadResource(lane, self))

    async def stored(self, request: Request) -> tuple[Principal, TFEWorkspace, int]:
        """The caller, the workspace and the number of a stored version's id.
        @raise NotFound: no such version the caller may see."""
        principal = await self.lane.caller(request)
        ref = parse_version_id(self.identifier)
        if ref is None:
            raise NotFound("no such state version")
        workspace = await self.lane.workspace_of(principal, ref.workspace_id)
        return principal, workspace, ref.number

    @render_async
    async def render_GET(self, request: Request) -> Response:
        base = self.lane.base_url(request)
        if is_pending_id(self.identifier):
            principal = await self.lane.caller(request)
            pending = await self.lane.store.tfe_pending_version(self.identifier)
            if (not isinstance(pending, PendingVersion)
                    or pending.key.tenant != principal.tenant
                    or not visible_to(principal, pending.key.path)):
                raise NotFound("no such state version")
            return jsonapi_response({"data": pending_version_resource(
                pending, pending.status_at(self.lane.clock()), base)})
        _, workspace, number = await self.stored(request)
        version = await stored_version(self.lane, workspace, number)
        return jsonapi_response({"data": state_version_resource(self.identifier, version,
                                                                base)})


class DownloadResource(TFEResource):
    """A stored version's bytes, exactly as they were written."""

    route = "/api/v2/state-versions/{state-version}/download"

    def __init__(self, lane: TFELane, version: VersionResource) -> None:
        super().__init__(lane)
        self.version = version

    @render_async
    async def render_GET(self, request: Request) -> Response:
        _, workspace, number = await self.version.stored(request)
        raw = await self.lane.store.read_version(workspace.key, number)
        if raw is None:
            raise NotFound("no such state version")
        return Response(200, raw, JSON, api_headers())
