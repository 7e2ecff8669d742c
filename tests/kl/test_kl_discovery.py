"""`kl` lane discovery (docs/kl.md, "Lane discovery"): against a fake
server, then the discovery rules themselves on a scripted client.

The fake is a small threaded HTTP server whose every route is scripted: a
discovery document (possibly advertising percent-encoded paths), lanes that
answer, hang, fail or answer HTML.  It records which paths were requested.
The timing rules (a command waits only for its own lane, the lanes are probed
concurrently, every request of discovery shares one deadline) are pinned on
L{Discovery} with a scripted client and a L{Clock}: what is asserted is which
requests were made, with which timeouts, and what was still in flight.
"""

from __future__ import annotations

import http.server
import json
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from twisted.internet.task import Clock

from kilolock.kl.client import Answer, Unreachable
from kilolock.kl.discovery import HTTP_LANE, NATIVE_LANE, Discovery, encoded_paths
from kilolock.kl.exits import EXIT_PROTOCOL, EXIT_UNAVAILABLE, KlError
from kilolock.web.ops.discovery import discovery_document
from tests.support.kl_runner import KlResult, kl_environment, run_kl

STATE = b'{"version": 4, "serial": 1, "lineage": "l", "resources": [], "outputs": {}}\n'
#: How long a hung route hangs (unless the test ends first).
HANG_SECONDS = 30.0

Route = Callable[["FakeHandler"], tuple[int, str, bytes] | None]


def answer(status: int, document: Any, content_type: str = "application/json") -> Route:
    body = document if isinstance(document, bytes) else json.dumps(document).encode()
    return lambda handler: (status, content_type, body)


class FakeHandler(http.server.BaseHTTPRequestHandler):
    server: FakeServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        self.server.arrivals.append(path)
        route = self.server.routes.get(path)
        if route is None:
            reply: tuple[int, str, bytes] | None = (404, "application/json",
                                                    b'{"error": {"code": "not_found",'
                                                    b' "message": "no such route"}}')
        else:
            reply = route(self)
        if reply is None:  # hang: hold the connection until the test ends
            self.server.released.wait(HANG_SECONDS)
            return
        status, content_type, body = reply
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class FakeServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), FakeHandler)
        self.routes: dict[str, Route] = {}
        self.arrivals: list[str] = []
        self.released = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def hang(self, handler: FakeHandler) -> None:
        return None


@pytest.fixture
def fake() -> Iterator[FakeServer]:
    """A fake Kilolock whose routes answer like a healthy server until changed."""
    server = FakeServer()
    server.routes.update({
        "/.well-known/kilolock": answer(200, discovery_document("open")),
        "/v1/states": answer(404, {"error": {"code": "not_found", "message": "name a state"}}),
        "/v1/states/app": answer(200, STATE),
        "/v1/native": answer(200, {"lane": "kilolock-native", "version": "v1",
                                   "basePath": "/v1/native"}),
        "/v1/native/states": answer(200, {"states": []}),
    })
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.released.set()
    server.shutdown()
    server.server_close()


def kl(fake: FakeServer, tmp_path: Path, *argv: str, discovery: str = "1") -> KlResult:
    env = kl_environment(fake.url, home=tmp_path / "home")
    return run_kl("--discovery-timeout", discovery, "--timeout", "60", *argv, env=env)


def test_healthy_fake_serves_both_lanes(fake: FakeServer, tmp_path: Path) -> None:
    """Against the healthy fake, a native command and an HTTP-lane command work."""
    assert kl(fake, tmp_path, "state", "pull", "app").check().raw == STATE
    assert kl(fake, tmp_path, "states").check().err == "kl: no states yet\n"


@pytest.mark.parametrize("lane_key, path", [
    ("basePath", "/v1/st%61tes"),
    ("basePath", "/v1/native%2Fv2"),
    ("unlockPath", "/v1/state%2Dunlock"),
])
def test_a_document_advertising_encoded_paths_is_rejected(
        fake: FakeServer, tmp_path: Path, lane_key: str, path: str) -> None:
    """A discovery document with a percent-encoded path (its escaped form
    differs) is rejected for every command, and no lane is contacted."""
    document = discovery_document("open")
    lane = document["lanes"][1 if "native" in path else 0]
    lane[lane_key] = path
    fake.routes["/.well-known/kilolock"] = answer(200, document)
    for argv in (("states",), ("state", "pull", "app")):
        result = kl(fake, tmp_path, *argv)
        assert result.code == EXIT_PROTOCOL
        assert "percent-encoded paths" in result.err and path in result.err
    assert set(fake.arrivals) == {"/.well-known/kilolock"}


def test_encoded_paths_compares_the_escaped_form() -> None:
    """Plain paths pass; '%', spaces and other escapable characters do not."""
    assert encoded_paths(discovery_document("open")) == []
    assert encoded_paths({"lanes": [{"basePath": "/v1/a b", "statesPath": "/ok",
                                     "x": {"unlockPath": "/v1/%41"}}]}) == ["/v1/a b",
                                                                            "/v1/%41"]


