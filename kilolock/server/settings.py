"""Every setting of one Kilolock process, each declared once: L{Settings}.

Each field of L{Settings} is an option of the table (L{OPTIONS}): its
long option, environment variable, type, default, rules and help, in the
order of the table in C{docs/running.md}.  C{twistd kilolock}'s options
(L{kilolock.server.tap.Options}), the settings read from them and the
environment (L{Settings.from_sources}) and that table are built from it.
Rules that involve several options are L{Settings.check}'s.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from attrs import fields, frozen
from twisted.internet.endpoints import serverFromString
from twisted.python import usage

from kilolock.atrest.errors import KeyFileError
from kilolock.atrest.keyfile import load_key_file
from kilolock.atrest.settings import DEFAULT_RETENTION_INTERVAL, retention_limit
from kilolock.auth.oidc.grace import DEFAULT_GRACE, MAX_GRACE, checked_grace
from kilolock.auth.oidc.settings import check_oidc_settings
from kilolock.auth.portal import AUTH_MODES
from kilolock.auth.tls import check_client_ca
from kilolock.retention.policy import MAX_DAYS, MAX_VERSIONS
from kilolock.server.options import (
    Bounds,
    OneOf,
    Option,
    Valid,
    markdown_table,
    option,
    options_of,
)
from kilolock.web import edge
from kilolock.web.body import DEFAULT_MAX_BODY_BYTES
from kilolock.web.edge import EdgeLimits
from kilolock.web.forwarded import parse_networks
from kilolock.web.ui.sessions import DEFAULT_SESSION_SECONDS
from kilolock.web.ui.throttle import DEFAULT_SIGN_IN_FAILURES, SIGN_IN_WINDOW

__all__ = ["OPTIONS", "Settings", "options_table"]

STORES = ("memory", "postgres")
LOG_FORMATS = ("text", "json")
ON_OFF = OneOf(("on", "off"), "{option} must be on or off")

DEFAULT_REQUEST_TIMEOUT = 300.0
DEFAULT_IDLE_TIMEOUT = 75.0
DEFAULT_SHUTDOWN_GRACE = 30.0
#: The shortest KL_CONTROL_TOKEN accepted.
MIN_CONTROL_TOKEN_LENGTH = 16

_ENDPOINT_ERRORS = (ValueError, TypeError, KeyError, OSError)
POSITIVE_SECONDS = Bounds("{env} must be a positive number of seconds", above=0)
#: The edge limits that must be positive, and those that 0 turns off.
POSITIVE = Bounds("{env} must be positive", above=0)
ZERO_OR_MORE = Bounds("{env} must be 0 or more", least=0)


def _endpoint(description: str) -> None:
    # Parse only (no reactor is touched): a bad endpoint string is a usage
    # error, not a traceback out of makeService.
    serverFromString(None, description)


def _retention_limit(maximum: int) -> str:
    """What a bad retention limit is told (whether it is not a number or out of range)."""
    return f"{{env}} must be a whole number from 1 to {maximum}, or off"


#: The most failed sign-ins per window a setting may allow.
MAX_SIGN_IN_FAILURES = 1_000_000


@frozen(kw_only=True)
class Settings:
    """Everything that configures one Kilolock process."""

    listen: str = option(
        "listen", "l", env="KL_LISTEN", default="tcp:8080",
        rules=[Valid(_endpoint, "{option} {value!r} is not a usable Twisted endpoint string:"
                                " {error}", _ENDPOINT_ERRORS)],
        help="Twisted endpoint to serve on",
        doc="the Twisted endpoint to serve on (see below)")
    store: str = option(
        "store", "s", env="KL_STORE", default="postgres", rules=[OneOf(STORES)],
        help="state store: memory or postgres", doc="`memory` or `postgres`")
    database_url: str | None = option(
        "database", "d", env="KL_DATABASE_URL", default=None,
        help="PostgreSQL URL; without one an embedded PostgreSQL is started",
        doc="URL of an external PostgreSQL server; without one, an embedded PostgreSQL is"
            " started")
    data_dir: str = option(
        "data-dir", env="KL_DATA_DIR", default="./kilolock-data",
        help="data directory of the embedded PostgreSQL",
        doc="data directory of the embedded PostgreSQL")
    #: Prepare the write cycle's statements in each database session ("on"),
    #: or send their text ("off": for a pooler that does not keep sessions).
    prepared_statements: str = option(
        "prepared-statements", env="KL_PREPARED_STATEMENTS", default="on", rules=[ON_OFF],
        help="on or off: prepare the write cycle's statements in each database session"
             " (off for a pooler in transaction mode)",
        doc="`on`: each database session prepares the write cycle's statements once (about a"
            " third less PostgreSQL CPU per write cycle); `off`: send their text every time,"
            " for a connection pooler that does not keep sessions (PgBouncer in transaction"
            " mode); see [postgres.md](postgres.md#prepared-statements)")
    auth_mode: str = option(
        "auth-mode", env="KL_AUTH_MODE", default="open",
        rules=[OneOf(AUTH_MODES, "{env} must be one of {choices}")],
        help="open, static or database",
        doc="`open`, `static` or `database` (hosted: tenants and their tokens); see"
            " [auth.md](auth.md) and [hosting.md](hosting.md)")
    auth_token: str = option(
        env="KL_AUTH_TOKEN", default="",
        help="the token of the static auth mode",
        doc="the token of the `static` auth mode; environment only, never an option")
    # Hosted mode (KL_AUTH_MODE=database): the control API's listener and
    # token, and the state lane's URL as tenants reach it (backend blocks).
    control_listen: str = option(
        "control-listen", env="KL_CONTROL_LISTEN", default="tcp:8090",
        help="Twisted endpoint of the control API (database auth mode only)",
        doc="`database` mode only: the Twisted endpoint of the control API (tenants,"
            " workspaces, environments, tokens, audit trail); must differ from `--listen`;"
            " keep it off the internet (e.g. `tcp:8090:interface=127.0.0.1`)")
    control_token: str = option(
        env="KL_CONTROL_TOKEN", default="",
        help="the control API's Bearer token, database auth mode only",
        doc=f"`database` mode only: the control API's Bearer token, at least"
            f" {MIN_CONTROL_TOKEN_LENGTH} characters; environment only, never an option")
    public_url: str | None = option(
        "public-url", env="KL_PUBLIC_URL", default=None,
        shown="the host the control API was reached by, with the `--listen` port; on the TFE"
              " lane the request's own scheme and `Host`",
        help="the state lane's URL as clients reach it, for the backend blocks the control API"
             " hands out and the TFE lane's download and upload URLs",
        doc="the state lane's URL as clients reach it (e.g. `https://kilolock.example.com`):"
            " the base of the backend blocks the control API hands out (`database` mode) and"
            " of the download and upload URLs of the TFE lane"
            " ([tfe-lane.md](tfe-lane.md#behind-nginx))")
    max_body_bytes: int = option(
        "max-body-bytes", env="KL_MAX_BODY_BYTES", default=DEFAULT_MAX_BODY_BYTES, parse=int,
        rules=[Bounds("{env} must be a positive number of bytes", above=0)], note="256 MiB",
        help="largest request body accepted",
        doc="the largest request body accepted, in bytes (a plain positive integer: no `MiB`"
            " suffix); larger bodies are answered 413, see [http-lane.md](http-lane.md#limits);"
            " also the largest state an upload session may declare"
            " ([native-api.md](native-api.md#upload-sessions))")
    request_timeout: float = option(
        "request-timeout", env="KL_REQUEST_TIMEOUT", default=DEFAULT_REQUEST_TIMEOUT,
        parse=float, rules=[POSITIVE_SECONDS],
        help="seconds a client has to send a whole request, head and body",
        doc="seconds a client has to send one whole request, head and body, counted from its"
            " first byte; a slower client is disconnected")
    idle_timeout: float = option(
        "idle-timeout", env="KL_IDLE_TIMEOUT", default=DEFAULT_IDLE_TIMEOUT, parse=float,
        rules=[POSITIVE_SECONDS], help="seconds an idle keep-alive connection is kept",
        doc="seconds an idle keep-alive connection is kept open")
    # The limits at the edge of every listener (L{kilolock.web.edge}): each
    # attribute is the L{EdgeLimits} field of the same name.
    header_timeout: float = option(
        "header-timeout", env="KL_HEADER_TIMEOUT", default=edge.DEFAULT_HEADER_TIMEOUT,
        parse=float, rules=[POSITIVE],
        help="seconds from a request's first byte to the end of its head; slower: 408",
        doc="seconds a request's head (request line and headers) may take from its first"
            " byte; slower: `408 header_timeout`; see"
            " [operations.md](operations.md#timeouts-and-slow-clients)")
    body_min_rate: int = option(
        "body-min-rate", env="KL_BODY_MIN_RATE", default=edge.DEFAULT_BODY_MIN_RATE, parse=int,
        rules=[ZERO_OR_MORE],
        help="bytes per second a request body must average after its grace period;"
             " slower: 408 (0: off)",
        doc="bytes per second a request body must average once its grace period is over;"
            " slower: `408 body_too_slow`; `0` turns the rule off")
    body_rate_grace: float = option(
        "body-rate-grace", env="KL_BODY_RATE_GRACE", default=edge.DEFAULT_BODY_RATE_GRACE,
        parse=float, rules=[ZERO_OR_MORE],
        help="seconds a request body may take before its rate counts",
        doc="seconds a request body may take before its rate counts")
    max_request_line: int = option(
        "max-request-line", env="KL_MAX_REQUEST_LINE", default=edge.DEFAULT_MAX_REQUEST_LINE,
        parse=int, rules=[POSITIVE], help="longest request line in bytes; longer: 414",
        doc="the longest request line (method, path and query, version) in bytes; longer:"
            " `414 request_line_too_long`; see [http-lane.md](http-lane.md#limits)")
    max_head_bytes: int = option(
        "max-head-bytes", env="KL_MAX_HEAD_BYTES", default=edge.DEFAULT_MAX_HEAD_BYTES,
        parse=int, rules=[POSITIVE],
        help="largest request head (request line and headers) in bytes; larger: 431",
        doc="the largest request head (request line and every header line, line ends not"
            " counted) in bytes; larger: `431 headers_too_large`")
    max_headers: int = option(
        "max-headers", env="KL_MAX_HEADERS", default=edge.DEFAULT_MAX_HEADERS, parse=int,
        rules=[POSITIVE], help="most header fields in a request; more: 431",
        doc="the most header fields in one request; more: `431 too_many_headers`")
    max_connections_per_client: int = option(
        "max-connections-per-client", env="KL_MAX_CONNECTIONS_PER_CLIENT",
        default=edge.DEFAULT_MAX_CONNECTIONS_PER_CLIENT, parse=int, rules=[ZERO_OR_MORE],
        help="open connections per client address (trusted proxies exempt); more: 429"
             " (0: off)",
        doc="open connections from one TCP peer address, per listener; more: `429"
            " too_many_connections` with `Retry-After: 1`; `--trusted-proxy` addresses are"
            " exempt; `0` turns the cap off")
    listen_backlog: int = option(
        "listen-backlog", env="KL_LISTEN_BACKLOG", default=edge.DEFAULT_LISTEN_BACKLOG,
        parse=int, rules=[POSITIVE],
        help="connections the kernel queues before they are accepted (unless the endpoint"
             " string sets backlog=)",
        doc="connections the kernel queues before Kilolock accepts them, on every listener"
            " (a `backlog=` in an endpoint string wins for that listener; Linux caps it at"
            " `net.core.somaxconn`)")
    large_body_bytes: int = option(
        "large-body-bytes", env="KL_LARGE_BODY_BYTES", default=edge.DEFAULT_LARGE_BODY_BYTES,
        parse=int, rules=[POSITIVE], note="1 MiB",
        help="request bodies at least this large count against the two budgets",
        doc="request bodies at least this large count against the two budgets below; see"
            " [operations.md](operations.md#large-uploads-and-memory)")
    body_budget_bytes: int = option(
        "body-budget-bytes", env="KL_BODY_BUDGET_BYTES",
        default=edge.DEFAULT_BODY_BUDGET_BYTES, parse=int, rules=[ZERO_OR_MORE], note="1 GiB",
        help="bytes of large request bodies admitted at once; past it: 503 with Retry-After"
             " (0: off)",
        doc="bytes of large bodies admitted at once (arriving, waiting or being processed;"
            " they wait in temporary files); past it a large request gets `503"
            " uploads_over_budget` with `Retry-After` before its body is read; `0`: no budget")
    parse_budget_bytes: int = option(
        "parse-budget-bytes", env="KL_PARSE_BUDGET_BYTES",
        default=edge.DEFAULT_PARSE_BUDGET_BYTES, parse=int, rules=[ZERO_OR_MORE],
        note="128 MiB",
        help="bytes of large request bodies held in memory and processed at once; the others"
             " wait their turn (0: off)",
        doc="bytes of large bodies held in memory and processed (parsed, stored) at once; the"
            " others wait their turn; `0`: no budget")
    shutdown_grace: float = option(
        "shutdown-grace", env="KL_SHUTDOWN_GRACE", default=DEFAULT_SHUTDOWN_GRACE,
        parse=float, rules=[Bounds("{env} must not be negative", least=0)],
        help="seconds in-flight requests get to finish on SIGTERM",
        doc="seconds in-flight requests get to finish after `SIGTERM`")
    trusted_proxies: tuple[str, ...] = option(
        "trusted-proxy", env="KL_TRUSTED_PROXIES", default=(), repeatable=True,
        metavar="CIDR", rules=[Valid(parse_networks)],
        help="Honour X-Forwarded-For/-Proto from this network (CIDR; repeatable)",
        doc="reverse proxies whose `X-Forwarded-For` / `X-Forwarded-Proto` are believed; see"
            " [operations.md](operations.md#behind-a-reverse-proxy)")
    #: A PEM file of CAs: the C{ssl:} state lane then requires a client
    #: certificate signed by one of them (mTLS).
    tls_client_ca: str | None = option(
        "tls-client-ca", env="KL_TLS_CLIENT_CA", default=None,
        help="PEM file of CAs: the ssl: --listen endpoint then requires a client certificate"
             " signed by one of them",
        doc="a PEM file of CA certificates: the `ssl:` `--listen` endpoint then requires a"
            " client certificate signed by one of them (mTLS), and the audit trail names its"
            " common name; only with an `ssl:` endpoint (whose keys are then limited to"
            " `port`, `privateKey`, `certKey`, `interface`, `backlog`, `extraCertChain`); see"
            " [deploying.md](deploying.md#tls-at-nginx-or-in-kilolock) and [auth.md](auth.md)")
    #: The dashboard at /ui/ ("on") or not ("off"), how long its
    #: sessions last, and the failed sign-ins per client address per window.
    ui: str = option(
        "ui", env="KL_UI", default="on", rules=[ON_OFF],
        help="on or off: the dashboard at /ui/",
        doc="`on` or `off`: the web dashboard at `/ui/` on the `--listen` listener; see"
            " [dashboard.md](dashboard.md)")
    ui_session_seconds: float = option(
        "ui-session-seconds", env="KL_UI_SESSION_SECONDS", default=DEFAULT_SESSION_SECONDS,
        parse=float, rules=[POSITIVE_SECONDS], note="8 hours",
        help="seconds a dashboard session lasts from sign-in",
        doc="how long a dashboard session lasts from sign-in, in seconds")
    ui_sign_in_failures: int = option(
        "ui-sign-in-failures", env="KL_UI_SIGN_IN_FAILURES", default=DEFAULT_SIGN_IN_FAILURES,
        parse=int, rules=[Bounds("{env} must be a number from {least} to {most}", least=1,
                                 most=MAX_SIGN_IN_FAILURES)],
        help=f"failed dashboard sign-ins one client address may make in {SIGN_IN_WINDOW:g} s"
             " before it must wait (429)",
        doc=f"failed dashboard sign-ins (tokens not accepted) one client address may make in"
            f" {SIGN_IN_WINDOW:g} seconds; beyond, its sign-ins are answered `429` with"
            f" `Retry-After` until the oldest failure is {SIGN_IN_WINDOW:g} seconds old; 1 to"
            f" {MAX_SIGN_IN_FAILURES}; see [dashboard.md](dashboard.md#the-sign-in-throttle)")
    # CI identity (OIDC tokens): the static mode's policy file, and the
    # seconds an expired token may still finish the work it locked.
    oidc_config: str | None = option(
        "oidc-config", env="KL_OIDC_CONFIG", default=None,
        help="TOML (or .json) file of trusted OIDC issuers and rules for CI tokens (static auth"
             " mode; see docs/ci-identity.md)",
        doc="`static` mode only: a TOML (or `.json`) file of trusted OIDC issuers and rules:"
            " CI jobs of GitHub Actions, GitLab CI and other issuers then authenticate with"
            " their own short-lived tokens; read and checked at start; see"
            " [ci-identity.md](ci-identity.md) (in the `database` mode each tenant's policy is"
            " set through the control API)")
    oidc_lock_grace: float = option(
        "oidc-lock-grace", env="KL_OIDC_LOCK_GRACE", default=DEFAULT_GRACE, parse=float,
        rules=[Valid(checked_grace, "{env}: {error}")],
        help=f"seconds after its expiry a CI token may still write, read back and unlock the"
             f" state of the lock it took, 0 to {MAX_GRACE:.0f}",
        doc=f"seconds after its expiry a CI token may still write under, read back, and"
            f" release, the lock it took (and nothing else), 0 to {MAX_GRACE:.0f}; `0` turns"
            f" the grace off;"
            f" see [ci-identity.md](ci-identity.md#long-applies-the-lock-grace)")
    # State at rest: the key file that encrypts versions (none: stored
    # unencrypted), the server's retention policy (None: no limit of that
    # kind) and the seconds between two pruning passes.
    encryption_keys: str | None = option(
        "encryption-keys", env="KL_ENCRYPTION_KEYS", default=None,
        rules=[Valid(load_key_file, errors=(KeyFileError,))],
        shown="none: versions are stored unencrypted",
        help="TOML key file of key-encryption keys (one active): stored versions are"
             " encrypted (PostgreSQL store; see docs/at-rest.md)",
        doc="a TOML key file of key-encryption keys, one of them active: the PostgreSQL store"
            " encrypts every new version (AES-256-GCM, a data key per version); read and"
            " checked at start (a bad file is a usage error; keys that cannot open the"
            " database's versions keep the store from serving: 503 and a log line naming the"
            " key); the memory store ignores it; see [at-rest.md](at-rest.md#encryption-at-rest)")
    retention_versions: int | None = option(
        "retention-versions", env="KL_RETENTION_VERSIONS", default=None,
        parse=retention_limit, unparsable=_retention_limit(MAX_VERSIONS),
        rules=[Bounds(_retention_limit(MAX_VERSIONS), least=1, most=MAX_VERSIONS)],
        shown="`off`", note="no limit",
        help="keep the newest N versions of each state; older ones are pruned unless"
             " --retention-days keeps them",
        doc=f"keep the newest N versions of each state, 1 to {MAX_VERSIONS}; older ones are"
            f" pruned (a tombstone stays) unless `--retention-days` keeps them; tenants and"
            f" states may override it; see [at-rest.md](at-rest.md#retention)")
    retention_days: int | None = option(
        "retention-days", env="KL_RETENTION_DAYS", default=None,
        parse=retention_limit, unparsable=_retention_limit(MAX_DAYS),
        rules=[Bounds(_retention_limit(MAX_DAYS), least=1, most=MAX_DAYS)],
        shown="`off`", note="no limit",
        help="keep every version younger than D days",
        doc=f"keep every version younger than D days, 1 to {MAX_DAYS}")
    retention_interval: float = option(
        "retention-interval", env="KL_RETENTION_INTERVAL", default=DEFAULT_RETENTION_INTERVAL,
        parse=float, rules=[POSITIVE_SECONDS],
        help="seconds between two pruning passes",
        doc="seconds between two pruning passes (each runs in the background, one state per"
            " short transaction)")
    log_format: str = option(
        "log-format", env="KL_LOG_FORMAT", default="text", rules=[OneOf(LOG_FORMATS)],
        help="text or json",
        doc="`text`, or `json` for one JSON object per log line; see"
            " [operations.md](operations.md#logs)")

    @property
    def edge(self) -> EdgeLimits:
        """The limits at the edge of every listener."""
        return EdgeLimits(**{limit.name: getattr(self, limit.name)
                             for limit in fields(EdgeLimits)})

    @classmethod
    def from_sources(cls, options: Mapping[str, Any],
                     environ: Mapping[str, str] = os.environ) -> Settings:
        """Options first, then C{KL_*} environment variables, then defaults.

        @raise usage.UsageError: naming the first setting that cannot work."""
        settings = cls(**{each.name: each.read(options, environ) for each in OPTIONS})
        settings.check()
        return settings

    def check(self) -> None:
        """@raise usage.UsageError: naming the first setting that cannot
        work: each option's own rules in the table's order, then the rules
        between options."""
        for each in OPTIONS:
            each.check(getattr(self, each.name))
        if self.auth_mode == "static" and not (self.auth_token or self.oidc_config):
            raise usage.UsageError("KL_AUTH_MODE=static needs KL_AUTH_TOKEN, --oidc-config,"
                                   " or both")
        check_oidc_settings(self.auth_mode, self.oidc_config)
        if self.auth_mode == "database":
            self._check_hosted()
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
            _endpoint(self.control_listen)
        except _ENDPOINT_ERRORS as error:
            raise usage.UsageError(f"--control-listen {self.control_listen!r} is not a usable"
                                   f" Twisted endpoint string: {error}") from None
        if self.public_url is not None:
            parts = urlsplit(self.public_url)
            if parts.scheme not in ("http", "https") or not parts.netloc or parts.query \
                    or parts.fragment:
                raise usage.UsageError("--public-url must be an http:// or https:// URL such"
                                       " as https://kilolock.example.com")


#: Every option, in the order of C{docs/running.md}.
OPTIONS: tuple[Option, ...] = options_of(Settings)


def options_table() -> str:
    """The options table of C{docs/running.md} (Markdown)."""
    return markdown_table(OPTIONS)
