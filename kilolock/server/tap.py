"""C{twistd kilolock}: its options and the service tree (also used by
kilolock.tac).  The options are those of L{kilolock.server.settings}'s
table; a command-line option wins over the environment, which wins over
the default.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from twisted.application.service import IService, MultiService
from twisted.application.strports import service as endpoint_service
from twisted.internet.interfaces import IReactorTime

from kilolock.atrest.settings import key_provider, retention_service
from kilolock.auth.oidc.checker import oidc_checker
from kilolock.auth.oidc.settings import oidc_policy_source
from kilolock.auth.portal import (
    DatabaseTokenChecker,
    OpenChecker,
    StaticTokenChecker,
    build_portal,
)
from kilolock.auth.tls import mtls_service
from kilolock.retention.policy import RetentionPolicy
from kilolock.server.listening import with_backlog
from kilolock.server.metrics import Metrics
from kilolock.server.options import TableOptions
from kilolock.server.services import (
    Announcement,
    KilolockService,
    ListeningEndpoint,
    StoreService,
    keeping_port,
)
from kilolock.server.settings import OPTIONS, Settings
from kilolock.stateops.runner import OperationRunner, Pause
from kilolock.stateops.sweeper import OperationSweeper
from kilolock.store.interfaces.states import IStateStore
from kilolock.store.interfaces.tenants import ITenantStore
from kilolock.store.memory.store import MemoryStateStore
from kilolock.web.control import MAX_CONTROL_BODY_BYTES
from kilolock.web.control.api import ControlAPI
from kilolock.web.control.tree import ControlSite, build_control_root
from kilolock.web.forwarded import parse_networks
from kilolock.web.native.options import NativeOptions
from kilolock.web.site import KilolockSite, build_root
from kilolock.web.ui.tree import UiOptions


class Options(TableOptions):
    """C{twistd kilolock}'s options: one for each option of the table that
    has a command-line form (L{OPTIONS})."""

    synopsis = "[options]"
    longdesc = ("Kilolock: a Terraform/OpenTofu remote state server (http backend). "
                "Every option also reads a KL_* environment variable.")
    table = OPTIONS

    def postOptions(self) -> None:
        # Check every setting now, so twistd reports a bad value as a usage
        # error (exit 1, the message, no traceback) before it builds anything.
        settings = Settings.from_sources(self)
        if settings.log_format == "json" and self.parent is not None:
            # twistd builds its log observer from its --logger option after
            # the plugin's options are parsed: hand it the JSON observer.
            self.parent["logger"] = "kilolock.server.logs.json_log_observer"


def build_store(settings: Settings, reactor: Any) -> IStateStore:
    """The store of C{settings}; the PostgreSQL store encrypts versions with
    the key file's keys when there is one (the memory store does not)."""
    provider = key_provider(settings.store, settings.encryption_keys)
    if settings.store == "memory":
        return MemoryStateStore()
    from kilolock.store.postgres.store import postgres_store_from_settings

    return postgres_store_from_settings(settings, reactor, key_provider=provider)


def build_portal_for(settings: Settings, store: IStateStore, reactor: Any = None,
                     token_clock: IReactorTime | None = None) -> Any:
    """The portal of the auth mode's checker, with the checker of CI tokens
    in the database mode and in a static mode with C{--oidc-config}
    (verifying them at C{token_clock}'s time: the reactor's by default)."""
    oidc = oidc_policy_source(settings.auth_mode, settings.oidc_config, store)
    extra = [] if oidc is None else [oidc_checker(
        oidc, reactor, settings.oidc_lock_grace, clock=token_clock)]
    if settings.auth_mode == "static":
        return build_portal(StaticTokenChecker(settings.auth_token or None), *extra)
    if settings.auth_mode == "database":
        return build_portal(DatabaseTokenChecker(ITenantStore(store)), *extra)
    return build_portal(OpenChecker())


