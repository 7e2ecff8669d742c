"""A workspace's lock actions: C{POST /api/v2/workspaces/{ws-id}/actions/...}.

  lock          409 whenever the state is locked, by anyone (the caller
                included: the TFE API names no lock ID, so Terraform's own
                second lock must fail); else a lock with a LockInfo Kilolock
                makes (L{kilolock.tfe.locks}), which the HTTP lane shows.
  unlock        releases the caller's own TFE-lane lock; 409 when another
                holds the lock (C{is locked by User ...}) or none is held.
  force-unlock  releases whatever lock is held (audited as a forced
                release); 409 when none is held.

Each answers the workspace.
"""

from __future__ import annotations

from twisted.web.server import Request

from kilolock.core.errors import Conflict, LockConflict
from kilolock.tfe.errors import WorkspaceLocked
from kilolock.tfe.locks import lane_of, owns, tfe_lock_info
from kilolock.tfe.requests import parse_lock_reason
from kilolock.web.body import read_body
from kilolock.web.resource import Response, render_async
from kilolock.web.tfe.lane import TFELane
from kilolock.web.tfe.workspaces import BelowWorkspace, WorkspaceResource, workspace_answer

NOT_LOCKED = "workspace already unlocked"


class LockActionResource(BelowWorkspace):
    """C{actions/lock}, C{actions/unlock} or C{actions/force-unlock}."""

    route = "/api/v2/workspaces/{workspace}/actions/{lock-action}"

    def __init__(self, lane: TFELane, workspace: WorkspaceResource, action: str) -> None:
        super().__init__(lane, workspace)
        self.action = action

    @render_async
    async def render_POST(self, request: Request) -> Response:
        principal, workspace = await self.workspace.find(request, write=True)
        store = self.lane.store
        key = workspace.key
        if self.action == "lock":
            reason = parse_lock_reason(await read_body(request, self.lane.reactor))
            organization = await self.lane.organization_name(principal)
            info = tfe_lock_info(principal, f"{organization}/{workspace.name}", reason,
                                 self.lane.clock())
            try:
                await store.acquire_lock(key, info, principal)
            except LockConflict:
                raise WorkspaceLocked("the workspace is already locked") from None
            if self.metrics is not None:
                self.metrics.lock_acquisitions.inc()
        elif self.action == "unlock":
            held = await store.get_lock(key)
            if held is None:
                raise Conflict(NOT_LOCKED)
            if not owns(held, principal):
                raise Conflict(f"Workspace is locked by User {held.info.who or held.principal}"
                               f" (through the {lane_of(held.info)} lane); force-unlock"
                               " releases another's lock")
            try:
                await store.release_lock(key, held.info.id, principal)
            except LockConflict:
                raise Conflict("the lock changed hands meanwhile") from None
        else:
            if await store.release_lock(key, None, principal) is None:
                raise Conflict(NOT_LOCKED)
            if self.metrics is not None:
                self.metrics.lock_force_releases.inc()
        return await workspace_answer(self.lane, request, principal, workspace)
