"""Running Kilolock: discovery, readiness conditions, metrics, structured
logs, forwarded headers from trusted proxies, slow clients, graceful drain."""

from __future__ import annotations

import json
import socket
import time
import urllib.parse
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import pytest_twisted
import treq
from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred, succeed
from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactorClock, StringTransport
from twisted.logger import globalLogPublisher
from twisted.python.failure import Failure
from twisted.web.pages import notFound

from kilolock.core.conditions import ConditionTracker, is_ready
from kilolock.core.model import DEFAULT_TENANT, StoreProbe
from kilolock.server.logs import event_record
from kilolock.server.tap import Settings, make_service_from_settings
from kilolock.store.memory.store import MemoryStateStore
from kilolock.web.forwarded import client_origin, parse_networks
from kilolock.web.ops.health import server_conditions
from kilolock.web.site import KilolockSite
from tests.support.awaiting import eventually
from tests.support.stub_client import lock_body, state_body
from tests.support.tcp_table import listening


class Server:
    def __init__(self, service: Any, store: MemoryStateStore) -> None:
        self.service = service
        self.store = store
        self.port = service.listening.port.getHost().port
        self.url = f"http://127.0.0.1:{self.port}"


def start_server(store: MemoryStateStore | None = None, **settings: Any) -> Server:
    from twisted.internet import reactor

    store = store if store is not None else MemoryStateStore()
    config = Settings(listen="tcp:0:interface=127.0.0.1", store="memory", **settings)
    service = make_service_from_settings(config, reactor, store=store)
    service.startService()
    return Server(service, store)


@pytest.fixture
def server() -> Iterator[Server]:
    running = start_server()
    yield running
    pytest_twisted.blockon(running.service.stopService())


async def fetch(method: str, url: str, **kwargs: Any) -> tuple[int, Any, bytes]:
    response = await treq.request(method, url, **kwargs)
    return response.code, response.headers, await response.content()


# -- discovery ------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_discovery_lists_lanes_without_percent_encoding(server: Server) -> None:
    """/.well-known/kilolock is public, cacheable, and no advertised path is encoded."""
    status, headers, body = await fetch("GET", server.url + "/.well-known/kilolock")
    assert status == 200
    assert b"max-age" in headers.getRawHeaders(b"cache-control")[0]
    document = json.loads(body)
    lane = document["lanes"][0]
    assert (lane["name"], lane["basePath"]) == ("terraform-http", "/v1/states")
    paths = [lane["basePath"], lane["unlockPath"], *document["health"].values()]
    for path in paths:
        assert "%" not in path
        assert urllib.parse.quote(path, safe="/") == path


# -- readiness --------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_readyz_reports_conditions_and_derives_ready(server: Server) -> None:
    """/readyz lists DatabaseReachable and SchemaCurrent with every field; ready=True."""
    status, _, body = await fetch("GET", server.url + "/readyz")
    document = json.loads(body)
    assert status == 200
    assert document["ready"] is True
    types = {condition["type"]: condition for condition in document["conditions"]}
    assert set(types) == {"DatabaseReachable", "SchemaCurrent"}
    for condition in types.values():
        assert set(condition) == {"type", "status", "reason", "message",
                                  "observedGeneration", "lastTransitionTime"}
        assert condition["lastTransitionTime"].endswith("Z")


class _UnreachableStore(MemoryStateStore):
    def probe(self) -> Deferred[StoreProbe]:
        return succeed(StoreProbe(reachable=False, message="connection refused",
                                  schema_version=None, expected_schema_version=3))


@pytest_twisted.ensureDeferred
async def test_readyz_is_503_with_retry_after_when_the_database_is_unreachable() -> None:
    """A false condition makes /readyz answer 503, ready=false, with Retry-After."""
    running = start_server(store=_UnreachableStore())
    try:
        status, headers, body = await fetch("GET", running.url + "/readyz")
    finally:
        await running.service.stopService()
    document = json.loads(body)
    assert status == 503
    assert headers.getRawHeaders(b"retry-after") == [b"5"]
    assert document["ready"] is False
    statuses = {c["type"]: (c["status"], c["reason"]) for c in document["conditions"]}
    assert statuses["DatabaseReachable"] == ("False", "ConnectionFailed")
    assert statuses["SchemaCurrent"] == ("Unknown", "DatabaseUnreachable")


