"""Discovery documents and JWKS, fetched over HTTP without blocking.

The HTTP client is anything with treq's C{get} (a C{treq.client.HTTPClient}
in production, C{treq.testing.StubTreq} in tests).  Every fetch has a
timeout on an injected clock and a size cap; redirects are not followed
(an issuer's documents live at the URLs it publishes).
"""

from __future__ import annotations

import json
import re
from typing import Any, Protocol

import treq
from attrs import frozen
from cryptography import x509
from OpenSSL import crypto
from treq.client import HTTPClient
from twisted.internet.defer import Deferred, ensureDeferred
from twisted.internet.interfaces import IReactorTime
from twisted.internet.ssl import Certificate, trustRootFromCertificates
from twisted.web.client import Agent, BrowserLikePolicyForHTTPS
from twisted.web.http_headers import Headers

from kilolock.auth.oidc.jwks import JWKSError, KeySet, parse_jwks
from kilolock.auth.oidc.policy import TrustedIssuer
from kilolock.auth.oidc.validation import url_problem

#: The largest discovery document or JWKS read.
MAX_DOCUMENT = 512 * 1024
#: Seconds a whole fetch (connect, headers, body) may take.
FETCH_TIMEOUT = 10.0
_MAX_AGE = re.compile(r"(?:^|,)\s*max-age\s*=\s*\"?(\d{1,10})\"?\s*(?:,|$)", re.IGNORECASE)
_NO_CACHE = re.compile(r"(?:^|,)\s*(?:no-store|no-cache)\s*(?:,|=|$)", re.IGNORECASE)


class HTTPGetter(Protocol):
    """What the fetcher needs of an HTTP client (treq's C{get})."""

    def get(self, url: str, **kwargs: Any) -> Deferred[Any]: ...


class FetchError(Exception):
    """A document could not be fetched or is unusable; the message is safe to log."""


@frozen
class FetchedKeys:
    """An issuer's keys and how long its server said to keep them."""

    keys: KeySet
    jwks_url: str
    #: From C{Cache-Control} (C{max-age}; 0 for C{no-store}/C{no-cache}),
    #: None when the response said nothing.
    max_age: int | None


def max_age(headers: Headers) -> int | None:
    """The freshness lifetime C{Cache-Control} gives, in seconds."""
    values = headers.getRawHeaders(b"cache-control") or []
    text = ",".join(value.decode("latin-1") for value in values)
    if _NO_CACHE.search(text):
        return 0
    found = _MAX_AGE.search(text)
    return int(found.group(1)) if found else None


async def _get_json(http: HTTPGetter, url: str) -> tuple[object, int | None]:
    response = await http.get(url, headers={b"Accept": [b"application/json"]},
                              allow_redirects=False)
    if response.code != 200:
        raise FetchError(f"{url} answered HTTP {response.code}")
    length = response.length
    if isinstance(length, int) and length > MAX_DOCUMENT:
        raise FetchError(f"{url} sent {length} bytes (at most {MAX_DOCUMENT})")
    chunks: list[bytes] = []
    received = 0

    def collect(chunk: bytes) -> None:
        nonlocal received
        received += len(chunk)
        if received > MAX_DOCUMENT:
            raise FetchError(f"{url} sent more than {MAX_DOCUMENT} bytes")
        chunks.append(chunk)

    await treq.collect(response, collect)
    try:
        document = json.loads(b"".join(chunks))
    except (ValueError, UnicodeDecodeError):
        raise FetchError(f"{url} did not send JSON") from None
    return document, max_age(response.headers)


async def _fetch_keys(http: HTTPGetter, issuer: TrustedIssuer) -> FetchedKeys:
    jwks_url = issuer.jwks_url
    if jwks_url is None:
        discovery, _ = await _get_json(http, issuer.discovery_url)
        if not isinstance(discovery, dict) or discovery.get("issuer") != issuer.url:
            raise FetchError(f"{issuer.discovery_url} does not name the issuer {issuer.url}")
        jwks_url = discovery.get("jwks_uri")
        if not isinstance(jwks_url, str):
            raise FetchError(f"{issuer.discovery_url} has no jwks_uri")
        # The rule of a configured jwks_url (and of the issuer's url): https,
        # or plain http on a loopback host (an issuer served for tests).
        problem = url_problem(jwks_url, allow_query=True)
        if problem is not None:
            raise FetchError(f"{issuer.discovery_url}: its jwks_uri {problem}")
    document, lifetime = await _get_json(http, jwks_url)
    try:
        keys = parse_jwks(document)
    except JWKSError as error:
        raise FetchError(f"{jwks_url} {error}") from None
    return FetchedKeys(keys=keys, jwks_url=jwks_url, max_age=lifetime)


def fetch_keys(http: HTTPGetter, issuer: TrustedIssuer, clock: IReactorTime,
               timeout: float = FETCH_TIMEOUT) -> Deferred[FetchedKeys]:
    """Fetch an issuer's keys: its discovery document (unless it has a
    C{jwks_url}), which must name the issuer exactly and a C{jwks_uri} that
    is https (plain http only on a loopback host, as for the issuer's URL),
    then the JWKS.

    @return: a Deferred firing with L{FetchedKeys}, or failing with
        L{FetchError} (or the transport's error, or C{TimeoutError} after
        C{timeout} seconds of C{clock})."""
    fetching = ensureDeferred(_fetch_keys(http, issuer))
    fetching.addTimeout(timeout, clock)
    return fetching


def http_client(reactor: Any, ca_pem: str | None = None) -> HTTPClient:
    """A treq client for key fetches: TLS verified against the system's CAs,
    or only against those in C{ca_pem} (self-managed GitLab, GitHub
    Enterprise Server behind a private CA)."""
    if ca_pem is None:
        policy = BrowserLikePolicyForHTTPS()
    else:
        certificates = [Certificate(crypto.X509.from_cryptography(each))
                        for each in x509.load_pem_x509_certificates(ca_pem.encode())]
        policy = BrowserLikePolicyForHTTPS(trustRoot=trustRootFromCertificates(certificates))
    return HTTPClient(Agent(reactor, contextFactory=policy, connectTimeout=FETCH_TIMEOUT))
