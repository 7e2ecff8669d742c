"""The Terraform/OpenTofu HTTP backend: C{/v1/states} and C{/v1/state-unlock}.

Routes (each name one validated path segment, see L{kilolock.rules.paths}):

  GET|HEAD|POST|PUT|DELETE|LOCK|UNLOCK  /v1/states/{name}
  GET|HEAD|POST|PUT|DELETE|LOCK|UNLOCK  /v1/states/{workspace_id}/{env_public_id}/{state_name}
  POST (= LOCK), DELETE (= UNLOCK)      /v1/states/.../lock
  POST (= UNLOCK)                       /v1/state-unlock/...

The tree, one segment at a time (C{getChild}):

  /v1/states                        a branch: 404 "name a state"
    {name}                          L{StateResource} of C{name}
      lock                          L{LockAliasResource} of C{name}
        {state_name}                L{StateResource} of C{name/lock/state_name}
      {env_public_id}               a branch: 404
        {state_name}                L{StateResource} of C{name/env_public_id/state_name}
          lock                      L{LockAliasResource} of that state

  /v1/state-unlock                  the same shape, with L{StateUnlockResource}s
                                    and no C{lock} alias

So a one-segment state may be named C{lock}; C{{name}/lock} is the lock
alias of C{{name}}; three segments are a name of their own (in the open and
static auth modes an ordinary one, in hosted mode C{workspace/environment/
state}).  Anything deeper, or two segments, is a JSON 404, its segments
still checked (a bad segment anywhere is a 400).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from twisted.web.resource import Resource
from twisted.web.server import Request

from kilolock.core.audit import client_version_detail
from kilolock.core.errors import NotFound
from kilolock.core.model import LockInfo, StateUpload
from kilolock.rules.paths import LOCK_SUFFIX
from kilolock.store.interfaces.states import IOverlappedWrites
from kilolock.web.body import (
    THREAD_THRESHOLD,
    check_md5,
    parse_upload,
    read_body,
    release_after_answer,
    start_upload_feed,
    unlock_lock_id,
)
from kilolock.web.lane import READ_BACK, Finishing, StateLane
from kilolock.web.query import query_id
from kilolock.web.resource import JSON, AsyncResource, Branch, Response, named_child, render_async

NO_STATE = ("no such route: a state is addressed as /{name} or"
            " /{workspace_id}/{env_public_id}/{state_name}")

#: Builds the resource of the state at some segments, in one of the two trees.
StateFactory = Callable[[StateLane, tuple[str, ...]], Resource]


def _client_detail(upload: StateUpload) -> Mapping[str, Any]:
    """What a write's event says of the client that sent C{upload}."""
    return client_version_detail(upload.parsed.terraform_version)


def nothing_below() -> Resource:
    """What a path below a complete state address names: nothing."""
    return Branch(NotFound(NO_STATE))


class _StateNode(AsyncResource):
    """A resource of the state at C{segments} (one or three)."""

    def __init__(self, lane: StateLane, segments: tuple[str, ...]) -> None:
        super().__init__()
        self.lane = lane
        self.segments = segments
        self.metrics = lane.metrics

    def getChild(self, path: bytes, request: Request) -> Resource:
        return named_child(path, self.child)

    def child(self, segment: str) -> Resource:
        return nothing_below()

    def hosted(self, second: str, state: StateFactory) -> Resource:
        """Below a one-segment address, C{second} is the middle segment of the
        three-segment form, whose state is built by C{state}."""
        if len(self.segments) != 1:
            return nothing_below()
        first = self.segments[0]
        return Branch(NotFound(NO_STATE),
                      child=lambda name: state(self.lane, (first, second, name)))

    async def release(self, request: Request, accepts_plain_lock_id: bool) -> Response:
        """Release the lock an unlock request names (a force release without one).

        The body is read first: the lock it names decides whether an expired
        CI token may still release it (L{Finishing})."""
        body = await read_body(request, self.lane.reactor)
        check_md5(request, body)
        lock_id = unlock_lock_id(body, query_id(request), accepts_plain_lock_id)
        principal, key = await self.lane.authorize_state(request, self.segments, write=True,
                                                         finishing=Finishing(lock_id))
        released = await self.lane.store.release_lock(key, lock_id, principal)
        if lock_id is None and released is not None and self.metrics is not None:
            self.metrics.lock_force_releases.inc()
        return Response(200)


