"""The large-body budgets, functionally (small limits, the real tree over a
memory store, connections over string transports, the site on a clock):
past the body budget a large request is answered 503 with Retry-After
before its body is read, and succeeds once an upload has finished; within
it, complete bodies wait their turn for the parse budget.  (What the budgets
do to memory is measured in bench/concurrent_uploads.py.)"""

from __future__ import annotations

import json
import math
from typing import Any

from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred
from twisted.internet.error import ConnectionLost
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.python.failure import Failure

from kilolock.auth.portal import OpenChecker, build_portal
from kilolock.core.model import DEFAULT_TENANT, StateKey
from kilolock.server.metrics import Metrics
from kilolock.store.memory.store import MemoryStateStore
from kilolock.web.admission import INITIAL_BYTES_PER_SECOND, UploadBudget
from kilolock.web.edge import EdgeLimits
from kilolock.web.site import KilolockSite, build_root
from tests.support.stub_client import state_body

#: Every upload's size; bodies of 1000 bytes and more are large here.
SIZE = 1200
LARGE = 1000


def big_state(serial: int) -> bytes:
    """A state of exactly L{SIZE} bytes."""
    body = state_body(serial, lineage=f"lineage-{serial}")
    return body[:-2] + b" " * (SIZE - len(body)) + body[-2:]


class HeldStore(MemoryStateStore):
    """Holds each write until the test lets it through (L{let_through})."""

    def __init__(self) -> None:
        super().__init__()
        self.held: list[Deferred[None]] = []

    def write_state(self, *args: Any, **kwargs: Any) -> Any:
        gate: Deferred[None] = Deferred()
        self.held.append(gate)
        return gate.addCallback(lambda _: super(HeldStore, self).write_state(*args, **kwargs))

    def let_through(self, index: int) -> None:
        self.held[index].callback(None)


class Lane:
    """The state lane's site over C{store}, on a clock."""

    def __init__(self, edge: EdgeLimits, store: MemoryStateStore | None = None) -> None:
        self.clock = Clock()
        self.store = store if store is not None else MemoryStateStore()
        self.metrics = Metrics.create()
        self.site = KilolockSite(build_root(self.store, build_portal(OpenChecker()), self.clock),
                                 reactor=self.clock, edge=edge, metrics=self.metrics,
                                 timeout=None)

    def connect(self) -> tuple[Any, StringTransport]:
        peer = IPv4Address("TCP", "127.0.0.1", 40000)
        channel = self.site.buildProtocol(peer)
        transport = StringTransport(peerAddress=peer)
        channel.makeConnection(transport)
        return channel, transport

    def stored(self, name: str) -> bytes | None:
        result: list[bytes | None] = []
        self.store.read_current(StateKey(DEFAULT_TENANT, name)).addCallback(result.append)
        return result[0]

    @property
    def budget(self) -> UploadBudget:
        return self.site.budget


def post_head(name: str, length: int | None = SIZE, extra: bytes = b"") -> bytes:
    framing = (b"Transfer-Encoding: chunked\r\n" if length is None
               else b"Content-Length: %d\r\n" % length)
    return (b"POST /v1/states/" + name.encode() + b" HTTP/1.1\r\nHost: x\r\n"
            + framing + extra + b"\r\n")


def status_of(transport: StringTransport) -> int:
    return int(transport.value().split(b" ", 2)[1]) if transport.value() else 0


def answer(transport: StringTransport) -> tuple[int, dict[bytes, bytes], Any]:
    head, _, body = transport.value().partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    headers = {name.lower(): value.strip()
               for name, _, value in (line.partition(b":") for line in lines[1:])}
    return int(lines[0].split(b" ")[1]), headers, json.loads(body) if body else None


