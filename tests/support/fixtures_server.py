"""Fixtures that start real Kilolock servers (a subprocess on a loopback socket).

The server runs as ``python -m twisted kilolock ...`` with the interpreter of
this test run (so it works in any virtualenv), listens on ``tcp:0`` on
127.0.0.1 and the port is read from its own log line
("KilolockSite starting on PORT"): no free-port guessing, no race between
parallel (xdist) workers.  A server may listen on another endpoint
(``factory(listen="ssl:0:...", tls=context)``): with an C{ssl.SSLContext}
the fixture's own requests use HTTPS.  Readiness is ``GET /healthz`` answering 200.  The
server's log is a file in the test's tmp_path, attached to the report of a
failing test.

Stores: ``SERVER_STORES`` maps a store name to a function that returns the
extra command-line arguments and environment for it.  Every server fixture is
parametrized over that mapping, so a store variant is one entry, e.g.::

    "postgres": StoreVariant(lambda request: StoreLaunch(
        ("--store", "postgres", "--database", request.getfixturevalue("postgres_dsn"))),
        marks=(pytest.mark.postgres,)),
"""

from __future__ import annotations

import enum
import http.client
import http.server
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from attrs import define, field, frozen

from tests.support.fixtures_postgres import embedded_postgres_in_temporary_directory
from tests.support.stub_client import Reply, content_md5

#: Seconds a server may take to start listening and answer /healthz.
START_TIMEOUT = 30.0
#: Seconds any one HTTP request from a test may take.
REQUEST_TIMEOUT = 30.0

_PORT_LINE = re.compile(rb"KilolockSite(?: \(TLS\))? starting on (\d+)")


