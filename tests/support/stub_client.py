"""An in-memory client for a Kilolock site, plus bodies shaped exactly like
the ones Terraform sends."""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from typing import Any

import treq
from attrs import frozen
from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred, succeed
from twisted.internet.endpoints import TCP4ClientEndpoint
from twisted.internet.interfaces import IConsumer, IStreamClientEndpoint
from twisted.internet.task import deferLater
from twisted.internet.testing import MemoryReactorClock
from twisted.test import iosim
from twisted.web.client import URI, Agent
from twisted.web.http_headers import Headers
from twisted.web.iweb import IAgentEndpointFactory, IBodyProducer, IResponse
from twisted.web.resource import IResource
from zope.interface import implementer

from kilolock.auth.portal import OpenChecker, StaticTokenChecker, build_portal
from kilolock.store.interfaces.states import IStateStore
from kilolock.store.memory.store import MemoryStateStore
from kilolock.web.site import KilolockSite, build_root


@frozen
class Reply:
    status: int
    phrase: bytes
    headers: dict[bytes, list[bytes]]
    body: bytes

    def header(self, name: bytes) -> bytes | None:
        values = self.headers.get(name.lower())
        return values[0] if values else None

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def error_code(self) -> str:
        code: str = self.json()["error"]["code"]
        return code


