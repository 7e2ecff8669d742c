"""The edge limits of every listener over real sockets: oversized request
heads answered 414/431 with a JSON body (on the state lane and on the
control API's listener), the per-address connection cap (429, trusted
proxies exempt), the refusals counted in /metrics and logged; and the
listen backlog reaching the endpoints."""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest
import pytest_twisted
from attrs import asdict
from twisted.internet.testing import MemoryReactorClock
from twisted.internet.threads import deferToThread
from twisted.python import usage

from kilolock.server.settings import Settings
from kilolock.server.tap import make_service_from_settings
from kilolock.store.memory.store import MemoryStateStore
from kilolock.web.edge import DEFAULT_LIMITS, EdgeLimits
from tests.support.awaiting import eventually
from tests.support.log_events import logged

CONTROL_TOKEN = "control-token-for-edge-tests-0123"


class Listeners:
    """A hosted server in this process: the state lane and the control API."""

    def __init__(self, service: Any) -> None:
        self.service = service
        self.state = service.listening.port.getHost().port
        self.control = service.web_service.control_listening.port.getHost().port

    def port(self, listener: str) -> int:
        return self.state if listener == "state" else self.control


def start(edge: EdgeLimits = DEFAULT_LIMITS, **settings: Any) -> Any:
    from twisted.internet import reactor

    config = Settings(listen="tcp:0:interface=127.0.0.1", store="memory", **asdict(edge),
                      auth_mode="database", control_token=CONTROL_TOKEN,
                      control_listen="tcp:0:interface=127.0.0.1", **settings)
    service = make_service_from_settings(config, reactor, store=MemoryStateStore())
    service.startService()
    return service


@pytest.fixture
def listeners() -> Iterator[Listeners]:
    service = start()
    yield Listeners(service)
    pytest_twisted.blockon(service.stopService())


