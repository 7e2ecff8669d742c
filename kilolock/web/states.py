"""The Terraform/OpenTofu HTTP backend lane: C{/v1/states} and C{/v1/state-unlock}.

Routes (each name a validated path segment, see L{kilolock.web.paths}):

  GET|HEAD|POST|PUT|DELETE|LOCK|UNLOCK  /v1/states/{name}
  GET|HEAD|POST|PUT|DELETE|LOCK|UNLOCK  /v1/states/{workspace_id}/{env_public_id}/{state_name}
  POST (= LOCK), DELETE (= UNLOCK)      /v1/states/.../lock
  POST (= UNLOCK)                       /v1/state-unlock/...
"""

from __future__ import annotations

from typing import Any

from attrs import evolve, frozen
from twisted.cred.portal import Portal
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request

from kilolock.auth import authenticate
from kilolock.errors import Forbidden, InvalidPath, KilolockError, NotFound
from kilolock.interfaces import IStateStore
from kilolock.model import LockInfo, Principal, StateKey
from kilolock.tls import with_client_certificate
from kilolock.web._base import JSON, AsyncResource, Response, response_for_error, write_response
from kilolock.web.body import check_md5, parse_upload, read_body, unlock_lock_id
from kilolock.web.paths import StateAddress, consume_segments, parse_state_segments
from kilolock.web.request import client_address, site_metrics


@frozen
class StateLane:
    """What every state resource needs: the store, the auth portal, the reactor."""

    store: IStateStore
    portal: Portal
    reactor: Any

    async def principal(self, request: Request) -> Principal:
        return await authenticate(self.portal, request.getHeader(b"Authorization"))

    def key_for(self, principal: Principal, address: StateAddress) -> StateKey:
        """Map an address to the caller's state, deciding 403 from the token and
        the URL alone (before any storage read)."""
        if principal.workspace_id is None:
            return StateKey(principal.tenant, address.path)
        if (principal.basic_username is not None
                and principal.basic_username != principal.workspace_id):
            raise Forbidden("the Basic username must be the token's workspace_id")
        scope = (principal.workspace_id, principal.env_public_id)
        if address.hosted:
            if tuple(address.segments[:2]) != scope:
                raise Forbidden("this token does not grant access to that workspace/environment")
            return StateKey(principal.tenant, address.path)
        return StateKey(principal.tenant, "/".join((*scope, address.segments[0])))  # type: ignore[arg-type]


def _query_id(request: Request) -> str | None:
    values: list[bytes] = (request.args or {}).get(b"ID") or []
    if not values or not values[0]:
        return None
    return values[0].decode("utf-8", "replace")


class _StateBase(AsyncResource):
    def __init__(self, lane: StateLane, address: StateAddress) -> None:
        super().__init__()
        self.lane = lane
        self.address = address

    async def _key(self, request: Request, write: bool) -> StateKey:
        principal = await self.lane.principal(request)
        request.tenant = principal.tenant  # type: ignore[attr-defined]
        key = self.lane.key_for(principal, self.address)
        if write and not principal.can_write:
            raise Forbidden("this token is read-only")
        request.kilolock_principal = with_client_certificate(  # type: ignore[attr-defined]
            evolve(principal, address=client_address(request)), request)
        return key

    def _principal(self, request: Request) -> Principal:
        principal: Principal = request.kilolock_principal  # type: ignore[attr-defined]
        return principal

    async def _lock(self, request: Request) -> Response:
        key = await self._key(request, write=True)
        body = await read_body(request, self.lane.reactor)
        check_md5(request, body)
        info = LockInfo.from_bytes(body)
        acquired = await self.lane.store.acquire_lock(key, info, self._principal(request))
        metrics = site_metrics(request)
        if acquired and metrics is not None:
            metrics.lock_acquisitions.inc()
        return Response(200)

    async def _unlock(self, request: Request, allow_plain: bool) -> Response:
        key = await self._key(request, write=True)
        body = await read_body(request, self.lane.reactor)
        check_md5(request, body)
        lock_id = unlock_lock_id(body, _query_id(request), allow_plain)
        released = await self.lane.store.release_lock(key, lock_id, self._principal(request))
        metrics = site_metrics(request)
        if lock_id is None and released is not None and metrics is not None:
            metrics.lock_force_releases.inc()
        return Response(200)


class StateResource(_StateBase):
    """One state: read, write, delete, lock and unlock it."""

    route = "/v1/states/{state}"

    async def do_GET(self, request: Request) -> Response:
        key = await self._key(request, write=False)
        raw = await self.lane.store.read_current(key)
        if raw is None:
            return Response(404)
        return Response(200, raw, JSON)

    async def do_POST(self, request: Request) -> Response:
        key = await self._key(request, write=True)
        body = await read_body(request, self.lane.reactor)
        upload = await parse_upload(request, body, self.lane.reactor)
        outcome = await self.lane.store.write_state(key, upload, _query_id(request),
                                                    self._principal(request))
        metrics = site_metrics(request)
        if outcome.created and metrics is not None:
            metrics.writes.inc()
            metrics.bytes_stored.inc(outcome.version.size)
        return Response(200)

    # update_method = "PUT" is a plain alias of POST.
    do_PUT = do_POST

    async def do_DELETE(self, request: Request) -> Response:
        key = await self._key(request, write=True)
        await self.lane.store.delete_state(key, _query_id(request), self._principal(request))
        return Response(200)

    async def do_LOCK(self, request: Request) -> Response:
        return await self._lock(request)

    async def do_UNLOCK(self, request: Request) -> Response:
        return await self._unlock(request, allow_plain=False)


class LockAliasResource(_StateBase):
    """C{{state URL}/lock}: POST locks, DELETE unlocks (GitLab's convention)."""

    route = "/v1/states/{state}/lock"

    async def do_POST(self, request: Request) -> Response:
        return await self._lock(request)

    async def do_DELETE(self, request: Request) -> Response:
        return await self._unlock(request, allow_plain=False)


class StateUnlockResource(_StateBase):
    """C{POST /v1/state-unlock/...}: lock release for edges that drop UNLOCK."""

    route = "/v1/state-unlock/{state}"

    async def do_POST(self, request: Request) -> Response:
        return await self._unlock(request, allow_plain=True)


class ErrorResource(AsyncResource):
    """Answers every method with one fixed error."""

    def __init__(self, error: KilolockError) -> None:
        super().__init__()
        self.error = error

    def render(self, request: Request) -> Any:
        write_response(request, response_for_error(self.error))
        return NOT_DONE_YET


class StatesCollection(Resource):
    """C{/v1/states} (or C{/v1/state-unlock} with C{unlock_only}): consumes the
    remaining segments and hands them to the right state resource."""

    def __init__(self, lane: StateLane, unlock_only: bool = False) -> None:
        super().__init__()
        self.lane = lane
        self.unlock_only = unlock_only

    def getChild(self, path: bytes, request: Request) -> Resource:
        raw_segments = consume_segments(path, request)
        try:
            parsed = parse_state_segments(raw_segments, allow_lock_suffix=not self.unlock_only)
        except InvalidPath as error:
            return ErrorResource(error)
        if parsed is None:
            return ErrorResource(NotFound(
                "no such route: a state is addressed as /{name} or"
                " /{workspace_id}/{env_public_id}/{state_name}"))
        address, lock_alias = parsed
        if self.unlock_only:
            return StateUnlockResource(self.lane, address)
        if lock_alias:
            return LockAliasResource(self.lane, address)
        return StateResource(self.lane, address)

    def render(self, request: Request) -> Any:
        return ErrorResource(NotFound("name a state: /v1/states/{name}")).render(request)
