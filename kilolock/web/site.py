"""The resource tree and the twisted.web Site that serves it."""

from __future__ import annotations

import collections
from collections.abc import Sequence
from typing import Any

from prometheus_client import Counter
from twisted.cred.portal import Portal
from twisted.logger import Logger
from twisted.web.resource import Resource
from twisted.web.server import Site

from kilolock.retention.policy import KEEP_EVERYTHING, RetentionPolicy
from kilolock.server.metrics import Metrics
from kilolock.store.interfaces.states import IStateStore
from kilolock.web.admission import UploadBudget, trim_malloc
from kilolock.web.channel import KilolockChannel
from kilolock.web.edge import DEFAULT_LIMITS, EdgeLimits
from kilolock.web.forwarded import Network
from kilolock.web.http.states import StateResource, StateUnlockResource, states_branch
from kilolock.web.lane import StateLane
from kilolock.web.native.options import NativeOptions
from kilolock.web.native.tree import NativeRoot
from kilolock.web.ops.discovery import DiscoveryResource
from kilolock.web.ops.health import HealthResource, ReadinessResource
from kilolock.web.ops.metrics import MetricsResource
from kilolock.web.request import DEFAULT_MAX_BODY_BYTES, KilolockRequest
from kilolock.web.resource import Directory
from kilolock.web.tfe.discovery import TerraformDiscoveryResource
from kilolock.web.tfe.lane import TFELane
from kilolock.web.tfe.tree import api_root
from kilolock.web.ui.tree import RootDirectory, UiOptions, build_dashboard

log = Logger(namespace="kilolock.access")


def build_root(store: IStateStore, portal: Portal, reactor: Any,
               metrics: Metrics | None = None, auth_mode: str = "open",
               ui: UiOptions | None = None, public_url: str | None = None,
               retention: RetentionPolicy = KEEP_EVERYTHING,
               native: NativeOptions | None = None) -> Resource:
    """The state listener's tree: C{/v1/states/...} and C{/v1/state-unlock/...}
    (L{kilolock.web.http.states}), C{/v1/native/...} (L{kilolock.web.native}),
    C{/api/v2/...} (the TFE lane, L{kilolock.web.tfe}; its URLs based on
    C{public_url}, else the request's host), C{/healthz}, C{/readyz},
    C{/metrics} (with C{metrics}), C{/.well-known/kilolock} and
    C{/.well-known/terraform.json}; with C{ui}, the dashboard at C{/ui/}
    (L{kilolock.web.ui}), where a browser's C{GET /} goes; anything else a
    JSON 404.  C{retention} is the server's retention policy (what the
    native API shows as a state's policy when nothing overrides it);
    C{native} configures the native API's write side (operations, upload
    sessions)."""
    lane = StateLane(store=store, portal=portal, reactor=reactor, metrics=metrics,
                     retention=retention)
    root = Directory() if ui is None else RootDirectory()
    if ui is not None:
        root.putChild(b"ui", build_dashboard(lane, auth_mode, ui))
    v1 = Directory()
    well_known = Directory()
    root.putChild(b"v1", v1)
    root.putChild(b"healthz", HealthResource())
    root.putChild(b"readyz", ReadinessResource(store))
    root.putChild(b".well-known", well_known)
    well_known.putChild(b"kilolock", DiscoveryResource(auth_mode))
    well_known.putChild(b"terraform.json", TerraformDiscoveryResource())
    api = Directory()
    root.putChild(b"api", api)
    api.putChild(b"v2", api_root(TFELane(lane, auth_mode=auth_mode, public_url=public_url)))
    if metrics is not None:
        root.putChild(b"metrics", MetricsResource(metrics, store))
    v1.putChild(b"states", states_branch(lane, StateResource))
    v1.putChild(b"state-unlock", states_branch(lane, StateUnlockResource))
    v1.putChild(b"native", NativeRoot(lane, native))
    return root


class KilolockSite(Site):
    """A Site whose connections and requests are held to the edge limits
    (C{edge}: L{kilolock.web.channel}), the body limit, the request
    deadline and the large-body budgets (L{kilolock.web.admission}), carry
    a request id, and are counted in C{metrics} and logged as structured
    C{kilolock.access} events (Twisted's own access log is off).

    C{listener} names the site in the C{kilolock_http_refusals_total}
    metric, which C{refusals} (else C{metrics.refusals}) counts."""

    requestFactory = KilolockRequest
    protocol = KilolockChannel  # type: ignore[assignment]  # plain HTTP/1.1, no h2 upgrade

    def __init__(self, resource: Resource, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
                 request_timeout: float | None = None,
                 trusted_proxies: Sequence[Network] = (),
                 metrics: Metrics | None = None, edge: EdgeLimits = DEFAULT_LIMITS,
                 listener: str = "state", refusals: Counter | None = None,
                 **kwargs: Any) -> None:
        # No resource reads HTML form fields: skip parsing the Content-Type
        # of every POST (twisted.web does it with the email package, ~25 us).
        super().__init__(resource, parsePOSTFormSubmission=False, **kwargs)
        #: Requests whose bytes are arriving, and requests being processed.
        self.receiving = 0
        self.in_flight = 0
        #: Open connections (closed gently, answers flushed, on shutdown).
        self.connections: set[Any] = set()
        #: Open connections per peer address (those under the cap).
        self.peers: collections.Counter[str] = collections.Counter()
        self.max_body_bytes = max_body_bytes
        self.request_timeout = request_timeout
        self.trusted_proxies = tuple(trusted_proxies)
        self.metrics = metrics
        self.edge = edge
        self.listener = listener
        self.refusals = refusals if refusals is not None or metrics is None \
            else metrics.refusals
        self.budget = UploadBudget(edge.large_body_bytes, edge.body_budget_bytes,
                                   edge.parse_budget_bytes, self.reactor,
                                   on_idle=self._give_memory_back,
                                   on_change=self._budget_changed)

    def refused(self, reason: str, status: int | None, client: str) -> None:
        """Count and log a request or connection refused at the edge
        (C{status} None: cut without an answer)."""
        if self.refusals is not None:
            self.refusals.labels(self.listener, reason).inc()
        answer = "-" if status is None else str(status)
        log.info("{log_access_line}",
                 log_access_line=f"refused {reason} {answer} client={client}"
                                 f" listener={self.listener}",
                 refusal=reason, status=status, client=client, listener=self.listener)

    def _give_memory_back(self) -> None:
        call_in_thread = getattr(self.reactor, "callInThread", None)
        if call_in_thread is not None:
            call_in_thread(trim_malloc)

    def _budget_changed(self, admitted: int, processing: int, waiting: int) -> None:
        if self.metrics is not None:
            self.metrics.large_body_bytes.labels("admitted").set(admitted)
            self.metrics.large_body_bytes.labels("processing").set(processing)
            self.metrics.large_bodies_waiting.set(waiting)

    def log(self, request: Any) -> None:
        """Access lines are L{KilolockRequest}'s structured events."""
