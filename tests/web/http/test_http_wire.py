"""The lane over a real listening socket, where framing is the point: body
limits on Content-Length and chunked bodies, chunked empty force-unlock, and
large states parsed off the reactor thread."""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest
import pytest_twisted
import treq

from kilolock.auth.portal import OpenChecker, build_portal
from kilolock.core.model import DEFAULT_TENANT, StateKey
from kilolock.store.memory.store import MemoryStateStore
from kilolock.web.site import KilolockSite, build_root
from tests.support.stub_client import content_md5, lock_body, state_body

LIMIT = 64 * 1024


class Server:
    def __init__(self, store: MemoryStateStore, port: int) -> None:
        self.store = store
        self.port = port
        self.url = f"http://127.0.0.1:{port}"


@pytest.fixture
def server() -> Iterator[Server]:
    from twisted.internet import reactor

    store = MemoryStateStore()
    site = KilolockSite(build_root(store, build_portal(OpenChecker()), reactor),
                        max_body_bytes=LIMIT)
    port = reactor.listenTCP(0, site, interface="127.0.0.1")
    yield Server(store, port.getHost().port)
    pytest_twisted.blockon(port.stopListening())


def raw_exchange(port: int, payload: bytes, read_timeout: float = 10.0) -> bytes:
    """Send raw bytes, read until the server closes or the response is complete."""
    with socket.create_connection(("127.0.0.1", port), timeout=read_timeout) as sock:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(payload)
        chunks = []
        while True:
            try:
                data = sock.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not data:
                break
            chunks.append(data)
            head, _, body = b"".join(chunks).partition(b"\r\n\r\n")
            length = [line for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:")]
            if length and len(body) >= int(length[0].split(b":")[1]):
                break
        return b"".join(chunks)


def parse(raw: bytes) -> tuple[int, dict[bytes, bytes], bytes]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split(b" ")[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, body


async def in_thread(function: Any, *args: Any) -> Any:
    from twisted.internet.threads import deferToThread

    return await deferToThread(function, *args)


def versions(store: MemoryStateStore, name: str = "big") -> list[Any]:
    result: list[Any] = []
    store.list_versions(StateKey(DEFAULT_TENANT, name)).addCallback(result.append)
    return result[0]


@pytest_twisted.ensureDeferred
async def test_content_length_over_limit_is_413_before_reading(server: Server) -> None:
    """A Content-Length over the limit is answered 413 JSON; nothing is stored."""
    head = (b"POST /v1/states/big HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(LIMIT + 1).encode() + b"\r\n\r\n")
    raw = await in_thread(raw_exchange, server.port, head + b"{" * 1000)
    status, headers, body = parse(raw)
    assert status == 413
    assert headers[b"content-type"] == b"application/json"
    assert json.loads(body)["error"]["code"] == "payload_too_large"
    assert versions(server.store) == []


@pytest_twisted.ensureDeferred
async def test_chunked_body_over_limit_is_413(server: Server) -> None:
    """A chunked body is counted as it streams; past the limit it is a 413."""
    chunk = b"x" * 8192
    framed = b"".join(b"%x\r\n" % len(chunk) + chunk + b"\r\n" for _ in range(LIMIT // 8192 + 2))
    head = (b"POST /v1/states/big HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")
    raw = await in_thread(raw_exchange, server.port, head + framed + b"0\r\n\r\n")
    status, _, body = parse(raw)
    assert status == 413
    assert json.loads(body)["error"]["code"] == "payload_too_large"
    assert versions(server.store) == []


@pytest_twisted.ensureDeferred
async def test_body_at_the_limit_is_accepted(server: Server) -> None:
    """A body of exactly the limit is not refused for its size."""
    body = state_body(1)
    body = body[:-2] + b" " * (LIMIT - len(body)) + body[-2:]
    assert len(body) == LIMIT
    response = await treq.post(server.url + "/v1/states/big", data=body,
                               headers={"Content-MD5": content_md5(body)})
    assert response.code == 200
    await response.content()
    assert len(versions(server.store)) == 1


@pytest_twisted.ensureDeferred
async def test_chunked_empty_force_unlock(server: Server) -> None:
    """Terraform's force-unlock: UNLOCK, chunked, zero bytes, MD5 of empty: releases."""
    response = await treq.request("LOCK", server.url + "/v1/states/s", data=lock_body("held"))
    assert response.code == 200
    await response.content()
    request = (b"UNLOCK /v1/states/s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Content-Md5: " + content_md5(b"").encode() + b"\r\n"
               b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n0\r\n\r\n")
    status, _, _ = parse(await in_thread(raw_exchange, server.port, request))
    assert status == 200
    lock: list[Any] = []
    server.store.get_lock(StateKey(DEFAULT_TENANT, "s")).addCallback(lock.append)
    assert lock == [None]


@pytest_twisted.ensureDeferred
async def test_large_state_round_trips_byte_for_byte() -> None:
    """A multi-megabyte state (parsed in a thread) is stored and served exactly."""
    from twisted.internet import reactor

    store = MemoryStateStore()
    site = KilolockSite(build_root(store, build_portal(OpenChecker()), reactor))
    port = reactor.listenTCP(0, site, interface="127.0.0.1")
    try:
        url = f"http://127.0.0.1:{port.getHost().port}/v1/states/large"
        resources = [{
            "mode": "managed", "type": "terraform_data", "name": f"r{index}",
            "provider": 'provider["terraform.io/builtin/terraform"]',
            "instances": [{"schema_version": 0, "sensitive_attributes": [],
                           "attributes": {"id": f"{index}", "input": "v" * 200}}],
        } for index in range(20000)]
        body = state_body(9, resources=resources)
        assert len(body) > 4 * 1024 * 1024
        response = await treq.post(url, data=body)
        assert response.code == 200
        await response.content()
        got = await treq.get(url)
        assert await got.content() == body
        projection: list[Any] = []
        store.get_projection(StateKey(DEFAULT_TENANT, "large")).addCallback(projection.append)
        assert len(projection[0].resources) == 20000
    finally:
        await port.stopListening()
