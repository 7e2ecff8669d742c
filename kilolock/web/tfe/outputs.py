"""Outputs on the TFE lane.

  GET /api/v2/workspaces/{ws-id}/current-state-version-outputs
      the current version's outputs from its projection, each with its
      C{detailed-type} (so Terraform need not download the state); the
      values of sensitive ones are null.
  GET /api/v2/state-version-outputs/{wsout-id}
      one output, value included -- a sensitive one only for a caller
      allowed to read the state (not an outputs-only token).

Both are open to outputs-only tokens.  An encrypted state (an OpenTofu
envelope) has no outputs the server can read: 409.
"""

from __future__ import annotations

from twisted.web.server import Request

from kilolock.core.errors import Denied, EncryptedState, Forbidden, NotFound
from kilolock.rules.scope import state_key
from kilolock.tfe.names import parse_output_id
from kilolock.tfe.outputs import output_of_state, view_of_row
from kilolock.web.body import in_thread_if_large
from kilolock.web.resource import Response, render_async
from kilolock.web.tfe.base import TFEResource
from kilolock.web.tfe.documents import Page, output_entries, state_version_output_resource
from kilolock.web.tfe.jsonapi import jsonapi_response
from kilolock.web.tfe.lane import TFELane
from kilolock.web.tfe.workspaces import BelowWorkspace


class CurrentOutputsResource(BelowWorkspace):
    """The current version's outputs (none while the state has no version)."""

    route = "/api/v2/workspaces/{workspace}/current-state-version-outputs"

    @render_async
    async def render_GET(self, request: Request) -> Response:
        _, workspace = await self.workspace.find(request, outputs=True)
        summary = await self.lane.store.get_summary(workspace.key)
        current = summary.current if summary is not None else None
        entries = []
        if current is not None:
            projection = await self.lane.store.get_projection(workspace.key)
            if projection is None:
                raise EncryptedState("the current state version is encrypted: the server"
                                     " cannot read its outputs")
            entries = output_entries(workspace.id, current.number,
                                     [view_of_row(row) for row in projection.outputs])
        return jsonapi_response({
            "data": [state_version_output_resource(identifier, view)
                     for identifier, view in entries],
            "meta": Page(1, max(1, len(entries))).meta(len(entries)),
        })


class OutputResource(TFEResource):
    """One output of a stored version, its value included."""

    route = "/api/v2/state-version-outputs/{output}"

    def __init__(self, lane: TFELane, identifier: str) -> None:
        super().__init__(lane)
        self.identifier = identifier

    @render_async
    async def render_GET(self, request: Request) -> Response:
        principal = await self.lane.caller(request, outputs=True)
        ref = parse_output_id(self.identifier)
        if ref is None:
            raise NotFound("no such output")
        workspace = await self.lane.workspace_of(principal, ref.workspace_id, outputs=True)
        raw = await self.lane.store.read_version(workspace.key, ref.number)
        view = None if raw is None else await in_thread_if_large(
            self.lane.reactor, len(raw), output_of_state, raw, ref.index)
        if view is None:
            raise NotFound("no such output")
        if view.sensitive:
            # A sensitive value is the state's content: whoever may read the
            # state (the scope rule: not an outputs-only token or grant).
            try:
                state_key(principal, tuple(workspace.key.path.split("/")), False)
            except Denied:
                raise Forbidden("this token may not read sensitive outputs") from None
        return jsonapi_response({"data": state_version_output_resource(
            self.identifier, view, reveal=True)})