def poll_until(predicate: Callable[[], Any], timeout: float, what: str,
               interval: float = 0.05) -> Any:
    """Call C{predicate} until it returns something true (returned), or fail
    with C{what} after C{timeout} seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


@frozen
class StoreLaunch:
    """How to start a server on one kind of store."""

    args: tuple[str, ...]
    env: Mapping[str, str] = field(factory=dict)


@frozen
class StoreVariant:
    """A store the server fixtures are parametrized over: C{launch} gets the
    fixture request (so it can ask for other fixtures, e.g. a database URL);
    C{marks} are applied to every test that runs on it."""

    launch: Callable[[pytest.FixtureRequest], StoreLaunch]
    marks: tuple[Any, ...] = ()


SERVER_STORES: dict[str, StoreVariant] = {
    "memory": StoreVariant(lambda request: StoreLaunch(("--store", "memory"))),
    "postgres": StoreVariant(lambda request: StoreLaunch(
        ("--store", "postgres", "--database", request.getfixturevalue("postgres_dsn"))),
        marks=(pytest.mark.postgres,)),
}


def server_command(*args: str, hooks: tuple[str, ...] = ()) -> list[str]:
    """C{twist kilolock ARGS} with this interpreter, logging text to stdout;
    with C{hooks} (options of L{kilolock.testing.hooks}, e.g.
    C{("--operation-pause-file", path)}), the server of
    C{python -m kilolock.testing.twist}, which takes them."""
    runner = "kilolock.testing.twist" if hooks else "twisted"
    return [sys.executable, "-m", runner, "--log-format=text", "--log-file=-",
            "kilolock", *args, *hooks]


def clean_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without any C{KL_*} setting, plus C{extra}."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("KL_")}
    env.update(extra or {})
    return env


class KilolockServer:
    """One Kilolock server process and a small HTTP client for it."""

    def __init__(self, command: list[str], env: Mapping[str, str], cwd: Path,
                 log_path: Path, tls: ssl.SSLContext | None = None) -> None:
        """C{tls}: the server speaks HTTPS; this context checks it."""
        self.command = command
        self.tls = tls
        self.env = dict(env)
        self.cwd = cwd
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None
        self.port: int | None = None

    # -- life cycle --------------------------------------------------------

    def start(self, timeout: float = START_TIMEOUT) -> KilolockServer:
        self.cwd.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                self.command, cwd=self.cwd, env=self.env, stdin=subprocess.DEVNULL,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            self.port = int(poll_until(self._port_from_log, timeout,
                                       "the server to log its listening port"))
            poll_until(self._healthy, timeout, "GET /healthz to answer 200")
        except AssertionError as error:
            self.stop()
            raise AssertionError(f"{error}\n--- server log ---\n{self.log_text()}") from None
        return self

    def stop(self) -> int | None:
        """SIGTERM (a clean twistd shutdown), SIGKILL if it lingers; the exit code."""
        process = self.process
        if process is None:
            return None
        if process.poll() is None:
            for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(process.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    process.wait(grace)
                    break
                except subprocess.TimeoutExpired:
                    continue
        return process.poll()

    def _port_from_log(self) -> int | None:
        assert self.process is not None
        match = _PORT_LINE.search(self.log_path.read_bytes())
        if match:
            return int(match.group(1))
        if self.process.poll() is not None:
            raise AssertionError(f"the server exited with {self.process.returncode}"
                                 f" before listening\n--- server log ---\n{self.log_text()}")
        return None

    def _healthy(self) -> bool:
        try:
            return self.request("GET", "/healthz", timeout=2.0).status == 200
        except OSError:
            return False

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"

    # -- addresses ---------------------------------------------------------

    @property
    def base_url(self) -> str:
        assert self.port is not None, "the server is not started"
        scheme = "https" if self.tls is not None else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    def state_url(self, name: str) -> str:
        return f"{self.base_url}/v1/states/{name}"

    # -- talking to it -----------------------------------------------------

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: Mapping[str, str] | None = None,
                timeout: float = REQUEST_TIMEOUT) -> Reply:
        """One request on a fresh connection; C{path} may also be a full URL."""
        if path.startswith("http"):
            parts = urlsplit(path)
            path = parts.path + (f"?{parts.query}" if parts.query else "")
        assert self.port is not None, "the server is not started"
        return http_request(self.port, method, path, body, headers, timeout, tls=self.tls)

    def with_body(self, method: str, path: str, body: bytes,
                  headers: Mapping[str, str] | None = None) -> Reply:
        """A request with a body framed like Terraform's (JSON, Content-MD5)."""
        sent = {"Content-Type": "application/json", "Content-MD5": content_md5(body)}
        sent.update(headers or {})
        return self.request(method, path, body, sent)

    def raw_exchange(self, data: bytes, timeout: float = REQUEST_TIMEOUT) -> bytes:
        """Send C{data} byte-for-byte on a new socket (it should ask for
        C{Connection: close}) and return everything the server answers."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as plain:
            sock = (self.tls.wrap_socket(plain, server_hostname="127.0.0.1")
                    if self.tls is not None else plain)
            sock.sendall(data)
            chunks = []
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                chunks.append(chunk)
        return b"".join(chunks)


def http_request(port: int, method: str, path: str, body: bytes | None = None,
                 headers: Mapping[str, str] | None = None, timeout: float = REQUEST_TIMEOUT,
                 tls: ssl.SSLContext | None = None) -> Reply:
    """One request on a fresh connection to 127.0.0.1:C{port} (HTTPS with
    C{tls}); the target is sent as given."""
    connection = (
        http.client.HTTPSConnection("127.0.0.1", port, timeout=timeout, context=tls)
        if tls is not None
        else http.client.HTTPConnection("127.0.0.1", port, timeout=timeout))
    return exchange(connection, method, path, body, headers)


def exchange(connection: http.client.HTTPConnection, method: str, path: str,
             body: bytes | None = None, headers: Mapping[str, str] | None = None) -> Reply:
    """Send one request on C{connection}, read the whole answer, close it."""
    try:
        connection.request(method, path, body=body, headers=dict(headers or {}))
        response = connection.getresponse()
        content = response.read()
        raw_headers: dict[bytes, list[bytes]] = {}
        for name, value in response.getheaders():
            raw_headers.setdefault(name.lower().encode(), []).append(value.encode())
        return Reply(response.status, response.reason.encode(), raw_headers, content)
    finally:
        connection.close()


#: Where test servers listen unless told otherwise.
DEFAULT_LISTEN = "tcp:0:interface=127.0.0.1"


def _launch(request: pytest.FixtureRequest, tmp_path: Path, launch: StoreLaunch,
            env: Mapping[str, str] | None, args: tuple[str, ...],
            index: int, listen: str = DEFAULT_LISTEN,
            tls: ssl.SSLContext | None = None, hooks: tuple[str, ...] = ()) -> KilolockServer:
    directory = tmp_path / f"kilolock-server-{index}"
    server = KilolockServer(
        server_command("--listen", listen, *launch.args, *args, hooks=hooks),
        clean_environment({**launch.env, **(env or {})}),
        cwd=directory,
        log_path=directory / "server.log",
        tls=tls,
    )
    servers: list[KilolockServer] = request.node.__dict__.setdefault("kilolock_servers", [])
    servers.append(server)
    return server.start()


@pytest.fixture(params=[pytest.param(name, marks=list(variant.marks), id=f"store={name}")
                        for name, variant in SERVER_STORES.items()])
def server_store(request: pytest.FixtureRequest) -> StoreLaunch:
    """The store every server of this test runs on (one test per store)."""
    return SERVER_STORES[request.param].launch(request)


ServerFactory = Callable[..., KilolockServer]


@pytest.fixture
def kilolock_server_factory(request: pytest.FixtureRequest, tmp_path: Path,
                            server_store: StoreLaunch) -> Iterator[ServerFactory]:
    """Start servers with C{factory(env={...}, args=(...))}; all of them are
    stopped when the test ends.  C{listen} (an endpoint string with port 0
    on 127.0.0.1) and C{tls} (an C{ssl.SSLContext} for an C{ssl:} endpoint)
    change where the server listens; C{hooks} are options of
    L{kilolock.testing.hooks} (see L{server_command})."""
    started: list[KilolockServer] = []

    def factory(env: Mapping[str, str] | None = None,
                args: tuple[str, ...] = (), listen: str = DEFAULT_LISTEN,
                tls: ssl.SSLContext | None = None,
                hooks: tuple[str, ...] = ()) -> KilolockServer:
        server = _launch(request, tmp_path, server_store, env, args, len(started),
                         listen, tls, hooks)
        started.append(server)
        return server

    yield factory
    for server in started:
        server.stop()


@pytest.fixture
def kilolock_server(kilolock_server_factory: ServerFactory) -> KilolockServer:
    """A running server in open auth mode (no credentials needed)."""
    return kilolock_server_factory()


#: The static token of L{static_token_server}.
STATIC_TOKEN = "kl_static-test-token-0123456789abcdef"


@pytest.fixture
def static_token_server(kilolock_server_factory: ServerFactory) -> KilolockServer:
    """A running server with C{KL_AUTH_MODE=static} and L{STATIC_TOKEN}."""
    return kilolock_server_factory(env={"KL_AUTH_MODE": "static",
                                        "KL_AUTH_TOKEN": STATIC_TOKEN})


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Attach the log of every server a failing test started to its report."""
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for index, server in enumerate(item.__dict__.get("kilolock_servers", ())):
            report.sections.append((f"kilolock server {index} log ({server.log_path})",
                                    server.log_text()))


