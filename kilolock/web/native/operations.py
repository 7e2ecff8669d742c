"""Server-side state operations on the native API (L{kilolock.stateops}):

  POST    /v1/native/operations               start one (202, the operation)
  GET     /v1/native/operations/{id}          its status, progress, result
  DELETE  /v1/native/operations/{id}          cancel it (202; 409 once finished)
  POST    /v1/native/operations/{id}/cancel   the same, for edges without DELETE

An operation belongs to the tenant and principal that started it: any
other caller is answered exactly as for an id that never existed (404,
C{operation_not_found}, the same bytes).  Starting one needs a token that
may write every state it names (403 otherwise); a state locked by anyone
(Terraform included) is a 423 naming the holder, and the operation is
recorded as failed.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from attrs import evolve
from twisted.web.resource import Resource
from twisted.web.server import Request

from kilolock.core.errors import Conflict, InvalidField, NotFound
from kilolock.core.model import Principal, StateKey, rfc3339
from kilolock.stateops.model import OperationRecord, Owner
from kilolock.stateops.plans import plan_operation
from kilolock.stateops.requests import (
    ImportRequest,
    MoveRequest,
    OperationRequest,
    RemoveRequest,
    parse_operation,
)
from kilolock.stateops.runner import OperationLocked, OperationRunner
from kilolock.store.interfaces.stateops import IStateOperationsStore
from kilolock.web.body import in_thread_if_large, read_body
from kilolock.web.documents import json_response
from kilolock.web.lane import StateLane
from kilolock.web.native import BASE_PATH
from kilolock.web.native.documents import locked_response
from kilolock.web.native.options import NativeOptions
from kilolock.web.native.parameters import body_state
from kilolock.web.native.resource import Collection, NativeResource
from kilolock.web.resource import Response, named_child, render_async

#: The one message of an operation nobody can see: unknown, or another's.
NO_SUCH_OPERATION = "no such operation"


class OperationNotFound(NotFound):
    code = "operation_not_found"

    def __init__(self) -> None:
        super().__init__(NO_SUCH_OPERATION)


class OperationFinished(Conflict):
    code = "operation_finished"


def operation_document(record: OperationRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "kind": record.kind,
        "status": record.status,
        "createdAt": rfc3339(record.created_at),
        "updatedAt": rfc3339(record.updated_at),
        "cancelRequested": record.cancel_requested,
        **record.document(),
        "locks": [{"state": path, "lockId": lock_id} for path, lock_id in record.locks],
    }


def _request_document(request: OperationRequest, keys: dict[str, StateKey],
                      state_file: bytes | None) -> dict[str, Any]:
    """What the record shows of a request: names resolved, never state bytes."""
    document: dict[str, Any] = {"kind": request.kind, "state": keys[request.state].path}
    if isinstance(request, RemoveRequest):
        document["addresses"] = [str(address) for address in request.addresses]
    elif isinstance(request, MoveRequest):
        document.update({"from": str(request.from_), "to": str(request.to),
                         "toState": None if request.to_state is None
                         else keys[request.to_state].path})
    elif isinstance(request, ImportRequest):
        assert state_file is not None
        document.update({"size": len(state_file), "force": request.force,
                         "sha256": hashlib.sha256(state_file).hexdigest(),
                         "upload": request.upload})
    else:
        document["parts"] = [{"module": str(part.module), "state": keys[part.state].path,
                              "to": str(part.to)} for part in request.parts]
    return document


class OperationListResource(Collection):
    """C{POST /v1/native/operations}: start an operation."""

    route = BASE_PATH + "/operations"

    def __init__(self, lane: StateLane, options: NativeOptions,
                 runner: OperationRunner) -> None:
        super().__init__(lane)
        self.options = options
        self.runner = runner

    def item(self, path: bytes) -> Resource:
        return named_child(path, lambda name: OperationResource(self.lane, self.runner, name))

    @render_async
    async def render_POST(self, request: Request) -> Response:
        principal = await self.lane.authorize(request, write=True)
        body = await read_body(request, self.lane.reactor)
        parsed = await in_thread_if_large(self.lane.reactor, len(body), parse_operation, body)
        keys = {name: body_state(principal, name, write=True) for name in parsed.states}
        if (isinstance(parsed, MoveRequest) and parsed.to_state is not None
                and keys[parsed.to_state] == keys[parsed.state]):
            # toState naming the state itself, however it is spelt (NAME or
            # WORKSPACE_ID/ENV_PUBLIC_ID/NAME): a move within the state.
            parsed = evolve(parsed, to_state=None)
            keys = {parsed.state: keys[parsed.state]}
        if len({key.path for key in keys.values()}) != len(keys):
            raise InvalidField("state", "an operation names each state once")
        state_file = await self._state_file(principal, parsed, keys)

        def plan(current: dict[StateKey, bytes | None]) -> Any:
            return plan_operation(parsed, keys, current, state_file)

        try:
            record = await self.runner.start(principal, parsed.kind,
                                             _request_document(parsed, keys, state_file),
                                             list(keys.values()), plan)
        except OperationLocked as error:
            return _with_operation(locked_response(error, self.metrics), error.operation_id)
        answer = json_response(operation_document(record), 202)
        answer.headers[b"Location"] = f"{BASE_PATH}/operations/{record.id}".encode()
        return answer

    async def _state_file(self, principal: Principal, parsed: OperationRequest,
                          keys: dict[str, StateKey]) -> bytes | None:
        """An import's state file: given in the body, or the bytes of the
        caller's complete upload session for that state (consumed)."""
        if not isinstance(parsed, ImportRequest):
            return None
        if parsed.state_file is not None:
            return parsed.state_file
        assert parsed.upload is not None
        owner, now = Owner.of(principal), self.options.now()
        store = IStateOperationsStore(self.lane.store)
        session = await store.find_upload(owner, parsed.upload, now)
        if session is None or session.committed_version is not None:
            raise InvalidField("upload", "no such upload session (or it is committed)")
        if session.state_path != keys[parsed.state].path:
            raise InvalidField("upload", "the upload session was opened for another state")
        raw = await store.upload_bytes(owner, parsed.upload, now)
        if raw is None or hashlib.sha256(raw).hexdigest() != session.sha256:
            raise InvalidField("upload", "the upload session is not complete, or its bytes do"
                               " not have the declared sha256")
        await store.finish_upload(owner, parsed.upload, None)
        return bytes(raw)


