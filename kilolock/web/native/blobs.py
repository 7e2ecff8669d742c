"""Version bytes by content address: C{GET|HEAD /v1/native/blobs/{sha256}}.

A digest is a name, not a capability: it answers only a caller whose tenant
holds a version with those bytes, in a state the caller may read (a scoped
token: its workspace/environment).  Anyone else -- another tenant that
wrote nothing of the kind, a token outside the state's scope -- is answered
exactly as for a digest nobody ever stored (404, C{blob_not_found}, the
same bytes).  The bytes are those of one of the caller's versions: each
tenant's versions are its own rows, so no tenant's deletion, purge or
pruning can take bytes another tenant holds.
"""

from __future__ import annotations

import re

from twisted.web.resource import Resource
from twisted.web.server import Request

from kilolock.core.errors import NotFound
from kilolock.core.model import StateKey
from kilolock.rules.scope import in_scope
from kilolock.store.interfaces.stateops import IStateOperationsStore
from kilolock.web.documents import NO_STORE
from kilolock.web.lane import StateLane
from kilolock.web.native import BASE_PATH
from kilolock.web.native.resource import Collection, NativeResource
from kilolock.web.resource import JSON, Response, named_child, render_async

_SHA256 = re.compile(r"[0-9a-f]{64}\Z")


class BlobNotFound(NotFound):
    code = "blob_not_found"

    def __init__(self) -> None:
        super().__init__("no such blob")


class BlobListResource(Collection):
    """C{/v1/native/blobs}: nothing by itself; a digest below it."""

    route = BASE_PATH + "/blobs"

    def item(self, path: bytes) -> Resource:
        return named_child(path, lambda digest: BlobResource(self.lane, digest))


class BlobResource(NativeResource):
    """C{GET /v1/native/blobs/{sha256}}: the bytes, if the caller holds them."""

    route = BASE_PATH + "/blobs/{sha256}"

    def __init__(self, lane: StateLane, digest: str) -> None:
        super().__init__(lane)
        self.digest = digest

    @render_async
    async def render_GET(self, request: Request) -> Response:
        principal = await self.lane.authorize(request)
        if not _SHA256.match(self.digest):
            raise BlobNotFound()
        found = await IStateOperationsStore(self.lane.store).find_digest(principal.tenant,
                                                                         self.digest)
        for path, number in found:
            if not in_scope(principal, path):
                continue
            raw = await self.lane.store.read_version(StateKey(principal.tenant, path), number)
            if raw is not None:
                return Response(200, raw, JSON, {**NO_STORE,
                                                 b"X-Kilolock-Sha256": self.digest.encode()})
        raise BlobNotFound()
