"""`kl` lane discovery (ADR 0018 rules 1 and 4) against a fake server.

The fake is a small threaded HTTP server whose every route is scripted: a
discovery document (possibly advertising percent-encoded paths), lanes that
answer, hang, fail or answer HTML.  It records when each request arrived, so
a test can see that the two lanes are probed concurrently.
"""

from __future__ import annotations

import http.server
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kl_runner import KlResult, kl_environment, run_kl

from kilolock.cli import EXIT_PROTOCOL, EXIT_UNAVAILABLE, encoded_paths
from kilolock.web.discovery import discovery_document

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
        self.server.arrivals.append((path, time.monotonic()))
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
        self.arrivals: list[tuple[str, float]] = []
        self.released = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def hang(self, handler: FakeHandler) -> None:
        return None

    def arrived(self, path: str) -> list[float]:
        return [at for seen, at in self.arrivals if seen == path]


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
    assert {seen for seen, _ in fake.arrivals} == {"/.well-known/kilolock"}


def test_encoded_paths_compares_the_escaped_form() -> None:
    """Plain paths pass; '%', spaces and other escapable characters do not."""
    assert encoded_paths(discovery_document("open")) == []
    assert encoded_paths({"lanes": [{"basePath": "/v1/a b", "statesPath": "/ok",
                                     "x": {"unlockPath": "/v1/%41"}}]}) == ["/v1/a b",
                                                                            "/v1/%41"]


def test_a_hung_native_lane_fails_only_native_commands(fake: FakeServer,
                                                       tmp_path: Path) -> None:
    """With the native lane hanging, HTTP-lane commands answer at once and
    native commands fail with the native lane's error after the discovery
    deadline, not the 60 s command timeout."""
    fake.routes["/v1/native"] = fake.hang
    pulled = kl(fake, tmp_path, "state", "pull", "app")
    assert pulled.check().raw == STATE
    assert pulled.seconds < 1.0
    listed = kl(fake, tmp_path, "states")
    assert listed.code == EXIT_UNAVAILABLE
    assert "the native lane (/v1/native) is unavailable" in listed.err
    assert "discovery deadline 1 s" in listed.err
    assert 0.9 < listed.seconds < 3.0


def test_a_hung_http_lane_fails_only_http_lane_commands(fake: FakeServer,
                                                        tmp_path: Path) -> None:
    """With the HTTP lane hanging, native commands work; `state pull` fails
    with the HTTP lane's own error within the deadline."""
    fake.routes["/v1/states"] = fake.hang
    assert kl(fake, tmp_path, "states").check().code == 0
    pulled = kl(fake, tmp_path, "state", "pull", "app")
    assert pulled.code == EXIT_UNAVAILABLE
    assert "the HTTP lane (/v1/states) is unavailable" in pulled.err
    assert pulled.seconds < 3.0


def test_lanes_are_probed_concurrently(fake: FakeServer, tmp_path: Path) -> None:
    """Both probes start together: two slow lanes cost one delay, not two."""
    def slow(reply: Route) -> Route:
        def route(handler: FakeHandler) -> tuple[int, str, bytes] | None:
            time.sleep(0.8)
            return reply(handler)
        return route

    fake.routes["/v1/states"] = slow(fake.routes["/v1/states"])
    fake.routes["/v1/native"] = slow(fake.routes["/v1/native"])
    result = kl(fake, tmp_path, "states", discovery="3").check()
    (http_probe,) = fake.arrived("/v1/states")
    (native_probe,) = fake.arrived("/v1/native")
    assert abs(http_probe - native_probe) < 0.3
    assert result.seconds < 2.4  # one 0.8 s wait for both probes, plus the command


def test_a_hung_discovery_document_fails_within_the_deadline(fake: FakeServer,
                                                             tmp_path: Path) -> None:
    """If /.well-known/kilolock itself hangs, every command fails (exit 5)
    after the discovery deadline, saying so."""
    fake.routes["/.well-known/kilolock"] = fake.hang
    result = kl(fake, tmp_path, "state", "pull", "app", discovery="0.5")
    assert result.code == EXIT_UNAVAILABLE
    assert "cannot reach the server" in result.err and "deadline 0.5 s" in result.err
    assert result.seconds < 2.0


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
