"""The resource tree and the twisted.web Site that serves it."""

from __future__ import annotations

from typing import Any

from twisted.cred.portal import Portal
from twisted.web.resource import Resource
from twisted.web.server import Site

from kilolock.interfaces import IStateStore
from kilolock.web._base import NotFoundResource
from kilolock.web.body import DEFAULT_MAX_BODY_BYTES, LimitedRequest
from kilolock.web.health import HealthResource
from kilolock.web.states import StateLane, StatesCollection


class _Branch(Resource):
    """A fixed path segment: its children, or a JSON 404."""

    def getChild(self, path: bytes, request: Any) -> Resource:
        return NotFoundResource()

    def render(self, request: Any) -> Any:
        return NotFoundResource().render(request)


def build_root(store: IStateStore, portal: Portal, reactor: Any) -> Resource:
    """The tree: C{/healthz}, C{/v1/states/...}, C{/v1/state-unlock/...}."""
    lane = StateLane(store=store, portal=portal, reactor=reactor)
    root = _Branch()
    v1 = _Branch()
    root.putChild(b"v1", v1)
    root.putChild(b"healthz", HealthResource())
    v1.putChild(b"states", StatesCollection(lane))
    v1.putChild(b"state-unlock", StatesCollection(lane, unlock_only=True))
    return root


class KilolockSite(Site):
    """A Site whose requests enforce C{max_body_bytes} while bodies stream in."""

    requestFactory = LimitedRequest

    def __init__(self, resource: Resource, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
                 **kwargs: Any) -> None:
        super().__init__(resource, **kwargs)
        self.max_body_bytes = max_body_bytes