class HostedListeners(MultiService):
    """Hosted mode's two listeners, started and stopped together: the state
    lane (C{state}) and the control API (C{control}, a L{ControlSite} on
    C{--control-listen})."""

    def __init__(self, state: IService, settings: Settings, store: IStateStore,
                 reactor: Any, state_listening: ListeningEndpoint | None = None,
                 refusals: Any = None) -> None:
        super().__init__()
        self.settings = settings
        self.state = state
        self.state_listening = state_listening
        api = ControlAPI(store, settings.control_token, reactor, self.public_url,
                         RetentionPolicy(settings.retention_versions, settings.retention_days))
        self.control_site = ControlSite(
            build_control_root(api), max_body_bytes=MAX_CONTROL_BODY_BYTES,
            request_timeout=settings.request_timeout,
            trusted_proxies=parse_networks(settings.trusted_proxies),
            edge=settings.edge, listener="control", refusals=refusals,
            timeout=settings.idle_timeout, reactor=reactor)
        control = endpoint_service(
            with_backlog(settings.control_listen, settings.edge.listen_backlog),
            self.control_site, reactor=reactor)
        #: The control API's listening port, once listening.
        self.control_listening = keeping_port(control)
        self.control: IService = control
        state.setServiceParent(self)
        self.control.setServiceParent(self)

    def public_url(self, request: Any) -> str:
        """The state lane's base URL for backend blocks: C{--public-url}, or
        the host the operator reached the control API by, with the port the
        state lane listens on."""
        if self.settings.public_url:
            return self.settings.public_url.rstrip("/")
        scheme = "https" if self.settings.listen.startswith("ssl:") else "http"
        host = request.getRequestHostname().decode("ascii", "replace")
        if ":" in host:
            host = f"[{host}]"
        return f"{scheme}://{host}:{self.state_port()}"

    def state_port(self) -> int | None:
        """The state lane's TCP port (the real one when it listens on port 0)."""
        listening = self.state_listening
        if listening is not None and listening.port is not None:
            port = getattr(listening.port.getHost(), "port", None)
            if isinstance(port, int):
                return port
        found = re.match(r"^(?:tcp6?|ssl):(?:port=)?(\d+)", self.settings.listen)
        return int(found.group(1)) if found else None


def native_options(settings: Settings, store: IStateStore, reactor: Any,
                   pause: Pause | None = None) -> NativeOptions:
    """The native API's write side: operations run by this process (each
    step after C{pause}, when given), upload sessions up to the body limit."""
    return NativeOptions(runner=OperationRunner(store, reactor, pause=pause),
                         max_state_bytes=settings.max_body_bytes)


def make_service_from_settings(settings: Settings, reactor: Any = None,
                               store: IStateStore | None = None, *,
                               token_clock: IReactorTime | None = None,
                               operation_pause: Pause | None = None) -> KilolockService:
    """The whole server: the store service, then the HTTP listener.

    @param token_clock: the time CI tokens are verified at, and the OIDC key
        cache runs on (the reactor when None).
    @param operation_pause: awaited before each step of a state operation
        (none when None)."""
    if reactor is None:
        from twisted.internet import reactor as default_reactor

        reactor = default_reactor
    if store is None:
        store = build_store(settings, reactor)
    portal = build_portal_for(settings, store, reactor, token_clock)
    metrics = Metrics.create()
    native = native_options(settings, store, reactor, operation_pause)
    site = KilolockSite(
        build_root(store, portal, reactor, metrics=metrics, auth_mode=settings.auth_mode,
                   ui=None if settings.ui == "off" else UiOptions(
                       static_token=settings.auth_token,
                       session_seconds=settings.ui_session_seconds,
                       sign_in_failures=settings.ui_sign_in_failures),
                   public_url=settings.public_url,
                   retention=RetentionPolicy(settings.retention_versions,
                                             settings.retention_days),
                   native=native),
        max_body_bytes=settings.max_body_bytes,
        request_timeout=settings.request_timeout,
        trusted_proxies=parse_networks(settings.trusted_proxies),
        metrics=metrics,
        edge=settings.edge,
        timeout=settings.idle_timeout,
        reactor=reactor,
    )
    listen = with_backlog(settings.listen, settings.edge.listen_backlog)
    listener = (endpoint_service(listen, site, reactor=reactor)
                if settings.tls_client_ca is None
                else mtls_service(reactor, listen, settings.tls_client_ca, site))
    listening = keeping_port(listener)
    web: IService = listener
    sites = [site]
    control: ListeningEndpoint | None = None
    if settings.auth_mode == "database":
        hosted = HostedListeners(listener, settings, store, reactor, listening,
                                 refusals=metrics.refusals)
        sites.append(hosted.control_site)
        web = hosted
        control = hosted.control_listening
    background = MultiService()
    pruning = retention_service(store, settings.retention_versions, settings.retention_days,
                                settings.retention_interval, reactor, metrics)
    sweeper = None if native.runner is None else OperationSweeper(native.runner, reactor)
    for part in (pruning, sweeper):
        if part is not None:
            part.setServiceParent(background)
    about = Announcement(ui=settings.ui != "off", auth_mode=settings.auth_mode,
                         control=control)
    return KilolockService(StoreService(store, background), web, site,
                           settings.shutdown_grace, reactor, sites=sites, listening=listening,
                           about=about)


def makeService(options: Mapping[str, Any], reactor: Any = None) -> KilolockService:
    """Entry point of the twistd plugin."""
    service = make_service_from_settings(Settings.from_sources(options), reactor)
    parent = getattr(options, "parent", None)  # twistd's own options, or twist's
    service.daemonized = parent is not None and "nodaemon" in parent and not parent["nodaemon"]
    return service
