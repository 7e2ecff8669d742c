"""Helpers for hosted-mode tests (C{KL_AUTH_MODE=database}).

  - L{HostedStub}: the state lane and the control API in memory (a Kilolock
    site in memory over one L{MemoryStateStore}), answered synchronously.
  - L{start_hosted_server}: a real server subprocess in database mode on the
    store of the test's C{kilolock_server_factory}, with its control port.
  - L{ControlClient}: the control API over HTTP (a stub or a live server),
    and L{TenantAccess}, a tenant with write, read and revoked tokens.
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from attrs import frozen

from kilolock.auth.portal import DatabaseTokenChecker, build_portal
from kilolock.core.model import DEFAULT_TENANT, Principal
from kilolock.store.memory.store import MemoryStateStore
from kilolock.web.control.api import ControlAPI
from kilolock.web.control.tree import build_control_root
from kilolock.web.site import build_root
from tests.support.fixtures_server import KilolockServer, exchange, poll_until
from tests.support.stub_client import Reply, SiteClient, StubClient, content_md5, terraform_headers

#: The control token of every hosted test server.
CONTROL_TOKEN = "control-token-for-tests-0123456789"
CONTROL_HEADERS = {"Authorization": f"Bearer {CONTROL_TOKEN}"}
#: Where the stub's backend blocks point.
STUB_PUBLIC_URL = "http://kilolock.test"

_CONTROL_PORT_LINE = re.compile(rb"ControlSite starting on (\d+)")

Requester = Callable[..., Reply]


def basic(username: str, password: str) -> dict[str, str]:
    value = base64.b64encode(f"{username}:{password}".encode()).decode()
    return {"Authorization": f"Basic {value}"}


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


class _TreeClient(StubClient):
    """A StubClient over any resource tree."""

    def __init__(self, root: Any) -> None:
        self.site = SiteClient(root)

    def lock(self, path: str, body: bytes, headers: Mapping[str, str] | None = None,
             **kwargs: Any) -> Reply:
        return self.request("LOCK", path, body=body,
                            headers={**(headers or {}), **terraform_headers(body)})

    def unlock(self, path: str, body: bytes = b"", headers: Mapping[str, str] | None = None,
               **kwargs: Any) -> Reply:
        return self.request("UNLOCK", path, body=body,
                            headers={**(headers or {}), **terraform_headers(body)})

    def post(self, path: str, body: bytes, md5: bool = True, **kwargs: Any) -> Reply:
        kwargs["headers"] = dict(kwargs.get("headers") or {})  # StubClient fills it in
        return super().post(path, body, md5, **kwargs)


class HostedStub:
    """The state lane and the control API of one memory store, in memory."""

    def __init__(self, store: MemoryStateStore | None = None) -> None:
        self.store = store if store is not None else MemoryStateStore()
        portal = build_portal(DatabaseTokenChecker(self.store))
        self.state = _TreeClient(build_root(self.store, portal, reactor=None,
                                            auth_mode="database"))
        api = ControlAPI(self.store, CONTROL_TOKEN, None, lambda request: STUB_PUBLIC_URL)
        self.control_client = _TreeClient(build_control_root(api))
        self.control = ControlClient(self.control_client.request)


@frozen
class TenantAccess:
    """A tenant as its users see it: ids and three tokens."""

    slug: str
    id: str
    workspace_id: str
    env_id: str
    write: str
    read: str
    revoked: str
    write_token_id: str

    @property
    def prefix(self) -> str:
        return f"{self.workspace_id}/{self.env_id}"

    def auth(self, secret: str) -> dict[str, str]:
        """Basic auth the way Terraform sends it (username = workspace id)."""
        return basic(self.workspace_id, secret)


class ControlClient:
    """The control API through C{request(method, path, body=, headers=)}."""

    def __init__(self, request: Requester) -> None:
        self._request = request

    def call(self, method: str, path: str, document: Any = None,
             headers: Mapping[str, str] | None = None) -> Reply:
        body = None if document is None else json.dumps(document).encode()
        sent = dict(CONTROL_HEADERS if headers is None else headers)
        if body is not None:
            sent["Content-Type"] = "application/json"
        return self._request(method, "/v1/api" + path, body=body, headers=sent)

    def ok(self, method: str, path: str, document: Any = None, status: int = 200) -> Any:
        reply = self.call(method, path, document)
        assert reply.status == status, f"{method} {path}: {reply.status} {reply.body!r}"
        return reply.json()

    def tenant(self, slug: str | None = None) -> TenantAccess:
        """A new tenant with a write, a read and a revoked token on its
        default workspace/environment."""
        slug = slug or f"t-{uuid.uuid4().hex[:10]}"
        tenant = self.ok("POST", "/tenants", {"slug": slug, "name": slug.upper()}, 201)
        [workspace] = tenant["workspaces"]
        [environment] = workspace["environments"]
        write = self.ok("POST", f"/tenants/{slug}/tokens",
                        {"name": "writer", "environment": "default"}, 201)
        read = self.ok("POST", f"/tenants/{slug}/tokens",
                       {"name": "reader", "environment": "default", "scope": "read"}, 201)
        revoked = self.ok("POST", f"/tenants/{slug}/tokens",
                          {"name": "gone", "environment": "default"}, 201)
        self.ok("DELETE", f"/tenants/{slug}/tokens/{revoked['id']}")
        return TenantAccess(slug, tenant["id"], workspace["id"], environment["id"],
                            write["token_secret"], read["token_secret"],
                            revoked["token_secret"], write["id"])


class HostedServer:
    """A hosted server subprocess: the state lane (C{server}) and the control API."""

    def __init__(self, server: KilolockServer, control_port: int) -> None:
        self.server = server
        self.control_port = control_port
        self.control = ControlClient(self.control_request)

    @property
    def base_url(self) -> str:
        return self.server.base_url

    @property
    def control_url(self) -> str:
        return f"http://127.0.0.1:{self.control_port}"

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: Mapping[str, str] | None = None) -> Reply:
        return self.server.request(method, path, body=body, headers=headers)

    def with_body(self, method: str, path: str, body: bytes,
                  headers: Mapping[str, str] | None = None) -> Reply:
        sent = {"Content-Type": "application/json", "Content-MD5": content_md5(body)}
        sent.update(headers or {})
        return self.server.request(method, path, body=body, headers=sent)

    def control_request(self, method: str, path: str, body: bytes | None = None,
                        headers: Mapping[str, str] | None = None) -> Reply:
        import http.client

        connection = http.client.HTTPConnection("127.0.0.1", self.control_port, timeout=30)
        return exchange(connection, method, path, body, headers)


def hosted_env(**extra: str) -> dict[str, str]:
    return {"KL_AUTH_MODE": "database", "KL_CONTROL_TOKEN": CONTROL_TOKEN, **extra}


def start_hosted_server(factory: Callable[..., KilolockServer],
                        env: Mapping[str, str] | None = None,
                        args: tuple[str, ...] = (),
                        hooks: tuple[str, ...] = ()) -> HostedServer:
    """A server in database mode (its control API on an ephemeral port);
    C{hooks} as the server factory's."""
    server = factory(env=hosted_env(**(env or {})),
                     args=("--control-listen", "tcp:0:interface=127.0.0.1", *args),
                     hooks=hooks)

    def control_port() -> int | None:
        found = _CONTROL_PORT_LINE.search(server.log_path.read_bytes())
        return int(found.group(1)) if found else None

    port = int(poll_until(control_port, 30, "the control API to log its port"))
    hosted = HostedServer(server, port)
    poll_until(lambda: hosted.control_request("GET", "/healthz").status == 200, 30,
               "the control API to answer /healthz")
    return hosted


CONTROL = Principal(DEFAULT_TENANT, "control", address="192.0.2.7")


async def default_env(store: Any, tenant: str) -> tuple[str, str]:
    """The ids of a tenant's default workspace and environment."""
    [workspace] = [w for w in await store.list_workspaces(tenant) if w.name == "default"]
    [environment] = await store.list_environments(tenant, workspace.id)
    return workspace.id, environment.id
