"""C{PUT /api/v2/state-version-uploads/{sv-id}/state|json-state?grant=...}:
the bytes of a pending state version, PUT without credentials (go-tfe sends
none to upload URLs), so the URL is the credential (L{kilolock.tfe.grants}).

The raw state: the grant is claimed (one transaction: the grant, its
expiry, single use, the announced MD5), then the bytes are stored through
the state store's write -- under the lock the creator held, which must
still hold the state (the lock matrix: 409 when it was released, taken by
another, or force-unlocked meanwhile) -- and the pending version is then
finalized, or discarded when the write was refused (pending again when the
database could not be reached: 503, and the client's retry may succeed).  The version becomes
current in that write's transaction, with its projection and audit event.

The JSON state (C{json-state}): claimed the same way (once), read and
dropped.  Kilolock keeps the raw state only: everything it shows (outputs,
resources) comes from it, and a second copy would hold sensitive values in
plaintext outside the version (even for an OpenTofu encrypted state).
"""

from __future__ import annotations

import contextlib
import hashlib

from twisted.web.server import Request

from kilolock.core.errors import ServiceUnavailable
from kilolock.core.model import Principal
from kilolock.tfe.grants import grant_hash
from kilolock.tfe.model import STATE_PART
from kilolock.web.body import in_thread_if_large, prepare_upload, read_body
from kilolock.web.context import context_of
from kilolock.web.query import plain_error, query_value
from kilolock.web.request import client_address
from kilolock.web.resource import Response, render_async
from kilolock.web.tfe.base import TFEResource
from kilolock.web.tfe.jsonapi import api_headers
from kilolock.web.tfe.lane import TFELane


def _md5(body: bytes) -> str:
    return hashlib.md5(body).hexdigest()  # noqa: S324 - an integrity binding, not secrecy


class UploadResource(TFEResource):
    """One upload URL of a pending version: C{part} is C{state} or C{json-state}."""

    route = "/api/v2/state-version-uploads/{state-version}/{part}"
    cancel_on_disconnect = frozenset()

    def __init__(self, lane: TFELane, identifier: str, part: str) -> None:
        super().__init__(lane)
        self.identifier = identifier
        self.part = part

    @render_async
    async def render_PUT(self, request: Request) -> Response:
        presented = grant_hash(query_value(request, "grant", plain_error) or "")
        body = await read_body(request, self.lane.reactor)
        store = self.lane.store
        if self.part != STATE_PART:
            await store.tfe_claim_upload(self.identifier, presented, self.part, None)
            return Response(200, headers=api_headers())
        digest = await in_thread_if_large(self.lane.reactor, len(body), _md5, body)
        pending = await store.tfe_claim_upload(self.identifier, presented, STATE_PART, digest)
        context_of(request).key = pending.key
        creator = Principal(tenant=pending.key.tenant, name=pending.principal,
                            address=client_address(request))
        try:
            upload = await in_thread_if_large(self.lane.reactor, len(body), prepare_upload,
                                              body)
            outcome = await store.write_state(pending.key, upload, pending.lock_id, creator)
        except Exception as error:
            # Refused: the version is discarded.  The database out of reach:
            # pending again, so that the client's retry of the same bytes
            # can still be stored (or, if this write did commit, replayed).
            with contextlib.suppress(Exception):
                await store.tfe_settle_upload(self.identifier, None,
                                              reopen=isinstance(error, ServiceUnavailable))
            raise
        await store.tfe_settle_upload(self.identifier, outcome.version.number)
        self.lane.states.count_write(outcome)
        return Response(200, headers=api_headers())