def exchange(port: int, payload: bytes, sock: socket.socket | None = None) -> bytes:
    """Send C{payload} and read one response (until the server closes the
    connection or the response's Content-Length is complete)."""
    own = sock is None
    sock = sock or socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(payload)
        received = b""
        while True:
            head, separator, body = received.partition(b"\r\n\r\n")
            if separator:
                length = [int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:")]
                if length and len(body) >= length[0]:
                    return received
            data = sock.recv(65536)
            if not data:
                return received
            received += data
    finally:
        if own:
            sock.close()


def parse(raw: bytes) -> tuple[int, dict[bytes, bytes], Any]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    headers = {name.strip().lower(): value.strip()
               for name, _, value in (line.partition(b":") for line in lines[1:])}
    return int(lines[0].split(b" ")[1]), headers, json.loads(body) if body else None


async def ask(port: int, payload: bytes) -> tuple[int, dict[bytes, bytes], Any]:
    return parse(await deferToThread(exchange, port, payload))


def get(target: bytes, headers: bytes = b"") -> bytes:
    return b"GET " + target + b" HTTP/1.1\r\nHost: x\r\n" + headers + b"\r\n"


LISTENERS = ["state", "control"]


# -- request heads ------------------------------------------------------------------


@pytest.mark.parametrize("listener", LISTENERS)
@pytest_twisted.ensureDeferred
async def test_a_request_line_over_the_limit_is_414_with_a_json_body(
        listeners: Listeners, listener: str) -> None:
    """A request line one byte over KL_MAX_REQUEST_LINE (8192) is answered
    414 with the JSON error naming the setting, and the connection closed."""
    line = b"GET /healthz?" + b"a" * (8192 - len(b"GET /healthz? HTTP/1.1") + 1) + b" HTTP/1.1"
    assert len(line) == 8193
    status, headers, body = await ask(listeners.port(listener), line + b"\r\nHost: x\r\n\r\n")
    assert (status, headers[b"content-type"], headers[b"connection"]) == (
        414, b"application/json", b"close")
    assert body["error"]["code"] == "request_line_too_long"
    assert "KL_MAX_REQUEST_LINE" in body["error"]["message"]


@pytest.mark.parametrize("listener", LISTENERS)
@pytest_twisted.ensureDeferred
async def test_a_request_line_at_the_limit_is_served(
        listeners: Listeners, listener: str) -> None:
    """A request line of exactly 8192 bytes reaches its resource."""
    line = b"GET /healthz?" + b"a" * (8192 - len(b"GET /healthz? HTTP/1.1")) + b" HTTP/1.1"
    assert len(line) == 8192
    status, _, body = await ask(listeners.port(listener), line + b"\r\nHost: x\r\n\r\n")
    assert (status, body) == (200, {"status": "ok"})


@pytest_twisted.ensureDeferred
async def test_a_request_line_without_a_line_end_is_414_once_over_the_limit(
        listeners: Listeners) -> None:
    """Bytes that never end the request line are refused as soon as they
    pass the limit, without waiting for a line end."""
    status, _, body = await ask(listeners.state, b"GET /" + b"a" * 9000)
    assert (status, body["error"]["code"]) == (414, "request_line_too_long")


@pytest.mark.parametrize("listener", LISTENERS)
@pytest_twisted.ensureDeferred
async def test_a_head_over_the_limit_is_431(listeners: Listeners, listener: str) -> None:
    """One header line that takes the head past KL_MAX_HEAD_BYTES (16384):
    431 headers_too_large."""
    status, headers, body = await ask(listeners.port(listener),
                                      get(b"/healthz", b"X-Big: " + b"b" * 17000 + b"\r\n"))
    assert (status, headers[b"content-type"]) == (431, b"application/json")
    assert body["error"]["code"] == "headers_too_large"
    assert "KL_MAX_HEAD_BYTES" in body["error"]["message"]


def _head_of(total: int) -> bytes:
    """A GET /healthz head whose lines (without their ends) take C{total} bytes."""
    fixed = len(b"GET /healthz HTTP/1.1") + len(b"Host: x") + len(b"X-Pad: ")
    return get(b"/healthz", b"X-Pad: " + b"p" * (total - fixed) + b"\r\n")


@pytest_twisted.ensureDeferred
async def test_a_head_at_the_limit_is_served_and_one_byte_more_is_431(
        listeners: Listeners) -> None:
    """The head limit counts the request line and header lines, line ends
    excluded: 16384 bytes pass, 16385 do not."""
    status, _, _ = await ask(listeners.state, _head_of(16384))
    assert status == 200
    status, _, body = await ask(listeners.state, _head_of(16385))
    assert (status, body["error"]["code"]) == (431, "headers_too_large")


@pytest.mark.parametrize("listener", LISTENERS)
@pytest_twisted.ensureDeferred
async def test_too_many_header_fields_is_431(listeners: Listeners, listener: str) -> None:
    """KL_MAX_HEADERS (100) fields are served; 101 are 431 too_many_headers."""
    def fields(count: int) -> bytes:
        return b"".join(b"X-F%d: v\r\n" % index for index in range(count - 1))  # + Host

    status, _, _ = await ask(listeners.port(listener), get(b"/healthz", fields(100)))
    assert status == 200
    status, _, body = await ask(listeners.port(listener), get(b"/healthz", fields(101)))
    assert (status, body["error"]["code"]) == (431, "too_many_headers")
    assert "KL_MAX_HEADERS" in body["error"]["message"]


@pytest_twisted.ensureDeferred
async def test_head_refusals_are_counted_per_listener_and_logged(
        listeners: Listeners) -> None:
    """Each refusal counts in kilolock_http_refusals_total{listener,reason}
    and writes an access line naming the reason and the client, never the
    refused bytes."""
    with logged("{log_access_line}") as events:
        await ask(listeners.control, b"GET /" + b"s" * 9000 + b" HTTP/1.1\r\n\r\n")
        await ask(listeners.state, get(b"/healthz", b"X-Big: " + b"q" * 17000 + b"\r\n"))
    refusals = [event for event in events if "refusal" in event]
    assert [(event["refusal"], event["status"], event["listener"], event["client"])
            for event in refusals] == [("request_line_too_long", 414, "control", "127.0.0.1"),
                                       ("headers_too_large", 431, "state", "127.0.0.1")]
    assert not any(b"sss" in repr(event).encode() or b"qqq" in repr(event).encode()
                   for event in refusals)
    _, _, text = parse_metrics(await deferToThread(exchange, listeners.state, get(b"/metrics")))
    assert 'kilolock_http_refusals_total{listener="control",reason="request_line_too_long"}' \
           ' 1.0' in text
    assert 'kilolock_http_refusals_total{listener="state",reason="headers_too_large"} 1.0' \
           in text


def parse_metrics(raw: bytes) -> tuple[int, bytes, str]:
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), head, body.decode()


# -- connections per client ------------------------------------------------------------


def _cap_exchange(port: int, count: int) -> tuple[list[int], bytes]:
    """Open C{count} connections that each get an answer and stay open, then
    one more: (the first answers' statuses, the extra one's response)."""
    held = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(count)]
    try:
        statuses = [parse(exchange(port, get(b"/healthz"), sock))[0] for sock in held]
        return statuses, exchange(port, get(b"/healthz"))
    finally:
        for sock in held:
            sock.close()