def test_condition_transition_time_moves_only_when_status_changes() -> None:
    """lastTransitionTime is kept across probes with the same status."""
    now = [datetime(2026, 11, 29, tzinfo=UTC)]
    tracker = ConditionTracker(clock=lambda: now[0])
    up = StoreProbe(reachable=True, message="ok", schema_version=2, expected_schema_version=2)
    down = StoreProbe(reachable=False, message="refused", expected_schema_version=2)
    first = server_conditions(up, tracker)
    now[0] += timedelta(seconds=30)
    second = server_conditions(up, tracker)
    assert first[0].last_transition_time == second[0].last_transition_time
    now[0] += timedelta(seconds=30)
    third = server_conditions(down, tracker)
    assert third[0].last_transition_time == now[0]
    assert is_ready(second) and not is_ready(third)


def test_outdated_schema_is_not_ready() -> None:
    """A schema older than the code expects makes SchemaCurrent False."""
    probe = StoreProbe(reachable=True, message="ok", schema_version=1,
                       expected_schema_version=2)
    conditions = server_conditions(probe, ConditionTracker())
    assert conditions[1].status == "False"
    assert conditions[1].reason == "SchemaOutdated"
    assert not is_ready(conditions)


# -- metrics ----------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_metrics_count_requests_locks_conflicts_and_writes(server: Server) -> None:
    """/metrics exposes request, lock, conflict, force-release and write counters."""
    state = server.url + "/v1/states/metered"
    await fetch("LOCK", state, data=lock_body("a"))
    await fetch("LOCK", state, data=lock_body("b"))
    await fetch("POST", state + "?ID=a", data=state_body(1))
    await fetch("UNLOCK", state, data=b"")
    status, headers, body = await fetch("GET", server.url + "/metrics")
    assert status == 200
    assert headers.getRawHeaders(b"content-type")[0].startswith(b"text/plain")
    text = body.decode()

    def value(line_start: str) -> float:
        for line in text.splitlines():
            if line.startswith(line_start):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError(f"no metric {line_start}")

    assert value('kilolock_http_requests_total{method="LOCK",route="/v1/states/{state}",'
                 'status="423"}') == 1
    assert value("kilolock_lock_acquisitions_total") == 1
    assert value("kilolock_lock_conflicts_total") == 1
    assert value("kilolock_lock_force_releases_total") == 1
    assert value("kilolock_state_writes_total") == 1
    assert value("kilolock_state_bytes_stored_total") == len(state_body(1))
    assert value("kilolock_database_up") == 1
    assert "metered" not in text


# -- logs ---------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_access_events_have_fields_and_no_secrets() -> None:
    """Each request logs one access event with its id, tenant, route, status and
    duration, and never the token or the body."""
    events: list[dict[str, Any]] = []

    def observe(event: dict[str, Any]) -> None:
        if event.get("log_namespace") == "kilolock.access":
            events.append(event)

    globalLogPublisher.addObserver(observe)
    running = start_server(auth_mode="static", auth_token="tok-very-secret")
    try:
        status, headers, _ = await fetch(
            "POST", running.url + "/v1/states/logged?ID=", data=state_body(1),
            headers={"Authorization": "Bearer tok-very-secret"})
        await fetch("GET", running.url + "/v1/states/logged",
                    headers={"Authorization": "Bearer wrong-token-guess"})
    finally:
        await running.service.stopService()
        globalLogPublisher.removeObserver(observe)
    assert status == 200
    records = [event_record(event) for event in events]
    assert [(r["method"], r["status"]) for r in records] == [("POST", 200), ("GET", 401)]
    first = records[0]
    assert first["request_id"] == headers.getRawHeaders(b"x-request-id")[0].decode()
    assert first["tenant"] == DEFAULT_TENANT
    assert first["route"] == "/v1/states/{state}"
    assert first["duration_ms"] >= 0
    dumped = json.dumps(records)
    assert "tok-very-secret" not in dumped
    assert "wrong-token-guess" not in dumped
    assert "terraform_data" not in dumped


# -- forwarded headers --------------------------------------------------------------


def test_forwarded_headers_are_ignored_from_untrusted_peers() -> None:
    """X-Forwarded-For/-Proto from a peer outside --trusted-proxy are ignored."""
    origin = client_origin("198.51.100.7", [b"203.0.113.9"], b"https", False,
                           parse_networks(["10.0.0.0/8"]))
    assert (origin.address, origin.scheme) == ("198.51.100.7", "http")


