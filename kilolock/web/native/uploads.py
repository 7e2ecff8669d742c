"""Upload sessions on the native API: a large state sent in chunks, through
edges whose body limit is below the state's size.

  POST    /v1/native/uploads                    open one ({"state", "size", "sha256"}): 201
  GET     /v1/native/uploads/{id}               what was received (to resume)
  PUT     /v1/native/uploads/{id}?offset=N      a chunk (any order; a repeat is a no-op)
  POST    /v1/native/uploads/{id}/commit[?ID=]  the whole as the state's new version
  DELETE  /v1/native/uploads/{id}               abandon it

The rules of chunks are L{kilolock.stateops.chunks}'.  A commit checks the
declared SHA-256 against the bytes received (a mismatch drops the session:
nothing is stored) and then writes them exactly as a POST of the state
lane would: parsed, under the lock the caller names with C{?ID=} (the lock
matrix and the serial rule of every write), audited as C{state_write}.  A
commit repeated after it succeeded answers the same version again.

A session belongs to the tenant and principal that opened it: any other
caller, and anyone after it expired, is answered exactly as for an id that
never existed (404, C{upload_not_found}).  A session expires
L{kilolock.web.native.options.DEFAULT_UPLOAD_TTL} seconds after its last
chunk.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import re
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

from twisted.web.resource import Resource
from twisted.web.server import Request

from kilolock.core.audit import client_version_detail
from kilolock.core.errors import (
    BadRequest,
    Conflict,
    InvalidField,
    LockConflict,
    PayloadTooLarge,
    ServiceUnavailable,
)
from kilolock.core.model import Principal, StateKey, rfc3339
from kilolock.core.text import NotJSON, load_json
from kilolock.stateops import chunks
from kilolock.stateops.model import Owner, UploadSession, new_upload_id
from kilolock.store.interfaces.stateops import IStateOperationsStore
from kilolock.web.body import in_thread_if_large, prepare_upload, read_body, verify_md5
from kilolock.web.documents import json_response
from kilolock.web.lane import StateLane
from kilolock.web.native import BASE_PATH
from kilolock.web.native.documents import locked_response, version_document
from kilolock.web.native.options import NativeOptions
from kilolock.web.native.parameters import body_state, number_arg
from kilolock.web.native.resource import Collection, NativeResource
from kilolock.web.query import query_id
from kilolock.web.resource import Response, named_child, render_async

_SHA256 = re.compile(r"[0-9a-f]{64}\Z")


class UploadIncomplete(Conflict):
    code = "upload_incomplete"


class DigestMismatch(BadRequest):
    code = "sha256_mismatch"


def upload_document(session: UploadSession) -> dict[str, Any]:
    received = chunks.received_ranges(session.chunks)
    missing, at = [], 0
    for start, end in received:
        if start > at:
            missing.append([at, start])
        at = end
    if at < session.size:
        missing.append([at, session.size])
    return {
        "id": session.id,
        "state": session.state_path,
        "size": session.size,
        "sha256": session.sha256,
        "createdAt": rfc3339(session.created_at),
        "expiresAt": rfc3339(session.expires_at),
        "receivedBytes": session.received,
        "received": received,
        "missing": missing,
        "complete": session.complete,
        "committedVersion": session.committed_version,
        "maxChunkBytes": chunks.MAX_CHUNK_BYTES,
    }


def _declaration(body: bytes, limit: int) -> tuple[str, int, str]:
    """The state, size and SHA-256 an opening declares.

    @raise InvalidText: the body breaks a text rule (L{kilolock.core.text}).
    @raise InvalidField: naming the field at fault."""
    document: Any
    try:
        document = load_json(body, "the upload declaration", "body")
    except NotJSON:
        document = None
    if not isinstance(document, dict) or set(document) - {"state", "size", "sha256"}:
        raise InvalidField("body", 'open an upload with {"state": NAME, "size": BYTES,'
                           ' "sha256": HEX}')
    state, size, digest = document.get("state"), document.get("size"), document.get("sha256")
    if not isinstance(state, str) or not state:
        raise InvalidField("state", "state must be a state name")
    if not isinstance(size, int) or isinstance(size, bool) or not 0 < size <= limit:
        raise InvalidField("size", f"size must be a whole number of bytes from 1 to {limit}")
    if not isinstance(digest, str) or not _SHA256.match(digest):
        raise InvalidField("sha256", "sha256 must be 64 lowercase hexadecimal digits")
    return state, size, digest


class UploadsOverBudget(ServiceUnavailable):
    code = "uploads_over_budget"


@contextlib.asynccontextmanager
async def _within_budget(request: Request, size: int) -> AsyncIterator[None]:
    """Hold a place of C{size} bytes in the listener's body and parse budgets
    (L{kilolock.web.admission}) while a committed state is read, parsed and
    written, as a POST of that size would: 503 with C{Retry-After} when it
    is past the body budget, a wait for the parse budget's turn."""
    budget = getattr(getattr(request.channel, "site", None), "budget", None)
    if budget is None or size < budget.large_body_bytes:
        yield
        return
    admission = budget.admit(size)
    if admission is None:
        retry_after = budget.refuse(size)
        raise UploadsOverBudget("too many large uploads are in progress; retry after"
                                f" {retry_after} s (KL_BODY_BUDGET_BYTES)",
                                retry_after=retry_after)
    try:
        await budget.process(admission)
        yield
    finally:
        budget.release(admission)


