"""Where an issuer's verification keys come from, cached and rate-limited.

A L{RemoteKeySource} keeps the keys it last fetched and their freshness:
the JWKS response's C{Cache-Control: max-age}, clamped to
[L{KeyCacheSettings.min_ttl}, L{KeyCacheSettings.max_ttl}]
(L{KeyCacheSettings.default_ttl} when the response says nothing).  Keys are
refetched when they are stale, or when a token names a C{kid} they lack
(the issuer rotated its keys), with three guarantees:

- B{bounded rate}: a fetch starts only if the previous one started at least
  L{KeyCacheSettings.refetch_interval} seconds ago, so a flood of tokens
  with forged C{kid}s (or an issuer that is down) costs at most one fetch per
  interval;
- B{shared fetches}: requests arriving while a fetch is under way wait for
  that fetch instead of starting their own;
- B{last good keys}: a failed fetch keeps the previous keys serving, stale
  or not, for as long as the issuer stays unreachable.

All time comes from an injected L{IReactorTime}.  A L{KeyRegistry} hands
out one source per issuer configuration, shared by every tenant that trusts
the same issuer the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from attrs import frozen
from twisted.internet.defer import Deferred, ensureDeferred, fail, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from zope.interface import Interface, implementer

from kilolock.auth.oidc.fetch import FetchedKeys, HTTPGetter, fetch_keys
from kilolock.auth.oidc.jwks import KeySet, VerificationKey, parse_jwks_text
from kilolock.auth.oidc.policy import TrustedIssuer
from kilolock.auth.oidc.refusal import Reason, TokenRefused

log = Logger(namespace="kilolock.auth.oidc")


class IKeySource(Interface):
    """The verification keys of one issuer."""

    def key_for(kid: str | None, algorithm: str) -> Deferred[VerificationKey]:
        """The key with this C{kid} for C{algorithm}.

        @return: a Deferred firing with the L{VerificationKey}, or failing
            with L{TokenRefused} (C{unknown_key}, or C{keys_unavailable} when
            no keys were ever had)."""


def describe_kid(kid: str | None) -> str:
    """A C{kid} from an unverified header, fit for a log line."""
    if kid is None:
        return "no kid"
    shown = "".join(char if char.isprintable() else "?" for char in kid[:64])
    return f"kid {shown!r}" + ("…" if len(kid) > 64 else "")


@implementer(IKeySource)
class StaticKeySource:
    """Keys given in the configuration (closed networks): never fetched."""

    def __init__(self, keys: KeySet) -> None:
        self.keys = keys

    def key_for(self, kid: str | None, algorithm: str) -> Deferred[VerificationKey]:
        key = self.keys.find(kid, algorithm)
        if key is None:
            return fail(TokenRefused(Reason.UNKNOWN_KEY,
                                     f"{describe_kid(kid)} is not among the configured keys"))
        return succeed(key)


@frozen
class KeyCacheSettings:
    """The bounds of key caching, in seconds."""

    min_ttl: float = 300.0
    max_ttl: float = 86400.0
    default_ttl: float = 3600.0
    refetch_interval: float = 60.0
    fetch_timeout: float = 10.0

    def ttl(self, max_age: int | None) -> float:
        if max_age is None:
            return self.default_ttl
        return min(max(float(max_age), self.min_ttl), self.max_ttl)


@implementer(IKeySource)
class RemoteKeySource:
    """An issuer's keys from its discovery document and JWKS (see the module
    docstring for the caching rules)."""

    def __init__(self, issuer: TrustedIssuer, http: HTTPGetter, clock: IReactorTime,
                 settings: KeyCacheSettings | None = None) -> None:
        self.issuer = issuer
        self.http = http
        self.clock = clock
        self.settings = settings or KeyCacheSettings()
        self.keys: KeySet | None = None
        self.fresh_until = 0.0
        #: When the last fetch started (None before the first).
        self.last_attempt: float | None = None
        #: How many fetches were started (for tests and metrics).
        self.fetches = 0
        self._waiters: list[Deferred[None]] | None = None

    def key_for(self, kid: str | None, algorithm: str) -> Deferred[VerificationKey]:
        return ensureDeferred(self._key_for(kid, algorithm))

    async def _key_for(self, kid: str | None, algorithm: str) -> VerificationKey:
        if self.keys is None or self.clock.seconds() >= self.fresh_until:
            await self.refresh()
        if self.keys is None:
            raise TokenRefused(Reason.KEYS_UNAVAILABLE,
                               f"the keys of {self.issuer.url} could not be fetched yet")
        key = self.keys.find(kid, algorithm)
        if key is None:
            await self.refresh()
            key = self.keys.find(kid, algorithm)
        if key is None:
            raise TokenRefused(Reason.UNKNOWN_KEY,
                               f"{describe_kid(kid)} is not among the keys of {self.issuer.url}")
        return key

    def refresh(self) -> Deferred[None]:
        """Fetch the keys again, unless a fetch is under way (then wait for
        it) or the last one started less than C{refetch_interval} ago (then
        do nothing).

        @return: a Deferred firing with None when the fetch is over, whether
            it succeeded or not (a failure keeps the previous keys)."""
        waiter: Deferred[None] = Deferred()
        if self._waiters is not None:
            self._waiters.append(waiter)
            return waiter
        now = self.clock.seconds()
        if self.last_attempt is not None and now - self.last_attempt < \
                self.settings.refetch_interval:
            return succeed(None)
        self.last_attempt = now
        self.fetches += 1
        self._waiters = [waiter]
        fetching = fetch_keys(self.http, self.issuer, self.clock, self.settings.fetch_timeout)
        fetching.addCallbacks(self._fetched, self._failed)
        fetching.addBoth(self._wake)
        return waiter

    def _fetched(self, fetched: FetchedKeys) -> None:
        previous = self.keys.kids if self.keys is not None else frozenset()
        self.keys = fetched.keys
        ttl = self.settings.ttl(fetched.max_age)
        self.fresh_until = self.clock.seconds() + ttl
        if fetched.keys.kids != previous:
            log.info("OIDC keys of {issuer}: {count} key(s), kept {ttl:.0f} s",
                     issuer=self.issuer.url, count=len(fetched.keys.keys), ttl=ttl)

    def _failed(self, failure: Failure) -> None:
        kept = "keeping the previous keys" if self.keys is not None else "no keys yet"
        log.warn("OIDC keys of {issuer} could not be fetched ({problem}); {kept}",
                 issuer=self.issuer.url, problem=failure.getErrorMessage() or
                 failure.type, kept=kept)

    def _wake(self, _: Any) -> None:
        waiters, self._waiters = self._waiters or [], None
        for waiter in waiters:
            if not waiter.called:
                waiter.callback(None)


class KeyRegistry:
    """One key source per issuer configuration (URL, JWKS URL, local JWKS,
    CA), shared by all tenants that configure the issuer the same way."""

    def __init__(self, clock: IReactorTime, http_for: Callable[[str | None], HTTPGetter],
                 settings: KeyCacheSettings | None = None) -> None:
        """
        @param http_for: the HTTP client to fetch with, given the issuer's
            CA bundle (None: the system's CAs); see
            L{kilolock.auth.oidc.fetch.http_client}.
        """
        self.clock = clock
        self.http_for = http_for
        self.settings = settings or KeyCacheSettings()
        self._sources: dict[tuple[str | None, ...], IKeySource] = {}

    def source_for(self, issuer: TrustedIssuer) -> IKeySource:
        identity = (issuer.url, issuer.jwks_url, issuer.jwks, issuer.ca_pem)
        source = self._sources.get(identity)
        if source is None:
            if issuer.jwks is not None:
                source = StaticKeySource(parse_jwks_text(issuer.jwks))
            else:
                source = RemoteKeySource(issuer, self.http_for(issuer.ca_pem), self.clock,
                                         self.settings)
            self._sources[identity] = source
        return source
