"""The connection of a Kilolock site: the limits of L{kilolock.web.edge}
held on the wire, before a request reaches a resource.

  - B{Request heads}: the request line is held to C{max_request_line}
    bytes (414), the whole head to C{max_head_bytes} (431) and
    C{max_headers} fields (431).  twisted.web's own limits
    (C{LineReceiver.MAX_LENGTH}, C{HTTPChannel.totalHeadersSize} and
    C{maxHeaders}) close the connection with a bare 400 or nothing; here
    C{MAX_LENGTH} is kept at the bytes the head may still take, so that a
    line over it reaches C{lineLengthExceeded} (on the request line: 414,
    later: 431) before twisted.web's own checks, which are set to the same
    limits and never fire first.
  - B{Slow clients}: a request's whole head must arrive within
    C{header_timeout} seconds of its first byte, and its body must keep
    C{body_min_rate} bytes per second after C{body_rate_grace} seconds (as
    Apache's mod_reqtimeout: the body's deadline is its start, plus the
    grace, plus one second per C{body_min_rate} bytes received), else 408.
    A deadline found passed is checked once more after the reactor has read
    what is waiting on the socket (a busy reactor is not the client's
    fault).  Besides, C{request_timeout} bounds the whole request from its
    first byte: past it the connection is aborted.
  - B{Connections per client}: at most C{max_connections_per_client} open
    connections per TCP peer address (429).  The peer is the address the
    connection comes from, not C{X-Forwarded-For}: the cap is decided
    before any header is read, and a trusted proxy's connections (which
    carry many clients) are exempt.

A refused connection is answered at once (L{refuse}); what the client
still sends is read and dropped for C{linger_seconds}, so that it reads the
answer instead of a reset; then the connection is closed.

A body of L{LARGE_BODY_BYTES} or more is read from the socket
L{LARGE_READ_BYTES} at a time instead of the reactor's 64 KB: a quarter of
the reads, each with its trip through twisted.web, for a 120 MB state
(each read's bytes go on to the request's temporary file as before, so no
more of the body is held in memory).
"""

from __future__ import annotations

from typing import Any

from twisted.internet.interfaces import IDelayedCall
from twisted.internet.protocol import connectionDone
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.http import HTTPChannel

from kilolock.web.edge import (
    BODY_TOO_SLOW,
    DEFAULT_LIMITS,
    HEAD_TOO_LARGE,
    HEAD_TOO_SLOW,
    REQUEST_LINE_TOO_LONG,
    TOO_MANY_CONNECTIONS,
    TOO_MANY_HEADERS,
    EdgeLimits,
    Refusal,
)
from kilolock.web.forwarded import is_trusted
from kilolock.web.resource import error_dialect_for

log = Logger(namespace="kilolock.access")

#: A body this large (by its C{Content-Length}) is read in bigger pieces.
LARGE_BODY_BYTES = 4 * 1024 * 1024
#: The size of those pieces (a socket read), against the reactor's 64 KB.
LARGE_READ_BYTES = 256 * 1024


def count_on(site: Any, counter: str, change: int) -> None:
    """Move one of a L{KilolockSite}'s request counters (other sites have none)."""
    if site is not None and hasattr(site, counter):
        setattr(site, counter, getattr(site, counter) + change)


def _cancel(call: IDelayedCall | None) -> None:
    if call is not None and call.active():
        call.cancel()