def _body_length(request: Request) -> int:
    """The length of the request's body (already received), without reading it."""
    content = request.content
    if content is None:
        return 0
    size = content.seek(0, io.SEEK_END)
    content.seek(0)
    return int(size)


class UploadListResource(Collection):
    """C{POST /v1/native/uploads}: open an upload session for a state."""

    route = BASE_PATH + "/uploads"

    def __init__(self, lane: StateLane, options: NativeOptions) -> None:
        super().__init__(lane)
        self.options = options

    def item(self, path: bytes) -> Resource:
        return named_child(path, lambda name: UploadResource(self.lane, self.options, name))

    @render_async
    async def render_POST(self, request: Request) -> Response:
        principal = await self.lane.authorize(request, write=True)
        body = await read_body(request, self.lane.reactor)
        name, size, digest = _declaration(body, self.options.max_state_bytes)
        key = body_state(principal, name, write=True)
        now = self.options.now()
        session = UploadSession(
            id=new_upload_id(), owner=Owner.of(principal), state_path=key.path, size=size,
            sha256=digest, created_at=now,
            expires_at=now + timedelta(seconds=self.options.upload_ttl))
        await IStateOperationsStore(self.lane.store).open_upload(
            session, self.options.max_open_uploads)
        answer = json_response(upload_document(session), 201)
        answer.headers[b"Location"] = f"{BASE_PATH}/uploads/{session.id}".encode()
        return answer