# -- a recording, fault-injecting HTTP proxy ---------------------------------


@define
class Exchange:
    """One request that went through the proxy, and what became of it."""

    method: str
    target: str
    headers: list[tuple[str, str]]
    body: bytes
    chunked: bool
    upstream_status: int | None = None
    status: int | None = None
    response_body: bytes = b""
    #: time.monotonic() when the whole request had arrived.
    received_at: float = field(factory=time.monotonic)

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key.lower() == name.lower():
                return value
        return None

    @property
    def path(self) -> str:
        return urlsplit(self.target).path

    @property
    def query(self) -> str:
        return urlsplit(self.target).query


class Fault(enum.Enum):
    """What the proxy does instead of relaying an answer."""

    #: Forward the request, let the server commit it, then answer 500.
    ANSWER_500_AFTER_FORWARDING = "answer-500-after-forwarding"
    #: Answer 500 without forwarding anything (a broken backend).
    ANSWER_500_WITHOUT_FORWARDING = "answer-500-without-forwarding"


@define
class FaultRule:
    """Apply C{fault} to the next C{times} requests C{matches} accepts."""

    matches: Callable[[Exchange], bool]
    fault: Fault
    times: int = 1


class _ProxyHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _ProxyServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        if name.startswith("do_"):
            return self._relay
        raise AttributeError(name)

    def _read_body(self) -> tuple[bytes, bool]:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return b"".join(parts), True
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return (self.rfile.read(length) if length else b""), False

    def _relay(self) -> None:
        body, chunked = self._read_body()
        exchange = Exchange(self.command, self.path, list(self.headers.items()), body, chunked)
        proxy = self.server.proxy
        fault = proxy.take_fault(exchange)
        status, reason, headers, answer = 500, "Internal Server Error", [], b""
        if fault is not Fault.ANSWER_500_WITHOUT_FORWARDING:
            upstream = proxy.forward(exchange)
            exchange.upstream_status = upstream[0]
            if fault is None:
                status, reason, headers, answer = upstream
        exchange.status = status
        exchange.response_body = answer
        proxy.record(exchange)
        self.send_response_only(status, reason)
        for name, value in headers:
            if name.lower() not in ("transfer-encoding", "connection", "content-length"):
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)
        self.wfile.flush()