class KilolockChannel(HTTPChannel):
    """An HTTP/1.1 channel holding the site's L{EdgeLimits} (see the module)."""

    #: Set by the site that builds the channel.
    site: Any = None
    #: Seconds a refused connection is drained before it is closed.
    linger_seconds = 5.0
    #: The same for a connection over the per-client cap, refused before
    #: its request: short, so that a client opening connections in a loop
    #: cannot hold many of them this way.
    cap_linger_seconds = 1.0
    #: Seconds a closed connection may take to flush its answer before it
    #: is aborted.
    abort_seconds = 5.0

    limits: EdgeLimits = DEFAULT_LIMITS
    peer = "unknown"

    _host: Any = None
    _deadline: IDelayedCall | None = None
    _head_deadline: IDelayedCall | None = None
    _rate_check: IDelayedCall | None = None
    _closing: IDelayedCall | None = None
    _receiving = False
    _in_head = False
    _refused = False
    _dropping = False
    _counted_peer: str | None = None
    _head_lines = 0
    _head_bytes = 0
    _header_fields = 0
    _body_started = 0.0
    _body_bytes = 0
    _read_size: int | None = None

    def getHost(self) -> Any:
        """The connection's local address, asked of the socket once (every
        request's constructor asks for it: a getsockname call each time)."""
        if self._host is None:
            self._host = super().getHost()
        return self._host

    # -- the connection ------------------------------------------------------

    def connectionMade(self) -> None:
        super().connectionMade()
        self.limits = getattr(self.site, "edge", DEFAULT_LIMITS)
        # twisted.web's own limits, set to ours: ours are checked first.
        self.maxHeaders = self.limits.max_headers
        self.totalHeadersSize = self.limits.max_head_bytes
        self._start_head()
        transport: Any = self.transport
        self.peer = getattr(transport.getPeer(), "host", None) or "unknown"
        connections = getattr(self.site, "connections", None)
        if connections is not None:
            connections.add(self)
        if not self._take_connection_slot():
            self.refuse(TOO_MANY_CONNECTIONS.refusal(self.limits), linger=self.cap_linger_seconds)

    def _take_connection_slot(self) -> bool:
        """Count this connection against its peer's cap; False when the cap
        is reached (a trusted proxy, or a peer without an IP address, has
        none)."""
        cap = self.limits.max_connections_per_client
        peers = getattr(self.site, "peers", None)
        if not cap or peers is None or self.peer == "unknown" or is_trusted(
                self.peer, getattr(self.site, "trusted_proxies", ())):
            return True
        if peers[self.peer] >= cap:
            return False
        peers[self.peer] += 1
        self._counted_peer = self.peer
        return True

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        self._end_receiving()
        _cancel(self._closing)
        connections = getattr(self.site, "connections", None)
        if connections is not None:
            connections.discard(self)
        if self._counted_peer is not None:
            peers = self.site.peers
            peers[self._counted_peer] -= 1
            if peers[self._counted_peer] <= 0:
                del peers[self._counted_peer]
            self._counted_peer = None
        super().connectionLost(reason)

    # -- receiving -------------------------------------------------------------

    def dataReceived(self, data: bytes) -> None:
        if self._dropping:
            return
        if not self._receiving and not self._handlingRequest and not self._refused:
            # The first byte of a request: it counts as in flight from now
            # on (a graceful shutdown waits for it), and its deadlines start.
            self._receiving = True
            self._in_head = True
            count_on(self.site, "receiving", +1)
            timeout = getattr(self.site, "request_timeout", None)
            if timeout:
                self._deadline = self.callLater(timeout, self._too_slow)
            self._head_deadline = self.callLater(self.limits.header_timeout,
                                                 self._head_overdue)
        super().dataReceived(data)

    def _start_head(self) -> None:
        """Ready the head accounting for the next request."""
        self._head_lines = self._head_bytes = self._header_fields = 0
        self.MAX_LENGTH = min(self.limits.max_request_line, self.limits.max_head_bytes)

    def lineReceived(self, line: bytes) -> None:
        if self._dropping:
            return
        if self._head_lines or line:  # not the stray blank line before a request
            self._head_lines += 1
            self._head_bytes += len(line)
            # The next line may take what is left of the head's bytes.
            self.MAX_LENGTH = max(0, self.limits.max_head_bytes - self._head_bytes)
        super().lineReceived(line)

    def lineLengthExceeded(self, line: bytes) -> None:
        """A line longer than what the head may still take."""
        if self._head_lines == 0:
            self.refuse(REQUEST_LINE_TOO_LONG.refusal(self.limits))
        else:
            self.refuse(HEAD_TOO_LARGE.refusal(self.limits))

    def headerReceived(self, line: bytes) -> bool:
        self._header_fields += 1
        if self._header_fields > self.limits.max_headers:
            self.refuse(TOO_MANY_HEADERS.refusal(self.limits))
            return False
        accepted: bool = super().headerReceived(line)
        return accepted

    def allHeadersReceived(self) -> None:
        self._in_head = False
        _cancel(self._head_deadline)
        self._head_deadline = None
        super().allHeadersReceived()
        if (self.length or 0) >= LARGE_BODY_BYTES and not self._refused:
            self._read_in(LARGE_READ_BYTES)
        if self.length != 0 and self.limits.body_min_rate and not self._refused:
            self._body_started = self._now()
            self._body_bytes = 0
            self._rate_check = self.callLater(self.limits.body_rate_grace, self._check_rate)

    def rawDataReceived(self, data: bytes) -> None:
        if self._dropping:
            return
        if not self._handlingRequest:
            self._body_bytes += len(data)
        super().rawDataReceived(data)

    def allContentReceived(self) -> None:
        self._end_receiving()
        self._start_head()
        super().allContentReceived()

    def _read_in(self, size: int | None) -> None:
        """Read the socket C{size} bytes at a time (None: as before the
        large body); a transport without the setting (TLS) reads as it
        does."""
        transport: Any = self.transport
        if transport is None or not hasattr(transport, "bufferSize"):
            return
        if size is None:
            if self._read_size is not None:
                transport.bufferSize, self._read_size = self._read_size, None
        else:
            if self._read_size is None:
                self._read_size = transport.bufferSize
            transport.bufferSize = size

    def _end_receiving(self) -> None:
        self._read_in(None)
        if self._receiving:
            self._receiving = False
            count_on(self.site, "receiving", -1)
        self._in_head = False
        for call in (self._deadline, self._head_deadline, self._rate_check):
            _cancel(call)
        self._deadline = self._head_deadline = self._rate_check = None

    # -- deadlines -------------------------------------------------------------

    def _now(self) -> float:
        seconds: float = self.site.reactor.seconds()
        return seconds

    def _too_slow(self) -> None:
        self._deadline = None
        log.info("dropped a client that did not send its request within {timeout} s",
                 timeout=getattr(self.site, "request_timeout", None))
        self._report("request_timeout", None)
        transport: Any = self.transport
        if transport is not None:
            transport.abortConnection()

    def _head_overdue(self) -> None:
        # Read what is waiting on the socket before deciding.
        self._head_deadline = self.callLater(0, self._head_still_overdue)

    def _head_still_overdue(self) -> None:
        self._head_deadline = None
        if self._in_head:
            self.refuse(HEAD_TOO_SLOW.refusal(self.limits))

    def _body_deadline(self) -> float:
        limits = self.limits
        return (self._body_started + limits.body_rate_grace
                + self._body_bytes / limits.body_min_rate)

    def _check_rate(self, confirming: bool = False) -> None:
        self._rate_check = None
        remaining = self._body_deadline() - self._now()
        if remaining > 0:
            self._rate_check = self.callLater(remaining, self._check_rate)
        elif not confirming:
            # Read what is waiting on the socket before deciding.
            self._rate_check = self.callLater(0, lambda: self._check_rate(confirming=True))
        else:
            self.refuse(BODY_TOO_SLOW.refusal(self.limits))

    # -- refusing --------------------------------------------------------------

    def refuse(self, refusal: Refusal, client: str | None = None,
               drop_input: bool = True, linger: float | None = None) -> None:
        """Answer C{refusal} now, count and log it, and close the connection
        after C{linger} seconds (C{linger_seconds}): meanwhile what the
        client sends is dropped (or, with C{drop_input} false, left to the
        request refusing its own body, which closes the connection as soon
        as that body has ended)."""
        if self._refused:
            return
        self._refused = True
        self._dropping = drop_input
        self._end_receiving()
        self._report(refusal.code, refusal.status, client)
        transport: Any = self.transport
        # The path of the request line, once it has arrived (twisted.web
        # keeps it on the channel until the request is complete): the part
        # of the tree it names decides how the error is worded.
        path = getattr(self, "_path", None) or b""
        transport.write(refusal.response(error_dialect_for(path)))
        if drop_input:
            self.setRawMode()
        self._closing = self.callLater(self.linger_seconds if linger is None else linger,
                                       self._close_refused)

    def _close_refused(self) -> None:
        transport: Any = self.transport
        self._closing = self.callLater(self.abort_seconds, transport.abortConnection)
        self.loseConnection()

    def _report(self, reason: str, status: int | None, client: str | None = None) -> None:
        refused = getattr(self.site, "refused", None)
        if refused is not None:
            refused(reason, status, client or self.peer)