class UploadResource(NativeResource):
    """C{/v1/native/uploads/{id}}: one session: read, add a chunk, abandon."""

    route = BASE_PATH + "/uploads/{id}"

    def __init__(self, lane: StateLane, options: NativeOptions, upload_id: str) -> None:
        super().__init__(lane)
        self.options = options
        self.upload_id = upload_id

    @property
    def store(self) -> IStateOperationsStore:
        return IStateOperationsStore(self.lane.store)

    def getChild(self, path: bytes, request: Request) -> Resource:
        if path == b"commit" and not request.postpath:
            return UploadCommitResource(self)
        return super().getChild(path, request)

    async def session(self, request: Request, write: bool) -> tuple[Principal, UploadSession]:
        principal = await self.lane.authorize(request, write=write)
        found = await self.store.find_upload(Owner.of(principal), self.upload_id,
                                             self.options.now())
        if found is None:
            raise chunks.UploadNotFound()
        return principal, found

    @render_async
    async def render_GET(self, request: Request) -> Response:
        _, session = await self.session(request, write=False)
        return json_response(upload_document(session))

    @render_async
    async def render_PUT(self, request: Request) -> Response:
        principal = await self.lane.authorize(request, write=True)
        offset = number_arg(request, "offset", minimum=0)
        if offset is None:
            raise InvalidField("offset", "PUT a chunk with ?offset=N (its first byte's"
                               " position, from 0)")
        if _body_length(request) > chunks.MAX_CHUNK_BYTES:
            raise PayloadTooLarge(f"a chunk is at most {chunks.MAX_CHUNK_BYTES} bytes")
        data = await read_body(request, self.lane.reactor)
        await in_thread_if_large(self.lane.reactor, len(data), verify_md5,
                                 request.getHeader(b"Content-MD5"), data)
        now = self.options.now()
        session = await self.store.put_chunk(
            Owner.of(principal), self.upload_id, offset, data, now,
            now + timedelta(seconds=self.options.upload_ttl))
        return json_response(upload_document(session))

    @render_async
    async def render_DELETE(self, request: Request) -> Response:
        principal = await self.lane.authorize(request, write=True)
        owner = Owner.of(principal)
        if await self.store.find_upload(owner, self.upload_id, self.options.now()) is None \
                or not await self.store.finish_upload(owner, self.upload_id, None):
            raise chunks.UploadNotFound()
        return json_response({"id": self.upload_id, "abandoned": True})

    async def commit(self, request: Request) -> Response:
        principal, session = await self.session(request, write=True)
        key = StateKey(principal.tenant, session.state_path)
        if session.committed_version is not None:
            return await self._committed(key, session)
        if not session.complete:
            raise UploadIncomplete("the upload session has not received every byte yet;"
                                   " GET it to see what is missing")
        async with _within_budget(request, session.size):
            return await self._commit(request, principal, key, session)

    async def _commit(self, request: Request, principal: Principal, key: StateKey,
                      session: UploadSession) -> Response:
        owner, now = Owner.of(principal), self.options.now()
        raw = await self.store.upload_bytes(owner, self.upload_id, now)
        if raw is None:
            raise UploadIncomplete("the upload session has not received every byte yet")
        digest = await in_thread_if_large(self.lane.reactor, len(raw),
                                          lambda: hashlib.sha256(raw).hexdigest())
        if digest != session.sha256:
            await self.store.finish_upload(owner, self.upload_id, None)
            raise DigestMismatch("the bytes received do not have the declared sha256; nothing"
                                 " was stored and the session is gone: open a new one")
        try:
            upload = await in_thread_if_large(self.lane.reactor, len(raw), prepare_upload, raw)
        except BadRequest:
            await self.store.finish_upload(owner, self.upload_id, None)
            raise
        try:
            outcome = await self.lane.store.write_state(
                key, upload, query_id(request), principal,
                event_detail={**client_version_detail(upload.parsed.terraform_version),
                              "upload": self.upload_id})
        except LockConflict as error:
            return locked_response(error, self.metrics)
        self.lane.count_write(outcome)
        await self.store.finish_upload(owner, self.upload_id, outcome.version.number)
        return json_response({"state": key.path, "upload": self.upload_id,
                              "version": version_document(outcome.version, current=True),
                              "created": outcome.created})

    async def _committed(self, key: StateKey, session: UploadSession) -> Response:
        """A repeated commit: the version it became."""
        number = session.committed_version
        versions = await self.lane.store.list_versions(key)
        found = [v for v in versions if v.number == number]
        return json_response({"state": key.path, "upload": self.upload_id,
                              "version": version_document(found[0], current=found[0] is (
                                  versions[-1] if versions else None)) if found else None,
                              "created": False})


class UploadCommitResource(NativeResource):
    """C{POST /v1/native/uploads/{id}/commit[?ID=]}: see L{UploadResource.commit}."""

    route = BASE_PATH + "/uploads/{id}/commit"

    def __init__(self, upload: UploadResource) -> None:
        super().__init__(upload.lane)
        self.upload = upload

    @render_async
    async def render_POST(self, request: Request) -> Response:
        return await self.upload.commit(request)
