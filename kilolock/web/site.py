"""The resource tree and the twisted.web Site that serves it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from twisted.cred.portal import Portal
from twisted.web.resource import Resource
from twisted.web.server import Site

from kilolock.interfaces import IStateStore
from kilolock.metrics import Metrics
from kilolock.web._base import NotFoundResource
from kilolock.web.request import DEFAULT_MAX_BODY_BYTES, KilolockRequest
from kilolock.web.forwarded import Network
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
    """A Site whose requests enforce the body limit and the request deadline,
    carry a request id, and are counted in C{metrics} and logged as
    structured C{kilolock.access} events (Twisted's own access log is off)."""

    requestFactory = KilolockRequest

    def __init__(self, resource: Resource, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
                 request_timeout: float | None = None,
                 trusted_proxies: Sequence[Network] = (),
                 metrics: Metrics | None = None, **kwargs: Any) -> None:
        super().__init__(resource, **kwargs)
        self.max_body_bytes = max_body_bytes
        self.request_timeout = request_timeout
        self.trusted_proxies = tuple(trusted_proxies)
        self.metrics = metrics

    def log(self, request: Any) -> None:
        """Access lines are L{KilolockRequest}'s structured events."""