class _ProxyServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    proxy: FaultProxy


class FaultProxy:
    """An HTTP/1.1 proxy on 127.0.0.1 in front of a server: relays every
    request (keeping chunked framing chunked), records each L{Exchange}, and
    applies L{FaultRule}s.  Runs in threads, so it works in front of a
    subprocess server and an in-process one alike."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.rules: list[FaultRule] = []
        self.exchanges: list[Exchange] = []
        self._mutex = threading.Lock()
        self._server = _ProxyServer(("127.0.0.1", 0), _ProxyHandler)
        self._server.proxy = self
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        name="fault-proxy", daemon=True)

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def add_fault(self, matches: Callable[[Exchange], bool], fault: Fault,
                  times: int = 1) -> None:
        with self._mutex:
            self.rules.append(FaultRule(matches, fault, times))

    def take_fault(self, exchange: Exchange) -> Fault | None:
        with self._mutex:
            for rule in self.rules:
                if rule.times > 0 and rule.matches(exchange):
                    rule.times -= 1
                    return rule.fault
        return None

    def record(self, exchange: Exchange) -> None:
        with self._mutex:
            self.exchanges.append(exchange)

    def seen(self, method: str | None = None, path: str | None = None) -> list[Exchange]:
        """The exchanges so far (of one method and/or path)."""
        with self._mutex:
            return [exchange for exchange in self.exchanges
                    if (method is None or exchange.method == method)
                    and (path is None or exchange.path == path)]

    def forward(self, exchange: Exchange) -> tuple[int, str, list[tuple[str, str]], bytes]:
        connection = http.client.HTTPConnection("127.0.0.1", self.upstream_port,
                                                timeout=REQUEST_TIMEOUT)
        try:
            connection.putrequest(exchange.method, exchange.target, skip_host=True,
                                  skip_accept_encoding=True)
            for name, value in exchange.headers:
                if name.lower() not in ("connection", "keep-alive"):
                    connection.putheader(name, value)
            if exchange.chunked:
                framed = (f"{len(exchange.body):x}\r\n".encode() + exchange.body + b"\r\n"
                          if exchange.body else b"") + b"0\r\n\r\n"
                connection.endheaders(framed)
            else:
                connection.endheaders(exchange.body or None)
            response = connection.getresponse()
            return (response.status, response.reason, response.getheaders(), response.read())
        finally:
            connection.close()


@pytest.fixture
def fault_proxy_factory() -> Iterator[Callable[[int], FaultProxy]]:
    """C{factory(upstream_port)} starts a L{FaultProxy}; all stop at the end."""
    proxies: list[FaultProxy] = []

    def factory(upstream_port: int) -> FaultProxy:
        proxy = FaultProxy(upstream_port).start()
        proxies.append(proxy)
        return proxy

    yield factory
    for proxy in proxies:
        proxy.stop()


@pytest.fixture
def private_cluster() -> Iterator[Any]:
    """An embedded PostgreSQL of this test's own, which it stops and restarts."""
    if os.environ.get("KL_TEST_POSTGRES_URL"):
        pytest.skip("stops and restarts an embedded PostgreSQL; not with an external server")
    with embedded_postgres_in_temporary_directory() as cluster:
        yield cluster
