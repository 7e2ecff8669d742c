"""What the resources of the native API share: the lane they work with, the
collections (whose path with a trailing slash is themselves), and the
resources of one state with the store reads they all make."""

from __future__ import annotations

from datetime import datetime

from twisted.web.resource import Resource
from twisted.web.server import Request

from kilolock.core.errors import NotFound, StateNotFound, VersionNotFound
from kilolock.core.events import LOCK_FORCE_RELEASE, LOCK_RELEASE
from kilolock.core.model import Principal, StateKey, StateSummary, StateVersion
from kilolock.web.lane import StateLane
from kilolock.web.resource import NO_SUCH_ROUTE, AsyncResource, Branch, ErrorPage, named_child

NO_ROUTE = ("no such route: a state is /v1/native/states/{name} or"
            " /v1/native/states/{workspace_id}/{env_public_id}/{state_name}, followed by"
            " /-/versions, /-/versions/{n}, /-/versions/{n}/purge, /-/diff, /-/outputs,"
            " /-/resources, /-/lock, /-/events, /-/rollback, /-/retention or /-/slice")


def no_route() -> Resource:
    """What a path below a state names when it names nothing: a JSON 404."""
    return Branch(NotFound(NO_ROUTE))


class NativeResource(AsyncResource):
    """A resource of the native API: it works with the lane's collaborators."""

    def __init__(self, lane: StateLane) -> None:
        super().__init__()
        self.lane = lane
        self.metrics = lane.metrics

    async def unlocked_since(self, tenant: str,
                             path: str | None) -> dict[str | None, datetime]:
        """When each state's lock was last released (one query)."""
        events = await self.lane.store.list_events(tenant, state_path=path,
                                                    kinds=[LOCK_RELEASE, LOCK_FORCE_RELEASE])
        return {event.state_path: event.at for event in events}


class Collection(NativeResource):
    """A list: its path with a trailing slash is itself; any other segment
    below it goes to L{item}."""

    def getChild(self, path: bytes, request: Request) -> Resource:
        if path == b"" and not request.postpath:
            return self
        return self.item(path)

    def item(self, path: bytes) -> Resource:
        """The resource for a segment below the list: by default nothing."""
        return ErrorPage(NotFound(NO_SUCH_ROUTE))


class StateSubresource(NativeResource):
    """A resource of the state at C{segments} (validated, one or three).
    Below it, by default, nothing (L{no_route})."""

    def __init__(self, lane: StateLane, segments: tuple[str, ...]) -> None:
        super().__init__(lane)
        self.segments = segments

    def getChild(self, path: bytes, request: Request) -> Resource:
        return named_child(path, self.child)

    def child(self, segment: str) -> Resource:
        return no_route()

    async def key(self, request: Request, write: bool = False) -> tuple[Principal, StateKey]:
        """The caller and the state, under the scope rule (401, 403)."""
        return await self.lane.authorize_state(request, self.segments, write)

    async def read(self, request: Request) -> tuple[StateKey, StateSummary]:
        """The state a read request names, and its summary (404 when there
        is no such state)."""
        _, key = await self.key(request)
        return key, await self.summary(key)

    async def summary(self, key: StateKey) -> StateSummary:
        summary = await self.lane.store.get_summary(key)
        if summary is None:
            raise StateNotFound("no such state")
        return summary

    async def current_number(self, key: StateKey) -> int:
        """The number of the state's current version (404 without one)."""
        summary = await self.summary(key)
        if summary.current is None:
            raise VersionNotFound("the state has no version yet")
        return summary.current.number

    async def versions(self, key: StateKey) -> list[StateVersion]:
        versions = await self.lane.store.list_versions(key)
        if not versions and await self.lane.store.get_summary(key) is None:
            raise StateNotFound("no such state")
        return versions

    async def version_bytes(self, key: StateKey, number: int) -> bytes:
        raw = await self.lane.store.read_version(key, number)
        if raw is None:
            await self.summary(key)  # a missing state is "no such state"
            raise VersionNotFound(f"the state has no version {number}")
        return raw