def test_past_the_body_budget_a_large_request_gets_503_before_its_body_is_read() -> None:
    """With room for two uploads, the third is answered 503 + Retry-After
    as soon as its head has arrived (no body byte sent yet); the bytes it
    sends anyway are dropped and nothing is stored.  Once an upload has
    finished, the same request is admitted and its state stored exactly."""
    lane = Lane(EdgeLimits(large_body_bytes=LARGE, body_budget_bytes=2 * SIZE,
                           parse_budget_bytes=0))
    first, second, third = big_state(1), big_state(2), big_state(3)
    a, a_wire = lane.connect()
    a.dataReceived(post_head("a") + first[:SIZE // 2])
    b, b_wire = lane.connect()
    b.dataReceived(post_head("b") + second[:SIZE // 2])
    assert (a_wire.value(), b_wire.value()) == (b"", b"")
    c, c_wire = lane.connect()
    c.dataReceived(post_head("c"))
    status, headers, body = answer(c_wire)
    assert (status, headers[b"retry-after"], headers[b"connection"]) == (503, b"1", b"close")
    assert body["error"]["code"] == "uploads_over_budget"
    c.dataReceived(third[:100])
    assert lane.site.receiving == 2  # a refused body is not a request arriving
    c.dataReceived(third[100:])
    assert c_wire.disconnecting and answer(c_wire)[0] == 503
    assert lane.stored("c") is None
    a.dataReceived(first[SIZE // 2:])
    assert status_of(a_wire) == 200
    retry, retry_wire = lane.connect()
    retry.dataReceived(post_head("c") + third)
    assert status_of(retry_wire) == 200
    assert lane.stored("c") == third
    b.dataReceived(second[SIZE // 2:])
    assert status_of(b_wire) == 200
    assert lane.budget.admitted == []
    assert lane.metrics.registry.get_sample_value(
        "kilolock_http_refusals_total",
        {"listener": "state", "reason": "uploads_over_budget"}) == 1.0


def test_small_bodies_are_never_refused_for_the_budget() -> None:
    """Bodies under KL_LARGE_BODY_BYTES do not count: a full budget still
    lets them in."""
    lane = Lane(EdgeLimits(large_body_bytes=LARGE, body_budget_bytes=SIZE))
    a, _ = lane.connect()
    a.dataReceived(post_head("a") + big_state(1)[:10])
    small = state_body(5)
    assert len(small) < LARGE
    b, b_wire = lane.connect()
    b.dataReceived(post_head("b", len(small)) + small)
    assert status_of(b_wire) == 200


def chunk(data: bytes) -> bytes:
    return b"%x\r\n" % len(data) + data + b"\r\n"


def test_a_chunked_body_is_admitted_at_the_threshold_and_refused_past_the_budget() -> None:
    """A chunked body has no length to decide on: it is admitted when its
    running count reaches KL_LARGE_BODY_BYTES, and refused (503) when it
    grows past what the budget has left."""
    lane = Lane(EdgeLimits(large_body_bytes=LARGE, body_budget_bytes=2500))
    a, _ = lane.connect()
    a.dataReceived(post_head("a") + big_state(1)[:100])
    b, b_wire = lane.connect()
    b.dataReceived(post_head("b", None) + chunk(b" " * 900))
    assert [admission.size for admission in lane.budget.admitted] == [SIZE]
    b.dataReceived(chunk(b" " * 200))
    assert [admission.size for admission in lane.budget.admitted] == [SIZE, 1100]
    assert b_wire.value() == b""
    b.dataReceived(chunk(b" " * 300))
    assert answer(b_wire)[0] == 503
    assert [admission.size for admission in lane.budget.admitted] == [SIZE]


def test_expect_continue_past_the_budget_gets_the_503_alone() -> None:
    """A refused C{Expect: 100-continue} request is not also told to
    continue."""
    lane = Lane(EdgeLimits(large_body_bytes=LARGE, body_budget_bytes=SIZE))
    a, _ = lane.connect()
    a.dataReceived(post_head("a") + b"{")
    b, b_wire = lane.connect()
    b.dataReceived(post_head("b", extra=b"Expect: 100-continue\r\n"))
    assert b_wire.value().startswith(b"HTTP/1.1 503 ")
    assert b"100 Continue" not in b_wire.value()


def test_complete_bodies_wait_their_turn_for_the_parse_budget() -> None:
    """With a parse budget of one upload, a second complete body is not
    processed (nothing reaches the store) until the first is answered;
    then it is, and both states are stored."""
    store = HeldStore()
    lane = Lane(EdgeLimits(large_body_bytes=LARGE, body_budget_bytes=0,
                           parse_budget_bytes=SIZE), store)
    first, second = big_state(1), big_state(2)
    a, a_wire = lane.connect()
    a.dataReceived(post_head("a") + first)
    b, b_wire = lane.connect()
    b.dataReceived(post_head("b") + second)
    assert len(store.held) == 1
    assert lane.metrics.registry.get_sample_value("kilolock_large_bodies_waiting") == 1.0
    assert lane.metrics.registry.get_sample_value(
        "kilolock_large_body_bytes", {"stage": "processing"}) == SIZE
    store.let_through(0)
    assert status_of(a_wire) == 200
    assert len(store.held) == 2 and b_wire.value() == b""
    store.let_through(1)
    assert status_of(b_wire) == 200
    assert (lane.stored("a"), lane.stored("b")) == (first, second)
    assert lane.metrics.registry.get_sample_value(
        "kilolock_large_body_bytes", {"stage": "admitted"}) == 0


def test_a_client_leaving_while_it_waits_gives_up_its_turn() -> None:
    """A waiting request whose client disconnects leaves both budgets and
    is never processed; the next one is."""
    store = HeldStore()
    lane = Lane(EdgeLimits(large_body_bytes=LARGE, body_budget_bytes=0,
                           parse_budget_bytes=SIZE), store)
    a, a_wire = lane.connect()
    a.dataReceived(post_head("a") + big_state(1))
    b, _ = lane.connect()
    b.dataReceived(post_head("b") + big_state(2))
    c, c_wire = lane.connect()
    c.dataReceived(post_head("c") + big_state(3))
    b.connectionLost(Failure(ConnectionLost()))
    assert [admission.size for admission in lane.budget.admitted] == [SIZE, SIZE]
    store.let_through(0)
    assert status_of(a_wire) == 200
    store.let_through(1)
    assert status_of(c_wire) == 200
    assert len(store.held) == 2
    assert (lane.stored("b"), lane.stored("c")) == (None, big_state(3))


# -- the budget itself ------------------------------------------------------------------


def test_one_large_body_is_admitted_whatever_its_size() -> None:
    """A body larger than both budgets is admitted and processed when no
    other is, so it can still be uploaded; a second one then waits."""
    budget = UploadBudget(LARGE, 100, 100, Clock())
    only = budget.admit(5000)
    assert only is not None and budget.process(only).called
    assert budget.admit(5000) is None


def test_retry_after_is_the_time_the_bodies_ahead_need_to_leave() -> None:
    """Retry-After: the time the bodies ahead of a refused one need to
    leave -- the admitted ones, then those refused before it and not yet
    due back -- at the processing speed measured (the first upload's, then
    averaged), at least 1 s and at most 60 s.  Clients refused together are
    so told to come back one after the other."""
    clock = Clock()
    budget = UploadBudget(LARGE, 10_000_000, 0, clock)
    first = budget.admit(8_000_000)
    assert first is not None
    budget.process(first)
    clock.advance(4.0)
    budget.release(first)
    assert budget.seconds_per_byte == 0.5e-6  # 2 MB/s
    assert budget.admit(5_000_000) is not None and budget.admit(5_000_000) is not None
    assert [budget.refuse(5_000_000) for _ in range(3)] == [3, 5, 8]  # 5, 10, 15 MB ahead
    clock.advance(3.0)  # the first refused body is due back: no longer ahead
    assert budget.refuse(5_000_000) == 8
    second = budget.admitted[0]
    budget.process(second)
    clock.advance(500.0)  # 10 kB/s: averaged with 2 MB/s, about 20 kB/s
    budget.release(second)
    assert budget.refuse(6_000_000) == 60  # 5 MB ahead


def test_a_body_larger_than_the_budget_waits_for_everything_ahead() -> None:
    """One large body is admitted when none is, so a body larger than the
    whole budget is told to come back when everything ahead has left."""
    budget = UploadBudget(LARGE, 10_000_000, 0, Clock())
    assert budget.admit(4_000_000) is not None
    assert budget.refuse(10**12) == math.ceil(4_000_000 / INITIAL_BYTES_PER_SECOND)


def test_retry_after_heeds_an_upload_slower_than_those_measured() -> None:
    """An upload still being processed after longer than the measured
    speed allows sets the pace: its time so far per byte is a lower bound."""
    clock = Clock()
    budget = UploadBudget(LARGE, 10_000_000, 0, clock)
    slow = budget.admit(8_000_000)
    assert slow is not None
    budget.process(slow)
    clock.advance(40.0)  # 5 us per byte so far, and not done
    assert budget.refuse(4_000_000) == 40


def test_memory_is_given_back_when_the_last_large_upload_is_done() -> None:
    """C{on_idle} (malloc_trim in a thread) runs once no large body is
    being processed any more, not while one still is."""
    idle: list[None] = []
    budget = UploadBudget(LARGE, 0, 0, Clock(), on_idle=lambda: idle.append(None))
    first, second = budget.admit(SIZE), budget.admit(SIZE)
    assert first is not None and second is not None
    budget.process(first)
    budget.process(second)
    budget.release(first)
    assert idle == []
    budget.release(second)
    assert idle == [None]