@implementer(IBodyProducer)
class _Body:
    """A request body, produced at once."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.length = len(body)

    def startProducing(self, consumer: IConsumer) -> Deferred[None]:
        consumer.write(self.body)
        return succeed(None)

    def pauseProducing(self) -> None:
        pass

    def resumeProducing(self) -> None:
        pass

    def stopProducing(self) -> None:
        pass


@implementer(IAgentEndpointFactory)
class _Endpoints:
    def __init__(self, reactor: MemoryReactorClock) -> None:
        self.reactor = reactor

    def endpointForURI(self, uri: URI) -> IStreamClientEndpoint:
        return TCP4ClientEndpoint(self.reactor, "127.0.0.1", uri.port)


class SiteClient:
    """Requests to a L{KilolockSite} over in-memory connections, answered
    synchronously: what treq's RequestTraversalAgent does, but the server
    side is Kilolock's own Site and Request classes, so a test sees what a
    socket would (the JSON 405 of a refused method, the request id)."""

    def __init__(self, root: IResource) -> None:
        self.reactor = MemoryReactorClock()
        self.site = KilolockSite(root, reactor=self.reactor)
        self.agent = Agent.usingEndpointFactory(self.reactor, _Endpoints(self.reactor))

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> Reply:
        pending, pump = self._send(method, path, body, headers)
        response: IResponse = _result(pending, pump)
        content = _result(treq.content(response), pump)
        return _reply(response, content)

    async def request_live(self, clock: Any, method: str, path: str,
                           body: bytes | None = None,
                           headers: dict[str, str] | None = None) -> Reply:
        """L{request} for a tree whose store answers on the real reactor
        C{clock} (the PostgreSQL store): the connection is pumped until the
        answer is there, C{clock} running in between.

        @return: (awaited) the L{Reply}.
        """
        pending, pump = self._send(method, path, body, headers)
        response: IResponse = await _live_result(pending, pump, clock)
        content = await _live_result(treq.content(response), pump, clock)
        return _reply(response, content)

    def _send(self, method: str, path: str, body: bytes | None,
              headers: dict[str, str] | None) -> tuple[Deferred[Any], iosim.IOPump]:
        sent = Headers({name: [value] for name, value in (headers or {}).items()})
        pending = self.agent.request(method.encode(), b"http://kilolock.test" + path.encode(),
                                     sent, None if body is None else _Body(body))
        _, _, factory, _, _ = self.reactor.tcpClients.pop()
        server = self.site.buildProtocol(IPv4Address("TCP", "127.0.0.1", 31337))
        client = factory.buildProtocol(None)
        pump = iosim.connect(
            server, iosim.FakeTransport(server, isServer=True,
                                        hostAddress=IPv4Address("TCP", "127.0.0.1", 80),
                                        peerAddress=IPv4Address("TCP", "127.0.0.1", 31337)),
            client, iosim.FakeTransport(client, isServer=False))
        return pending, pump


def _reply(response: IResponse, content: bytes) -> Reply:
    raw_headers = {name.lower(): list(values)
                   for name, values in response.headers.getAllRawHeaders()}
    return Reply(response.code, response.phrase, raw_headers, content)


#: How many times L{_live_result} lets the real reactor run for one answer.
_LIVE_ROUNDS = 20000


async def _live_result(pending: Deferred[Any], pump: iosim.IOPump, clock: Any) -> Any:
    """What C{pending} fires with, pumping the connection and letting the
    real reactor C{clock} run until it has."""
    result: list[Any] = []
    pending.addBoth(result.append)
    for _ in range(_LIVE_ROUNDS):
        pump.flush()
        if result:
            break
        await deferLater(clock, 0.001, lambda: None)
    assert result, "no response"
    if hasattr(result[0], "raiseException"):
        result[0].raiseException()
    return result[0]


def _result(pending: Deferred[Any], pump: iosim.IOPump) -> Any:
    """What C{pending} fires with once the connection has carried all it can."""
    pump.flush()
    result: list[Any] = []
    pending.addBoth(result.append)
    assert result, "no response"
    if hasattr(result[0], "raiseException"):
        result[0].raiseException()
    return result[0]


class StubClient:
    """Requests against a Kilolock resource tree, answered synchronously."""

    def __init__(self, store: IStateStore | None = None, auth_token: str | None = None) -> None:
        self.store = store if store is not None else MemoryStateStore()
        checker = StaticTokenChecker(auth_token) if auth_token else OpenChecker()
        self.site = SiteClient(build_root(self.store, build_portal(checker), reactor=None))

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> Reply:
        return self.site.request(method, path, body, headers)

    def get(self, path: str, **kwargs: Any) -> Reply:
        return self.request("GET", path, **kwargs)

    def post(self, path: str, body: bytes, md5: bool = True, **kwargs: Any) -> Reply:
        headers = kwargs.pop("headers", {}) or {}
        headers.setdefault("Content-Type", "application/json")
        if md5:
            headers.setdefault("Content-MD5", content_md5(body))
        return self.request("POST", path, body=body, headers=headers, **kwargs)

    def lock(self, path: str, body: bytes, **kwargs: Any) -> Reply:
        return self.request("LOCK", path, body=body, headers=terraform_headers(body), **kwargs)

    def unlock(self, path: str, body: bytes = b"", **kwargs: Any) -> Reply:
        return self.request("UNLOCK", path, body=body, headers=terraform_headers(body), **kwargs)

    def delete(self, path: str, **kwargs: Any) -> Reply:
        return self.request("DELETE", path, **kwargs)


def content_md5(body: bytes) -> str:
    return base64.b64encode(hashlib.md5(body).digest()).decode()


def terraform_headers(body: bytes) -> dict[str, str]:
    return {"Content-Type": "application/json", "Content-MD5": content_md5(body)}


def state_body(serial: int, lineage: str = "7b1d5c1e-0000-4000-8000-000000000001",
               resources: list[dict[str, Any]] | None = None,
               outputs: dict[str, Any] | None = None) -> bytes:
    """A Terraform v4 state, pretty-printed with a final newline like Terraform."""
    doc = {
        "version": 4,
        "terraform_version": "1.15.5",
        "serial": serial,
        "lineage": lineage,
        "outputs": outputs or {},
        "resources": resources if resources is not None else [{
            "mode": "managed",
            "type": "terraform_data",
            "name": "example",
            "provider": 'provider["terraform.io/builtin/terraform"]',
            "instances": [{
                "schema_version": 0,
                "attributes": {"id": f"id-{serial}", "input": None, "output": None,
                               "triggers_replace": None},
                "sensitive_attributes": [],
            }],
        }],
        "check_results": None,
    }
    return json.dumps(doc, indent=2).encode() + b"\n"


def lock_body(lock_id: str | None = None, who: str = "alice@laptop",
              created: str = "2026-11-29T23:05:20.206526015Z") -> bytes:
    """A LockInfo exactly as Terraform 1.15.5 sends it (9 fractional digits)."""
    return json.dumps({
        "ID": lock_id or str(uuid.uuid4()),
        "Operation": "OperationTypeApply",
        "Info": "",
        "Who": who,
        "Version": "1.15.5",
        "Created": created,
        "Path": "",
    }, separators=(",", ":")).encode()