class StateResource(_StateNode):
    """One state: read, write, delete, lock and unlock it."""

    route = "/v1/states/{state}"

    def child(self, segment: str) -> Resource:
        if segment == LOCK_SUFFIX:
            return LockAliasResource(self)
        return self.hosted(segment, StateResource)

    @render_async
    async def render_GET(self, request: Request) -> Response:
        # Terraform reads back the state it holds locked (before its first
        # write): a CI token that expired meanwhile may still do that.
        _, key = await self.lane.authorize_state(request, self.segments, finishing=READ_BACK)
        raw = await self.lane.store.read_current(key)
        if raw is None:
            return Response(404)
        return Response(200, raw, JSON)

    @render_async
    async def render_POST(self, request: Request) -> Response:
        lock_id = query_id(request)
        principal, key = await self.lane.authorize_state(
            request, self.segments, write=True,
            finishing=None if lock_id is None else Finishing(lock_id))
        body = await read_body(request, self.lane.reactor)
        store = self.lane.store
        if (IOverlappedWrites.providedBy(store) and self.lane.reactor is not None
                and len(body) >= THREAD_THRESHOLD):
            # The store starts writing while the parse runs (the answers
            # and their order are the same).
            feed = start_upload_feed(body, request.getHeader(b"Content-MD5"),
                                     self.lane.reactor)
            outcome = await store.write_state_overlapped(key, feed, lock_id, principal,
                                                         detail_of=_client_detail)
            release_after_answer(self.lane.reactor, body, feed)
            del body, feed
        else:
            upload = await parse_upload(request, body, self.lane.reactor)
            outcome = await store.write_state(key, upload, lock_id, principal,
                                              event_detail=_client_detail(upload))
        self.lane.count_write(outcome)
        return Response(200)

    def render_PUT(self, request: Request) -> int:
        """POST under another name (Terraform's C{update_method = "PUT"})."""
        return self.render_POST(request)

    @render_async
    async def render_DELETE(self, request: Request) -> Response:
        principal, key = await self.lane.authorize_state(request, self.segments, write=True)
        await self.lane.store.delete_state(key, query_id(request), principal)
        return Response(200)

    @render_async
    async def render_LOCK(self, request: Request) -> Response:
        principal, key = await self.lane.authorize_state(request, self.segments, write=True)
        body = await read_body(request, self.lane.reactor)
        check_md5(request, body)
        info = LockInfo.from_bytes(body)
        acquired = await self.lane.store.acquire_lock(key, info, principal)
        if acquired and self.metrics is not None:
            self.metrics.lock_acquisitions.inc()
        return Response(200)

    @render_async
    async def render_UNLOCK(self, request: Request) -> Response:
        return await self.release(request, accepts_plain_lock_id=False)


class LockAliasResource(_StateNode):
    """C{{state URL}/lock}: POST locks, DELETE unlocks (GitLab's convention),
    for clients that only send standard methods."""

    route = "/v1/states/{state}/lock"

    def __init__(self, state: StateResource) -> None:
        super().__init__(state.lane, state.segments)
        self.state = state

    def child(self, segment: str) -> Resource:
        # {name}/lock/{state_name} is a three-segment name of its own.
        if len(self.segments) != 1:
            return nothing_below()
        return StateResource(self.lane, (self.segments[0], LOCK_SUFFIX, segment))

    def render_POST(self, request: Request) -> int:
        return self.state.render_LOCK(request)

    def render_DELETE(self, request: Request) -> int:
        return self.state.render_UNLOCK(request)


class StateUnlockResource(_StateNode):
    """C{POST /v1/state-unlock/...}: lock release for edges that drop UNLOCK;
    the body may also be the plain lock ID."""

    route = "/v1/state-unlock/{state}"

    def child(self, segment: str) -> Resource:
        return self.hosted(segment, StateUnlockResource)

    @render_async
    async def render_POST(self, request: Request) -> Response:
        return await self.release(request, accepts_plain_lock_id=True)


def states_branch(lane: StateLane, state: StateFactory) -> Resource:
    """C{/v1/states} (with L{StateResource}) or C{/v1/state-unlock} (with
    L{StateUnlockResource}): a state's name below, nothing by itself."""
    return Branch(NotFound("name a state: /v1/states/{name}"),
                  child=lambda name: state(lane, (name,)))
