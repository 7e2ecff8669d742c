"""Slow clients on the site's clock: a request head must be complete within
KL_HEADER_TIMEOUT of its first byte, and a body must keep KL_BODY_MIN_RATE
bytes per second after KL_BODY_RATE_GRACE seconds (mod_reqtimeout's rule:
its deadline is its start + the grace + one second per min-rate bytes
received).  A client cut is answered 408 with a JSON body; an honest slow
client is not cut."""

from __future__ import annotations

import json
from typing import Any

import pytest
from twisted.internet.address import IPv4Address
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.web.pages import notFound

from kilolock.server.metrics import Metrics
from kilolock.web.edge import EdgeLimits
from kilolock.web.site import KilolockSite
from tests.support.log_events import logged

#: Exact in binary, like every step of the clock here.
TICK = 2.0**-10


def connect(edge: EdgeLimits, metrics: Metrics | None = None) -> tuple[
        Clock, Any, StringTransport]:
    clock = Clock()
    # No idle timeout: only the rules under test cut a connection.
    site = KilolockSite(notFound(), reactor=clock, edge=edge, metrics=metrics, timeout=None)
    peer = IPv4Address("TCP", "127.0.0.1", 40000)
    channel = site.buildProtocol(peer)
    transport = StringTransport(peerAddress=peer)
    channel.makeConnection(transport)
    return clock, channel, transport


def answer(transport: StringTransport) -> tuple[int, dict[str, Any]]:
    head, _, body = transport.value().partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), json.loads(body)


def head(length: int) -> bytes:
    return (b"POST /v1/states/slow HTTP/1.1\r\nHost: x\r\n"
            b"Content-Length: %d\r\n\r\n" % length)


def advance_to(clock: Clock, when: float) -> None:
    """Move C{clock} to C{when}, stopping at every call due before (so each
    runs at its own time, and what it schedules counts from then)."""
    while True:
        due = [call.getTime() for call in clock.getDelayedCalls() if call.getTime() <= when]
        if not due:
            break
        clock.advance(min(due) - clock.seconds())
    clock.advance(when - clock.seconds())


def trickle(clock: Clock, channel: Any, data: bytes, every: float) -> None:
    """Deliver C{data} one byte every C{every} seconds, starting now."""
    for index, byte in enumerate(data):
        clock.callLater(index * every, channel.dataReceived, bytes([byte]))


# -- the head ----------------------------------------------------------------------


def test_a_trickled_head_is_cut_at_the_header_timeout() -> None:
    """A head arriving a byte a second is answered 408 header_timeout
    exactly KL_HEADER_TIMEOUT seconds after its first byte, then closed
    after the linger; bytes sent meanwhile are dropped."""
    clock, channel, transport = connect(EdgeLimits(header_timeout=20))
    trickle(clock, channel, head(10), every=1.0)
    advance_to(clock, 20 - TICK)
    assert transport.value() == b""
    advance_to(clock, 20)
    status, body = answer(transport)
    assert (status, body["error"]["code"]) == (408, "header_timeout")
    assert "KL_HEADER_TIMEOUT" in body["error"]["message"]
    assert not transport.disconnecting
    advance_to(clock, 20 + channel.linger_seconds)
    assert transport.disconnecting
    assert answer(transport)[0] == 408  # nothing else was written


def test_a_head_completed_before_the_header_timeout_is_served() -> None:
    """The header deadline ends with the head: a head finished just in time
    is answered by its resource, and the connection outlives the deadline."""
    clock, channel, transport = connect(EdgeLimits(header_timeout=20))
    channel.dataReceived(b"G")
    advance_to(clock, 20 - TICK)
    channel.dataReceived(b"ET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n")
    assert transport.value().startswith(b"HTTP/1.1 404 ")
    advance_to(clock, 3600)
    assert not transport.disconnecting


def test_a_deadline_found_passed_waits_for_bytes_already_waiting() -> None:
    """A deadline that fires is checked once more after the reactor's next
    round of reads: bytes that were waiting on the socket (the reactor was
    busy, not the client slow) still count."""
    clock, channel, transport = connect(EdgeLimits(header_timeout=20))
    channel.dataReceived(b"G")
    clock.callLater(20, channel.dataReceived, b"ET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n")
    advance_to(clock, 20)
    assert transport.value().startswith(b"HTTP/1.1 404 ")


# -- the body --------------------------------------------------------------------------


def test_a_trickled_body_is_cut_after_the_grace_when_under_the_rate() -> None:
    """A body trickling a byte a second from its head on has, at the end of
    a 10 s grace, 11 bytes (sent at 0, 1, ... 10 s): worth 11/500 s more at
    500 B/s.  It is cut then with 408 body_too_slow, not at the request
    deadline minutes later."""
    clock, channel, transport = connect(EdgeLimits(body_min_rate=500, body_rate_grace=10))
    channel.dataReceived(head(100_000))
    trickle(clock, channel, b"x" * 100, every=1.0)
    advance_to(clock, 10 + 11 / 500 - TICK)
    assert transport.value() == b""
    advance_to(clock, 10 + 11 / 500 + TICK)
    status, body = answer(transport)
    assert (status, body["error"]["code"]) == (408, "body_too_slow")
    assert "KL_BODY_MIN_RATE" in body["error"]["message"]
    advance_to(clock, 11 + channel.linger_seconds)
    assert transport.disconnecting


@pytest.mark.parametrize("pace", ["steady", "burst-then-pause"])
def test_an_honest_slow_body_is_kept(pace: str) -> None:
    """A body that keeps the minimum rate on average is never cut: 2000 B/s
    for 100 s, or half of it at once and then a pause its bytes pay for."""
    clock, channel, transport = connect(EdgeLimits(body_min_rate=500, body_rate_grace=10))
    size = 200_000
    channel.dataReceived(head(size))
    if pace == "steady":
        for second in range(100):
            clock.callLater(second, channel.dataReceived, b"x" * 2000)
        advance_to(clock, 99)
    else:
        channel.dataReceived(b"x" * (size // 2))
        advance_to(clock, 10 + size // 2 / 500 - 1)  # 209 s: credit left, though idle
        channel.dataReceived(b"x" * (size // 2))
    assert transport.value().startswith(b"HTTP/1.1 404 ")
    assert not transport.disconnecting


def test_a_body_rate_of_zero_turns_the_rule_off() -> None:
    """KL_BODY_MIN_RATE=0: a stalled body is left to the request deadline."""
    clock, channel, transport = connect(EdgeLimits(body_min_rate=0))
    channel.dataReceived(head(10))
    advance_to(clock, 250)
    assert transport.value() == b""
    assert not transport.disconnecting


def test_slow_client_refusals_are_counted_and_logged() -> None:
    """Each cut counts in kilolock_http_refusals_total and is logged with
    its reason and the client's address."""
    metrics = Metrics.create()
    with logged("{log_access_line}") as events:
        clock, channel, _ = connect(EdgeLimits(header_timeout=5), metrics)
        channel.dataReceived(b"POST")
        advance_to(clock, 5)
        clock, channel, _ = connect(EdgeLimits(body_rate_grace=1), metrics)
        channel.dataReceived(head(1000))
        advance_to(clock, 2)
    assert [(event["refusal"], event["status"], event["client"]) for event in events] == [
        ("header_timeout", 408, "127.0.0.1"), ("body_too_slow", 408, "127.0.0.1")]
    for reason in ("header_timeout", "body_too_slow"):
        assert metrics.registry.get_sample_value(
            "kilolock_http_refusals_total", {"listener": "state", "reason": reason}) == 1.0