def test_forwarded_for_takes_the_rightmost_untrusted_hop() -> None:
    """Behind trusted proxies the client is the right-most untrusted address."""
    networks = parse_networks(["10.0.0.0/8", "127.0.0.1/32"])
    origin = client_origin("127.0.0.1", [b"1.2.3.4, 203.0.113.9", b"10.1.1.1"], b"https",
                           False, networks)
    assert (origin.address, origin.scheme) == ("203.0.113.9", "https")


def test_bad_trusted_proxy_is_refused() -> None:
    """A --trusted-proxy that is not a network is a clear error."""
    with pytest.raises(ValueError, match="not an IP network"):
        parse_networks(["not-a-cidr"])


@pytest_twisted.ensureDeferred
async def test_audit_events_record_the_forwarded_client() -> None:
    """Through a trusted proxy, audit events name the forwarded client address."""
    trusted = start_server(trusted_proxies=("127.0.0.1/32",))
    untrusted = start_server()
    try:
        for running in (trusted, untrusted):
            status, _, _ = await fetch("POST", running.url + "/v1/states/s",
                                       data=state_body(1),
                                       headers={"X-Forwarded-For": "203.0.113.9"})
            assert status == 200
    finally:
        await trusted.service.stopService()
        await untrusted.service.stopService()
    trusted_events = await trusted.store.list_events(DEFAULT_TENANT)
    untrusted_events = await untrusted.store.list_events(DEFAULT_TENANT)
    assert json.loads(trusted_events[0].detail)["client"] == "203.0.113.9"
    assert json.loads(untrusted_events[0].detail)["client"] == "127.0.0.1"


# -- slow clients -------------------------------------------------------------------


def _channel(site: KilolockSite) -> tuple[Any, StringTransport]:
    """A connection to C{site} over a string transport."""
    channel = site.buildProtocol(IPv4Address("TCP", "127.0.0.1", 40000))
    transport = StringTransport()
    channel.makeConnection(transport)
    return channel, transport


_SLOW_HEAD = b"POST /v1/states/slow HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n"


@pytest.mark.parametrize("first", [b"P", _SLOW_HEAD], ids=["trickled-head", "trickled-body"])
def test_the_request_deadline_runs_from_the_first_byte_on_the_sites_clock(
        first: bytes) -> None:
    """--request-timeout counts from a request's first byte: bytes trickling in
    do not extend it, and the connection is aborted exactly when it passes."""
    clock = Clock()
    channel, transport = _channel(KilolockSite(notFound(), request_timeout=1.0, reactor=clock))
    channel.dataReceived(first)
    for _ in range(3):
        clock.advance(0.25)
        channel.dataReceived(b"x")
    tick = 2.0**-20  # exact in binary, like every step here
    clock.advance(0.25 - tick)
    assert not transport.disconnected
    clock.advance(tick)
    assert transport.disconnected


def test_a_request_received_in_time_is_not_cut() -> None:
    """The deadline ends with the request's last byte: a request answered
    in time keeps its connection however long it then stays open."""
    clock = Clock()
    channel, transport = _channel(KilolockSite(notFound(), request_timeout=1.0, reactor=clock))
    channel.dataReceived(b"GET /nowhere HTTP/1.1\r\nHost: x\r\n\r\n")
    assert transport.value().startswith(b"HTTP/1.1 404 ")
    clock.advance(3600)
    assert not transport.disconnected


def _trickle(port: int, seconds: float, head: bool) -> bool:
    """Send a request one byte per 0.25 s (from its head, or after a whole
    head) for at most C{seconds}; whether the server hung up first."""
    payload = b"POST /v1/states/slow HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n"
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=seconds) as sock:
        sock.sendall(b"P" if head else payload)
        try:
            while time.monotonic() - started < seconds:
                sock.sendall(b"x")
                time.sleep(0.25)  # the client's pace
        except OSError:
            return True
        try:
            return sock.recv(1) == b""
        except OSError:
            return True


@pytest.mark.parametrize("head", [True, False], ids=["trickled-head", "trickled-body"])
@pytest_twisted.ensureDeferred
async def test_a_trickling_client_is_cut_after_the_request_timeout(head: bool) -> None:
    """A client sending a byte at a time over a real socket is disconnected
    by the server (it would trickle for 10 s) and nothing is stored."""
    from twisted.internet.threads import deferToThread

    running = start_server(request_timeout=1.0)
    try:
        hung_up = await deferToThread(_trickle, running.port, 10.0, head)
    finally:
        await running.service.stopService()
    assert hung_up
    assert await running.store.list_states(DEFAULT_TENANT) == []


# -- graceful shutdown --------------------------------------------------------------