@pytest_twisted.ensureDeferred
async def test_connections_over_the_per_client_cap_get_429() -> None:
    """With KL_MAX_CONNECTIONS_PER_CLIENT=2, a third open connection from
    the same address is answered 429 with Retry-After and the JSON error;
    once one closes, a new connection is served again."""
    service = start(EdgeLimits(max_connections_per_client=2))
    try:
        port = service.listening.port.getHost().port
        statuses, refused = await deferToThread(_cap_exchange, port, 2)
        assert statuses == [200, 200]
        status, headers, body = parse(refused)
        assert (status, headers[b"retry-after"]) == (429, b"1")
        assert body["error"]["code"] == "too_many_connections"
        await eventually(lambda: sum(service.site.peers.values()) == 0,
                         "the closed connections to be forgotten")
        status, _, _ = await ask(port, get(b"/healthz"))
        assert status == 200
    finally:
        await service.stopService()


@pytest_twisted.ensureDeferred
async def test_a_trusted_proxy_is_exempt_from_the_connection_cap() -> None:
    """Connections from a --trusted-proxy (which carries many clients) are
    not capped: two open connections with a cap of 1 are both served."""
    service = start(EdgeLimits(max_connections_per_client=1),
                    trusted_proxies=("127.0.0.1/32",))
    try:
        port = service.listening.port.getHost().port
        statuses, refused = await deferToThread(_cap_exchange, port, 2)
        assert statuses == [200, 200]
        assert parse(refused)[0] == 200
    finally:
        await service.stopService()


# -- listen backlog ----------------------------------------------------------------------


def _listened(settings: Settings) -> list[tuple[int, int]]:
    """(port, backlog) of every TCP listener the service opens."""
    reactor = MemoryReactorClock()
    service = make_service_from_settings(settings, reactor, store=MemoryStateStore())
    service.startService()
    return [(port, backlog) for port, _, backlog, _ in reactor.tcpServers]


def test_the_listen_backlog_reaches_both_listeners() -> None:
    """KL_LISTEN_BACKLOG (default 511, not Twisted's 50) is the backlog of
    the state lane and of the control API's listener; a backlog= in an
    endpoint string wins for that listener."""
    hosted = dict(store="memory", auth_mode="database", control_token=CONTROL_TOKEN)
    assert _listened(Settings(listen="tcp:7001", control_listen="tcp:7002", **hosted)) == [
        (7001, 511), (7002, 511)]
    assert _listened(Settings(listen="tcp:7001:backlog=7", control_listen="tcp:7002",
                              listen_backlog=2048, **hosted)) == [
        (7001, 7), (7002, 2048)]


def test_limits_come_from_options_then_environment_then_defaults() -> None:
    """Every limit has an option and a KL_* variable; a bad value is a
    usage error naming the variable."""
    settings = Settings.from_sources({"listen-backlog": "1024"}, {
        "KL_LISTEN_BACKLOG": "2048", "KL_BODY_MIN_RATE": "0", "KL_HEADER_TIMEOUT": "7.5"})
    assert (settings.edge.listen_backlog, settings.edge.body_min_rate,
            settings.edge.header_timeout, settings.edge.max_headers) == (1024, 0, 7.5, 100)
    with pytest.raises(usage.UsageError, match="KL_MAX_HEADERS must be positive"):
        Settings.from_sources({}, {"KL_MAX_HEADERS": "0"})
    with pytest.raises(usage.UsageError, match="KL_BODY_BUDGET_BYTES must be a number"):
        Settings.from_sources({}, {"KL_BODY_BUDGET_BYTES": "1GiB"})
    with pytest.raises(usage.UsageError, match="KL_MAX_CONNECTIONS_PER_CLIENT must be 0 or"):
        Settings.from_sources({"max-connections-per-client": "-1"}, {})


@pytest_twisted.ensureDeferred
async def test_edge_refusals_under_the_tfe_lane_are_jsonapi_errors(
        listeners: Listeners) -> None:
    """A request whose line names the TFE lane (/api/v2/...) is refused in
    that lane's dialect, a JSON:API error document; elsewhere, and before
    the request line is known, in Kilolock's JSON."""
    fields = b"".join(b"X-F%d: v\r\n" % index for index in range(101))
    status, headers, body = await ask(listeners.state, get(b"/api/v2/ping", fields))
    assert (status, body["errors"][0]["status"]) == (431, "431")
    assert "KL_MAX_HEADERS" in body["errors"][0]["detail"]
    assert headers[b"connection"] == b"close"
    status, _, body = await ask(listeners.state, b"GET /api/v2/" + b"p" * 9000)
    assert (status, body["error"]["code"]) == (414, "request_line_too_long")
