"""A large body is read from the socket in bigger pieces: from its
C{Content-Length} of LARGE_BODY_BYTES up, the connection reads
LARGE_READ_BYTES at a time until the body is in, then reads as before."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet.address import IPv4Address
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.web.pages import notFound

from kilolock.web.channel import LARGE_BODY_BYTES, LARGE_READ_BYTES
from kilolock.web.site import KilolockSite

#: The reactor's own read size (twisted.internet.abstract.FileDescriptor).
DEFAULT_READ = 65536


class ReadingTransport(StringTransport):
    """A transport with a TCP connection's read size."""

    bufferSize = DEFAULT_READ


def connect(transport: StringTransport) -> Any:
    site = KilolockSite(notFound(), reactor=Clock(), timeout=None)
    peer = IPv4Address("TCP", "127.0.0.1", 40000)
    channel = site.buildProtocol(peer)
    channel.makeConnection(transport)
    return channel


def head(length: int | None) -> bytes:
    framing = b"Transfer-Encoding: chunked" if length is None else b"Content-Length: %d" % length
    return b"POST /v1/states/big HTTP/1.1\r\nHost: x\r\n" + framing + b"\r\n\r\n"


def test_a_large_body_is_read_in_large_pieces_until_it_is_in() -> None:
    transport = ReadingTransport()
    channel = connect(transport)
    channel.dataReceived(head(LARGE_BODY_BYTES))
    assert transport.bufferSize == LARGE_READ_BYTES
    channel.dataReceived(b"x" * (LARGE_BODY_BYTES - 1))
    assert transport.bufferSize == LARGE_READ_BYTES
    channel.dataReceived(b"x")
    assert transport.bufferSize == DEFAULT_READ
    assert transport.value().startswith(b"HTTP/1.1 404 ")
    # The next request on the connection, a small one, reads as before.
    channel.dataReceived(head(10))
    assert transport.bufferSize == DEFAULT_READ


@pytest.mark.parametrize("length", [0, 10, LARGE_BODY_BYTES - 1, None])
def test_smaller_and_chunked_bodies_read_as_the_reactor_does(length: int | None) -> None:
    transport = ReadingTransport()
    channel = connect(transport)
    channel.dataReceived(head(length))
    assert transport.bufferSize == DEFAULT_READ


def test_a_connection_lost_mid_body_leaves_nothing_behind() -> None:
    transport = ReadingTransport()
    channel = connect(transport)
    channel.dataReceived(head(LARGE_BODY_BYTES) + b"x" * 1000)
    channel.connectionLost(None)
    assert transport.bufferSize == DEFAULT_READ


def test_a_transport_without_a_read_size_is_left_alone() -> None:
    """TLS wraps the socket: its transport has no read size to set."""
    transport = StringTransport()
    channel = connect(transport)
    channel.dataReceived(head(LARGE_BODY_BYTES) + b"x" * LARGE_BODY_BYTES)
    assert not hasattr(transport, "bufferSize")
    assert transport.value().startswith(b"HTTP/1.1 404 ")