def timed_out_within(err: str, failure: str, deadline: str) -> float:
    """The timeout kl's request ran out of, from its one-line error: that
    C{failure} had no answer within it, under the discovery C{deadline}."""
    matched = re.fullmatch(rf"kl: {re.escape(failure)}: no answer within (\S+) s"
                           rf" \({re.escape(deadline)} s\)\n", err)
    assert matched, err
    return float(matched.group(1))


def test_a_hung_native_lane_fails_only_native_commands(fake: FakeServer,
                                                       tmp_path: Path) -> None:
    """With the native lane hanging, HTTP-lane commands work and native
    commands fail with the native lane's error: its probe timed out within
    the discovery deadline, not the 60 s command timeout (that the HTTP-lane
    command does not wait for the native probe at all is pinned on
    L{Discovery} below)."""
    fake.routes["/v1/native"] = fake.hang
    assert kl(fake, tmp_path, "state", "pull", "app").check().raw == STATE
    listed = kl(fake, tmp_path, "states")
    assert listed.code == EXIT_UNAVAILABLE
    assert timed_out_within(listed.err, "the native lane (/v1/native) is unavailable",
                            "discovery deadline 1") <= 1.0


def test_a_hung_http_lane_fails_only_http_lane_commands(fake: FakeServer,
                                                        tmp_path: Path) -> None:
    """With the HTTP lane hanging, native commands work; `state pull` fails
    with the HTTP lane's own error, bounded by the discovery deadline."""
    fake.routes["/v1/states"] = fake.hang
    assert kl(fake, tmp_path, "states").check().code == 0
    pulled = kl(fake, tmp_path, "state", "pull", "app")
    assert pulled.code == EXIT_UNAVAILABLE
    assert timed_out_within(pulled.err, "the HTTP lane (/v1/states) is unavailable",
                            "discovery deadline 1") <= 1.0


def test_a_hung_discovery_document_fails_within_the_deadline(fake: FakeServer,
                                                             tmp_path: Path) -> None:
    """If /.well-known/kilolock itself hangs, every command fails (exit 5)
    at the discovery deadline, saying so; no lane is contacted."""
    fake.routes["/.well-known/kilolock"] = fake.hang
    result = kl(fake, tmp_path, "state", "pull", "app", discovery="0.5")
    assert result.code == EXIT_UNAVAILABLE
    assert timed_out_within(result.err, f"cannot reach the server at {fake.url}",
                            "discovery, deadline 0.5") <= 0.5
    assert set(fake.arrivals) == {"/.well-known/kilolock"}


def test_a_lane_misrouted_by_a_proxy_is_reported(fake: FakeServer, tmp_path: Path) -> None:
    """A lane answering HTML (a proxy's own 404 page) is not Kilolock: exit 6
    for its commands only; a lane absent from the document is 'not offered'."""
    fake.routes["/v1/native"] = answer(404, b"<html>nginx</html>", "text/html")
    misrouted = kl(fake, tmp_path, "state", "history", "app")
    assert misrouted.code == EXIT_PROTOCOL
    assert "the native lane (/v1/native) answered 404 (text/html)" in misrouted.err
    assert kl(fake, tmp_path, "state", "pull", "app").code == 0
    document = discovery_document("open")
    document["lanes"] = document["lanes"][:1]
    fake.routes["/.well-known/kilolock"] = answer(200, document)
    absent = kl(fake, tmp_path, "states")
    assert absent.code == EXIT_PROTOCOL and "kilolock-native) is not offered" in absent.err


def test_a_failing_lane_is_unavailable_and_a_server_without_discovery_is_refused(
        fake: FakeServer, tmp_path: Path) -> None:
    """A lane answering 5xx is unavailable (exit 5); a server with no discovery
    document is not taken for Kilolock (exit 6)."""
    fake.routes["/v1/native"] = answer(502, b"bad gateway", "text/plain")
    failing = kl(fake, tmp_path, "states")
    assert failing.code == EXIT_UNAVAILABLE and "answered 502" in failing.err
    del fake.routes["/.well-known/kilolock"]
    missing = kl(fake, tmp_path, "states")
    assert missing.code == EXIT_PROTOCOL and "a Kilolock server?" in missing.err


# -- the discovery rules themselves, on a scripted client and a Clock ----------------


#: How long a scripted exchange waits for the test to let it go before it
#: fails the test (a safety net: a passing test never waits for it).
SAFETY_SECONDS = 30.0

Script = Callable[[float], Answer]


def scripted_answer(document: Any) -> Script:
    body = json.dumps(document).encode()
    return lambda timeout: Answer(200, {"content-type": "application/json"}, body)


def times_out(timeout: float) -> Answer:
    """What the HTTP client raises when nothing answers within C{timeout}."""
    raise Unreachable(f"no answer within {timeout:g} s")