class _SlowStore(MemoryStateStore):
    """Holds every write until the test releases it."""

    def __init__(self) -> None:
        super().__init__()
        self.release: Deferred[None] = Deferred()
        self.stopped = False

    def write_state(self, *args: Any, **kwargs: Any) -> Any:
        held = Deferred()
        self.release.addCallback(lambda _: super(_SlowStore, self).write_state(
            *args, **kwargs).chainDeferred(held))
        return held

    def stop(self) -> Deferred[None]:
        self.stopped = True
        return super().stop()


def _stopping_on_a_clock(
        grace: float) -> tuple[Any, _SlowStore, Any, StringTransport, list[None]]:
    """A server on a memory reactor with a write in flight (held by the
    store), being stopped: (service, store, channel, transport, stopped),
    C{stopped} holding one item once the stop has finished."""
    store = _SlowStore()
    reactor = MemoryReactorClock()
    service = make_service_from_settings(
        Settings(listen="tcp:0:interface=127.0.0.1", store="memory", shutdown_grace=grace),
        reactor, store=store)
    service.startService()
    channel, transport = _channel(service.site)
    body = state_body(1)
    channel.dataReceived(b"POST /v1/states/inflight HTTP/1.1\r\nHost: x\r\n"
                         b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    assert service.site.in_flight == 1
    stopped: list[None] = []
    service.stopService().addCallback(stopped.append)
    return service, store, channel, transport, stopped


def test_shutdown_waits_for_the_in_flight_write_then_closes_connections_then_the_store(
        ) -> None:
    """Stopping waits on the service's clock while a write is in flight; once
    it is answered the connections are closed, and only then the store."""
    service, store, channel, transport, stopped = _stopping_on_a_clock(grace=10.0)
    service.clock.advance(9.9)
    assert (stopped, store.stopped, transport.disconnecting) == ([], False, False)
    store.release.callback(None)
    assert transport.value().startswith(b"HTTP/1.1 200 ")
    service.clock.advance(0.05)
    assert transport.disconnecting and not store.stopped
    channel.connectionLost(Failure(ConnectionDone()))
    service.clock.advance(0.05)
    assert store.stopped
    assert stopped == [None]


def test_shutdown_stops_waiting_when_the_grace_period_ends() -> None:
    """A write still in flight when --shutdown-grace has passed on the
    service's clock no longer holds the shutdown: connections close."""
    service, store, _, transport, stopped = _stopping_on_a_clock(grace=10.0)
    service.clock.advance(9.95)
    assert not transport.disconnecting
    service.clock.advance(0.05)
    assert transport.disconnecting and not store.stopped
    assert stopped == []


@pytest_twisted.ensureDeferred
async def test_shutdown_stops_accepting_then_finishes_in_flight_writes() -> None:
    """On stop: no new connections, the in-flight write completes and is
    acknowledged, and only then is the store closed."""
    store = _SlowStore()
    running = start_server(store=store, shutdown_grace=10.0)
    posting = treq.post(running.url + "/v1/states/inflight", data=state_body(1))
    await eventually(lambda: running.service.site.in_flight == 1, "the write in flight")
    stopping = running.service.stopService()
    await eventually(lambda: not listening(running.port), "the listener to close")
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", running.port), timeout=2).close()
    assert not store.stopped
    store.release.callback(None)
    response = await posting
    assert response.code == 200
    await response.content()
    await stopping
    assert store.stopped
    assert await store.read_current(
        __import__("kilolock.core.model", fromlist=["StateKey"]).StateKey(DEFAULT_TENANT,
                                                                     "inflight")) == state_body(1)


def test_metrics_report_database_pool_health(kilolock_server: Any,
                                             server_store: Any) -> None:
    """On PostgreSQL /metrics reports the pool's live and total connections
    (all of its default size) and database_up=1; the memory store has no pool
    to report."""
    reply = kilolock_server.request("GET", "/metrics")
    assert reply.status == 200
    lines = dict(line.rsplit(" ", 1) for line in reply.body.decode().splitlines()
                 if line and not line.startswith("#"))
    assert float(lines["kilolock_database_up"]) == 1
    if "postgres" in server_store.args:
        from kilolock.store.postgres.runner import DEFAULT_POOL_SIZE

        alive = float(lines['kilolock_database_connections{state="alive"}'])
        total = float(lines['kilolock_database_connections{state="total"}'])
        # The pool opens every connection when it starts; none has died since.
        assert alive == total == DEFAULT_POOL_SIZE
    else:
        assert not any(key.startswith("kilolock_database_connections{") for key in lines)
