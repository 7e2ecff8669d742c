"""C{twistd kilolock}: options and the service tree (also used by kilolock.tac).

Every option has an environment variable; a command-line option wins over
the environment, which wins over the default.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import Any, ClassVar
from urllib.parse import urlsplit

from attrs import frozen
from twisted.application.service import IService, MultiService
from twisted.application.strports import service as endpoint_service
from twisted.internet.endpoints import serverFromString
from twisted.internet.interfaces import IReactorTime
from twisted.python import usage

from kilolock.atrest.settings import (
    AT_REST_OPTIONS,
    DEFAULT_RETENTION_INTERVAL,
    check_key_file,
    key_provider,
    retention_limit,
    retention_service,
)
from kilolock.auth.oidc.checker import oidc_checker
from kilolock.auth.oidc.grace import DEFAULT_GRACE, MAX_GRACE
from kilolock.auth.oidc.settings import check_oidc_settings, oidc_policy_source
from kilolock.auth.portal import (
    AUTH_MODES,
    DatabaseTokenChecker,
    OpenChecker,
    StaticTokenChecker,
    build_portal,
)
from kilolock.auth.tls import check_client_ca, mtls_service
from kilolock.retention.policy import MAX_DAYS, MAX_VERSIONS, RetentionPolicy
from kilolock.server.listening import with_backlog
from kilolock.server.metrics import Metrics
from kilolock.server.services import KilolockService, ListeningEndpoint, StoreService, keeping_port
from kilolock.stateops.runner import OperationRunner, Pause
from kilolock.stateops.sweeper import OperationSweeper
from kilolock.store.interfaces.states import IStateStore
from kilolock.store.interfaces.tenants import ITenantStore
from kilolock.store.memory.store import MemoryStateStore
from kilolock.web.body import DEFAULT_MAX_BODY_BYTES
from kilolock.web.control import MAX_CONTROL_BODY_BYTES
from kilolock.web.control.api import ControlAPI
from kilolock.web.control.tree import ControlSite, build_control_root
from kilolock.web.edge import DEFAULT_LIMITS, EdgeLimits, edge_limits, option_parameters
from kilolock.web.forwarded import parse_networks
from kilolock.web.native.options import NativeOptions
from kilolock.web.site import KilolockSite, build_root
from kilolock.web.ui.sessions import DEFAULT_SESSION_SECONDS
from kilolock.web.ui.throttle import DEFAULT_SIGN_IN_FAILURES, SIGN_IN_WINDOW
from kilolock.web.ui.tree import UiOptions

STORES = ("memory", "postgres")
LOG_FORMATS = ("text", "json")

DEFAULT_REQUEST_TIMEOUT = 300.0
DEFAULT_IDLE_TIMEOUT = 75.0
DEFAULT_SHUTDOWN_GRACE = 30.0
#: The shortest KL_CONTROL_TOKEN accepted.
MIN_CONTROL_TOKEN_LENGTH = 16


@frozen
class Settings:
    """Everything that configures one Kilolock process."""

    listen: str = "tcp:8080"
    store: str = "postgres"
    database_url: str | None = None
    data_dir: str = "./kilolock-data"
    #: Prepare the write cycle's statements in each database session ("on"),
    #: or send their text ("off": for a pooler that does not keep sessions).
    prepared_statements: str = "on"
    auth_mode: str = "open"
    auth_token: str = ""
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    trusted_proxies: tuple[str, ...] = ()
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT
    shutdown_grace: float = DEFAULT_SHUTDOWN_GRACE
    log_format: str = "text"
    # Hosted mode (KL_AUTH_MODE=database): the control API's listener and
    # token, and the state lane's URL as tenants reach it (backend blocks).
    control_listen: str = "tcp:8090"
    control_token: str = ""
    public_url: str | None = None
    #: A PEM file of CAs: the C{ssl:} state lane then requires a client
    #: certificate signed by one of them (mTLS).
    tls_client_ca: str | None = None
    #: The limits at the edge of every listener (L{kilolock.web.edge}).
    edge: EdgeLimits = DEFAULT_LIMITS
    #: The dashboard at /ui/ ("on") or not ("off"), how long its
    #: sessions last, and the failed sign-ins per client address per window.
    ui: str = "on"
    ui_session_seconds: float = DEFAULT_SESSION_SECONDS
    ui_sign_in_failures: int = DEFAULT_SIGN_IN_FAILURES
    # CI identity (OIDC tokens): the static mode's policy file, and the
    # seconds an expired token may still finish the work it locked.
    oidc_config: str | None = None
    oidc_lock_grace: float = DEFAULT_GRACE
    # State at rest: the key file that encrypts versions (none: stored
    # unencrypted), the server's retention policy (None: no limit of that
    # kind) and the seconds between two pruning passes.
    encryption_keys: str | None = None
    retention_versions: int | None = None
    retention_days: int | None = None
    retention_interval: float = DEFAULT_RETENTION_INTERVAL

    @classmethod
    def from_sources(cls, options: Mapping[str, Any],
                     environ: Mapping[str, str] = os.environ) -> Settings:
        """Options first, then C{KL_*} environment variables, then defaults."""

        def pick(option: str, env: str, default: Any) -> Any:
            value = options.get(option)
            if value is None:
                value = environ.get(env) or None
            return default if value is None else value

        database_url = pick("database", "KL_DATABASE_URL", None)
        store = pick("store", "KL_STORE", "postgres")
        settings = cls(
            listen=pick("listen", "KL_LISTEN", "tcp:8080"),
            store=store,
            database_url=database_url,
            data_dir=pick("data-dir", "KL_DATA_DIR", "./kilolock-data"),
            prepared_statements=pick("prepared-statements", "KL_PREPARED_STATEMENTS", "on"),
            auth_mode=pick("auth-mode", "KL_AUTH_MODE", "open"),
            auth_token=environ.get("KL_AUTH_TOKEN", ""),
            max_body_bytes=_number(int, "KL_MAX_BODY_BYTES", pick(
                "max-body-bytes", "KL_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES)),
            trusted_proxies=tuple(options.get("trusted-proxy") or [
                cidr.strip() for cidr in environ.get("KL_TRUSTED_PROXIES", "").split(",")
                if cidr.strip()]),
            request_timeout=_number(float, "KL_REQUEST_TIMEOUT", pick(
                "request-timeout", "KL_REQUEST_TIMEOUT", DEFAULT_REQUEST_TIMEOUT)),
            idle_timeout=_number(float, "KL_IDLE_TIMEOUT", pick(
                "idle-timeout", "KL_IDLE_TIMEOUT", DEFAULT_IDLE_TIMEOUT)),
            shutdown_grace=_number(float, "KL_SHUTDOWN_GRACE", pick(
                "shutdown-grace", "KL_SHUTDOWN_GRACE", DEFAULT_SHUTDOWN_GRACE)),
            log_format=pick("log-format", "KL_LOG_FORMAT", "text"),
            control_listen=pick("control-listen", "KL_CONTROL_LISTEN", "tcp:8090"),
            control_token=environ.get("KL_CONTROL_TOKEN", ""),
            public_url=pick("public-url", "KL_PUBLIC_URL", None),
            tls_client_ca=pick("tls-client-ca", "KL_TLS_CLIENT_CA", None),
            edge=_edge_limits(lambda option, env: pick(option, env, None)),
            ui=pick("ui", "KL_UI", "on"),
            ui_session_seconds=_number(float, "KL_UI_SESSION_SECONDS", pick(
                "ui-session-seconds", "KL_UI_SESSION_SECONDS", DEFAULT_SESSION_SECONDS)),
            ui_sign_in_failures=_number(int, "KL_UI_SIGN_IN_FAILURES", pick(
                "ui-sign-in-failures", "KL_UI_SIGN_IN_FAILURES", DEFAULT_SIGN_IN_FAILURES)),
            oidc_config=pick("oidc-config", "KL_OIDC_CONFIG", None),
            oidc_lock_grace=_number(float, "KL_OIDC_LOCK_GRACE", pick(
                "oidc-lock-grace", "KL_OIDC_LOCK_GRACE", DEFAULT_GRACE)),
            encryption_keys=pick("encryption-keys", "KL_ENCRYPTION_KEYS", None),
            retention_versions=retention_limit("KL_RETENTION_VERSIONS", pick(
                "retention-versions", "KL_RETENTION_VERSIONS", None), MAX_VERSIONS),
            retention_days=retention_limit("KL_RETENTION_DAYS", pick(
                "retention-days", "KL_RETENTION_DAYS", None), MAX_DAYS),
            retention_interval=_number(float, "KL_RETENTION_INTERVAL", pick(
                "retention-interval", "KL_RETENTION_INTERVAL", DEFAULT_RETENTION_INTERVAL)),
        )
        settings.check()
        return settings

    def check(self) -> None:
        if self.store not in STORES:
            raise usage.UsageError(f"--store must be one of {', '.join(STORES)}")
        if self.auth_mode not in AUTH_MODES:
            raise usage.UsageError(f"KL_AUTH_MODE must be one of {', '.join(AUTH_MODES)}")
        if self.auth_mode == "static" and not (self.auth_token or self.oidc_config):
            raise usage.UsageError("KL_AUTH_MODE=static needs KL_AUTH_TOKEN, --oidc-config,"
                                   " or both")
        check_oidc_settings(self.auth_mode, self.oidc_config, self.oidc_lock_grace)
        if self.auth_mode == "database":
            self._check_hosted()
        if self.max_body_bytes <= 0:
            raise usage.UsageError("KL_MAX_BODY_BYTES must be a positive number of bytes")
        for name, value in (("KL_REQUEST_TIMEOUT", self.request_timeout),
                            ("KL_IDLE_TIMEOUT", self.idle_timeout)):
            if value <= 0:
                raise usage.UsageError(f"{name} must be a positive number of seconds")
        if self.shutdown_grace < 0:
            raise usage.UsageError("KL_SHUTDOWN_GRACE must not be negative")
        try:
            self.edge.check()
        except ValueError as error:
            raise usage.UsageError(str(error)) from None
        if self.prepared_statements not in ("on", "off"):
            raise usage.UsageError("--prepared-statements must be on or off")
        if self.ui not in ("on", "off"):
            raise usage.UsageError("--ui must be on or off")
        if self.ui_session_seconds <= 0:
            raise usage.UsageError("KL_UI_SESSION_SECONDS must be a positive number of seconds")
        if not 1 <= self.ui_sign_in_failures <= 1_000_000:
            raise usage.UsageError("KL_UI_SIGN_IN_FAILURES must be a number from 1 to 1000000")
        if self.retention_interval <= 0:
            raise usage.UsageError("KL_RETENTION_INTERVAL must be a positive number of seconds")
        check_key_file(self.encryption_keys)
        if self.log_format not in LOG_FORMATS:
            raise usage.UsageError(f"--log-format must be one of {', '.join(LOG_FORMATS)}")
        try:
            parse_networks(self.trusted_proxies)
        except ValueError as error:
            raise usage.UsageError(f"--trusted-proxy: {error}") from None
        try:
            # Parse only (no reactor is touched): a bad endpoint string is a
            # usage error, not a traceback out of makeService.
            serverFromString(None, self.listen)
        except (ValueError, TypeError, KeyError, OSError) as error:
            raise usage.UsageError(
                f"--listen {self.listen!r} is not a usable Twisted endpoint string: {error}"
            ) from None
        if self.tls_client_ca is not None:
            try:
                check_client_ca(self.listen, self.tls_client_ca)
            except (ValueError, OSError) as error:
                raise usage.UsageError(f"--tls-client-ca: {error}") from None

    def _check_hosted(self) -> None:
        """The settings of the database auth mode."""
        if len(self.control_token) < MIN_CONTROL_TOKEN_LENGTH:
            raise usage.UsageError(
                "KL_AUTH_MODE=database needs KL_CONTROL_TOKEN, the control API's token"
                f" (at least {MIN_CONTROL_TOKEN_LENGTH} characters)")
        if self.control_listen == self.listen and not re.match(
                r"^(?:tcp6?|ssl):(?:port=)?0(?::|$)", self.listen):  # port 0: any free port
            raise usage.UsageError("--control-listen must differ from --listen")
        try:
            serverFromString(None, self.control_listen)
        except (ValueError, TypeError, KeyError, OSError) as error:
            raise usage.UsageError(f"--control-listen {self.control_listen!r} is not a usable"
                                   f" Twisted endpoint string: {error}") from None
        if self.public_url is not None:
            parts = urlsplit(self.public_url)
            if parts.scheme not in ("http", "https") or not parts.netloc or parts.query \
                    or parts.fragment:
                raise usage.UsageError("--public-url must be an http:// or https:// URL such"
                                       " as https://kilolock.example.com")


class Options(usage.Options):
    synopsis = "[options]"
    longdesc = ("Kilolock: a Terraform/OpenTofu remote state server (http backend). "
                "Every option also reads a KL_* environment variable.")
    optParameters: ClassVar[list[list[Any]]] = [
        ["listen", "l", None, "Twisted endpoint to serve on [KL_LISTEN, default tcp:8080]"],
        ["store", "s", None, "state store: memory or postgres [KL_STORE, default postgres]"],
        ["database", "d", None,
         "PostgreSQL URL; without one an embedded PostgreSQL is started [KL_DATABASE_URL]"],
        ["data-dir", None, None,
         "data directory of the embedded PostgreSQL [KL_DATA_DIR, default ./kilolock-data]"],
        ["prepared-statements", None, None,
         "on or off: prepare the write cycle's statements in each database session"
         " (off for a pooler in transaction mode) [KL_PREPARED_STATEMENTS, default on]"],
        ["auth-mode", None, None, "open, static or database [KL_AUTH_MODE, default open]"],
        ["max-body-bytes", None, None,
         "largest request body accepted [KL_MAX_BODY_BYTES, default 268435456]"],
        ["request-timeout", None, None,
         "seconds a client has to send a whole request, head and body"
         f" [KL_REQUEST_TIMEOUT, default {DEFAULT_REQUEST_TIMEOUT:g}]"],
        ["idle-timeout", None, None,
         "seconds an idle keep-alive connection is kept"
         f" [KL_IDLE_TIMEOUT, default {DEFAULT_IDLE_TIMEOUT:g}]"],
        ["shutdown-grace", None, None,
         "seconds in-flight requests get to finish on SIGTERM"
         f" [KL_SHUTDOWN_GRACE, default {DEFAULT_SHUTDOWN_GRACE:g}]"],
        ["log-format", None, None, "text or json [KL_LOG_FORMAT, default text]"],
        ["control-listen", None, None,
         "Twisted endpoint of the control API (database auth mode only)"
         " [KL_CONTROL_LISTEN, default tcp:8090]"],
        ["public-url", None, None,
         "the state lane's URL as clients reach it, for the backend blocks the control API"
         " hands out and the TFE lane's download and upload URLs [KL_PUBLIC_URL, default"
         " the control API's host with the listen port; on the TFE lane the request's"
         " own scheme and Host]"],
        ["tls-client-ca", None, None,
         "PEM file of CAs: the ssl: --listen endpoint then requires a client certificate"
         " signed by one of them [KL_TLS_CLIENT_CA]"],
        *option_parameters(),
        ["ui", None, None, "on or off: the dashboard at /ui/ [KL_UI, default on]"],
        ["ui-session-seconds", None, None, "seconds a dashboard session lasts from sign-in"
         f" [KL_UI_SESSION_SECONDS, default {DEFAULT_SESSION_SECONDS}]"],
        ["ui-sign-in-failures", None, None, "failed dashboard sign-ins one client address may"
         f" make in {SIGN_IN_WINDOW:g} s before it must wait (429)"
         f" [KL_UI_SIGN_IN_FAILURES, default {DEFAULT_SIGN_IN_FAILURES}]"],
        ["oidc-config", None, None,
         "TOML (or .json) file of trusted OIDC issuers and rules for CI tokens (static auth"
         " mode; see docs/ci-identity.md) [KL_OIDC_CONFIG]"],
        ["oidc-lock-grace", None, None,
         "seconds after its expiry a CI token may still write, read back and unlock the"
         " state of the lock it took,"
         f" 0 to {MAX_GRACE:.0f} [KL_OIDC_LOCK_GRACE, default {DEFAULT_GRACE:.0f}]"],
        *AT_REST_OPTIONS,
    ]

    def __init__(self) -> None:
        super().__init__()
        self["trusted-proxy"] = []

    def opt_trusted_proxy(self, cidr: str) -> None:
        """Honour X-Forwarded-For/-Proto from this network (CIDR; repeatable)
        [KL_TRUSTED_PROXIES, comma-separated]"""
        self["trusted-proxy"].append(cidr)

    def postOptions(self) -> None:
        # Check every setting now, so twistd reports a bad value as a usage
        # error (exit 1, the message, no traceback) before it builds anything.
        settings = Settings.from_sources(self)
        if settings.log_format == "json" and self.parent is not None:
            # twistd builds its log observer from its --logger option after
            # the plugin's options are parsed: hand it the JSON observer.
            self.parent["logger"] = "kilolock.server.logs.json_log_observer"


def _edge_limits(pick: Callable[[str, str], Any]) -> EdgeLimits:
    try:
        return edge_limits(pick)
    except ValueError as error:
        raise usage.UsageError(str(error)) from None


def _number(kind: type[Any], name: str, value: Any) -> Any:
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise usage.UsageError(f"{name} must be a number, not {value!r}") from None


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
    if settings.auth_mode == "database":
        hosted = HostedListeners(listener, settings, store, reactor, listening,
                                 refusals=metrics.refusals)
        sites.append(hosted.control_site)
        web = hosted
    background = MultiService()
    pruning = retention_service(store, settings.retention_versions, settings.retention_days,
                                settings.retention_interval, reactor, metrics)
    sweeper = None if native.runner is None else OperationSweeper(native.runner, reactor)
    for part in (pruning, sweeper):
        if part is not None:
            part.setServiceParent(background)
    return KilolockService(StoreService(store, background), web, site,
                           settings.shutdown_grace, reactor, sites=sites, listening=listening)


def makeService(options: Mapping[str, Any], reactor: Any = None) -> KilolockService:
    """Entry point of the twistd plugin."""
    return make_service_from_settings(Settings.from_sources(options), reactor)