class ScriptedClient:
    """A discovery client answering from a script per path; it records each
    request with the timeout it was given.  A path can be held: its exchange
    waits until the test lets it go."""

    base_url = "http://kilolock.test"

    def __init__(self, script: dict[str, Script]) -> None:
        self.script = script
        self.requests: list[tuple[str, float | None]] = []
        self.arrived: dict[str, threading.Event] = {}
        self.released: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def hold(self, path: str) -> None:
        self.arrived[path] = threading.Event()
        self.released[path] = threading.Event()

    def request(self, method: str, path: str, *, timeout: float | None = None) -> Answer:
        assert method == "GET" and timeout is not None
        with self._lock:
            self.requests.append((path, timeout))
        if path in self.released:
            self.arrived[path].set()
            assert self.released[path].wait(SAFETY_SECONDS), f"{path} was never let go"
        return self.script[path](timeout)

    def wait_arrived(self, path: str) -> None:
        assert self.arrived[path].wait(SAFETY_SECONDS), f"{path} was never requested"


def healthy_script(clock: Clock, document_seconds: float = 0.0) -> dict[str, Script]:
    """A server whose discovery document takes C{document_seconds} on the
    clock to arrive, and whose lanes answer like Kilolock's."""
    def document(timeout: float) -> Answer:
        clock.advance(document_seconds)
        return scripted_answer(discovery_document("open"))(timeout)

    return {"/.well-known/kilolock": document,
            "/v1/states": scripted_answer({"error": {"code": "not_found"}}),
            "/v1/native": scripted_answer({"lane": NATIVE_LANE})}


def test_a_command_waits_only_for_its_own_lane() -> None:
    """While the native probe is still waiting for its answer, the HTTP lane
    is already known; the native lane then fails with its own error, its
    probe having been given what was left of the discovery deadline (all of
    it: no time passed on the clock).  The deadline is longer than a hold
    may last, so a command that waited for the other lane would outlast the
    hold and fail the test."""
    deadline = 2 * SAFETY_SECONDS
    clock = Clock()
    client = ScriptedClient(healthy_script(clock))
    client.hold("/v1/native")
    client.script["/v1/native"] = times_out
    discovery = Discovery(client, deadline, clock=clock.seconds)

    assert discovery.lane(HTTP_LANE) == "/v1/states"
    client.wait_arrived("/v1/native")
    assert not discovery.lanes[NATIVE_LANE].finished.is_set()
    client.released["/v1/native"].set()
    with pytest.raises(KlError) as failed:
        discovery.lane(NATIVE_LANE)
    assert (failed.value.code, failed.value.message) == (
        EXIT_UNAVAILABLE, "the native lane (/v1/native) is unavailable: no answer within 60 s"
                          " (discovery deadline 60 s)")
    assert sorted(client.requests) == [("/.well-known/kilolock", deadline),
                                       ("/v1/native", deadline), ("/v1/states", deadline)]


def test_lanes_are_probed_concurrently_under_one_deadline() -> None:
    """Both probes are in flight at once (each waits for the other to have
    arrived before it answers), each lane is probed once, and both share the
    one discovery deadline: after the document took 0.25 s of 3 s, each probe
    gets 2.75 s."""
    clock = Clock()
    client = ScriptedClient(healthy_script(clock, document_seconds=0.25))
    both_in_flight = threading.Barrier(2, timeout=SAFETY_SECONDS)

    def meeting(script: Script) -> Script:
        def answer(timeout: float) -> Answer:
            both_in_flight.wait()
            return script(timeout)
        return answer

    client.script["/v1/states"] = meeting(client.script["/v1/states"])
    client.script["/v1/native"] = meeting(client.script["/v1/native"])
    discovery = Discovery(client, 3.0, clock=clock.seconds)
    assert (discovery.lane(NATIVE_LANE), discovery.lane(HTTP_LANE)) == ("/v1/native",
                                                                         "/v1/states")
    assert sorted(client.requests) == [("/.well-known/kilolock", 3.0), ("/v1/native", 2.75),
                                       ("/v1/states", 2.75)]


def test_an_unreachable_discovery_document_fails_every_lane() -> None:
    """The document is fetched with the whole deadline; when it does not
    arrive, every lane fails with that one error and no lane is probed."""
    clock = Clock()
    client = ScriptedClient({"/.well-known/kilolock": times_out})
    discovery = Discovery(client, 0.5, clock=clock.seconds)
    expected = ("cannot reach the server at http://kilolock.test: no answer within 0.5 s"
                " (discovery, deadline 0.5 s)")
    for lane in (HTTP_LANE, NATIVE_LANE):
        with pytest.raises(KlError) as failed:
            discovery.lane(lane)
        assert (failed.value.code, failed.value.message) == (EXIT_UNAVAILABLE, expected)
    assert client.requests == [("/.well-known/kilolock", 0.5)]