def _with_operation(response: Response, operation_id: str) -> Response:
    """A lock conflict's answer naming the operation it failed (its record)."""
    document = json.loads(response.body)
    document["error"]["operation"] = operation_id
    return json_response(document, response.status)


class OperationResource(NativeResource):
    """C{/v1/native/operations/{id}}: read or cancel one operation."""

    route = BASE_PATH + "/operations/{id}"

    def __init__(self, lane: StateLane, runner: OperationRunner, operation_id: str) -> None:
        super().__init__(lane)
        self.runner = runner
        self.operation_id = operation_id

    def getChild(self, path: bytes, request: Request) -> Resource:
        if path == b"cancel" and not request.postpath:
            return OperationCancelResource(self)
        return super().getChild(path, request)

    async def find(self, request: Request) -> tuple[Principal, OperationRecord]:
        principal = await self.lane.authorize(request)
        owner = Owner.of(principal)
        store = IStateOperationsStore(self.lane.store)
        record = await store.find_operation(owner, self.operation_id)
        if record is not None and record.expired(self.runner.now()):
            await self.runner.sweep()
            record = await store.find_operation(owner, self.operation_id)
        if record is None:
            raise OperationNotFound()
        return principal, record

    @render_async
    async def render_GET(self, request: Request) -> Response:
        _, record = await self.find(request)
        return json_response(operation_document(record))

    @render_async
    async def render_DELETE(self, request: Request) -> Response:
        return await self.cancel(request)

    async def cancel(self, request: Request) -> Response:
        principal = await self.lane.authorize(request, write=True)
        record = await self.runner.cancel(Owner.of(principal), self.operation_id)
        if record is None:
            raise OperationNotFound()
        if record.finished:
            raise OperationFinished(f"the operation has finished ({record.status});"
                                    " nothing to cancel")
        return json_response(operation_document(record), 202)


class OperationCancelResource(NativeResource):
    """C{POST /v1/native/operations/{id}/cancel}: L{OperationResource}'s DELETE."""

    route = BASE_PATH + "/operations/{id}/cancel"

    def __init__(self, operation: OperationResource) -> None:
        super().__init__(operation.lane)
        self.operation = operation

    @render_async
    async def render_POST(self, request: Request) -> Response:
        return await self.operation.cancel(request)
