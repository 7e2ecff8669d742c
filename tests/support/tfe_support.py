"""Helpers for tests of the TFE lane: the lane in memory on a task.Clock
(L{TFEStub}), the documents TFE clients send, and the CLI configuration
that points Terraform at a Kilolock without discovery."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from twisted.internet.task import Clock
from twisted.python.failure import Failure

from kilolock.auth.portal import StaticTokenChecker, build_portal
from kilolock.store.memory.store import MemoryStateStore
from kilolock.web.lane import StateLane
from kilolock.web.site import build_root
from kilolock.web.tfe.lane import TFELane
from kilolock.web.tfe.tree import api_root
from tests.support.stub_client import Reply, SiteClient
from tests.support.terraform import hcl_string

#: The static token of L{TFEStub}s (and of the Terraform tests' servers).
TOKEN = "kl_static-tfe-token-0123456789abcdef"
JSONAPI = "application/vnd.api+json"
ORG = "/api/v2/organizations/default"


def bearer(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def workspace_document(name: Any, tags: Iterable[str] = (),
                       bindings: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A workspace creation as go-tfe sends it (tags as relationships)."""
    relationships: dict[str, Any] = {}
    if tags:
        relationships["tags"] = {"data": [{"type": "tags", "attributes": {"name": tag}}
                                          for tag in tags]}
    if bindings:
        relationships["tag-bindings"] = {"data": [
            {"type": "tag-bindings", "attributes": {"key": key, "value": value}}
            for key, value in bindings.items()]}
    return {"data": {"type": "workspaces", "attributes": {"name": name},
                     "relationships": relationships}}


def version_document(raw: bytes, serial: int, inline: bool = False,
                     md5: str | None = None) -> dict[str, Any]:
    """A state version creation as Terraform sends it (C{inline}: with the
    legacy C{state} attribute)."""
    attributes: dict[str, Any] = {
        "serial": serial, "md5": md5 or hashlib.md5(raw).hexdigest(),
        "lineage": "7b1d5c1e-0000-4000-8000-000000000001", "force": False,
        "json-state-outputs": base64.b64encode(b'{"secret":{"sensitive":true,'
                                               b'"value":"hunter2"}}').decode()}
    if inline:
        attributes["state"] = base64.b64encode(raw).decode()
    return {"data": {"type": "state-versions", "attributes": attributes}}


def url_path(url: str) -> str:
    """The path and query of an absolute URL the lane handed out."""
    parts = urlsplit(url)
    return parts.path + (f"?{parts.query}" if parts.query else "")


class InlineThreads:
    """A reactor whose thread pool runs work at once, in the caller's thread:
    what a body large enough to be read "in a thread" needs in memory."""

    def getThreadPool(self) -> InlineThreads:
        return self

    def callInThreadWithCallback(self, on_result: Any, function: Any, *args: Any,
                                 **kwargs: Any) -> None:
        try:
            result = function(*args, **kwargs)
        except Exception:
            on_result(False, Failure())
        else:
            on_result(True, result)

    def callFromThread(self, function: Any, *args: Any, **kwargs: Any) -> None:
        function(*args, **kwargs)


class TFEStub:
    """The state listener's tree in memory (static auth with L{TOKEN}), the
    TFE lane and the memory store on one task.Clock."""

    def __init__(self, make_store: Callable[..., MemoryStateStore] = MemoryStateStore) -> None:
        """C{make_store(clock=...)} makes the store (the memory store)."""
        self.clock = Clock()
        self.clock.advance(1_800_000_000)
        self.store = make_store(clock=self.now)
        portal = build_portal(StaticTokenChecker(TOKEN))
        threads = InlineThreads()
        root = build_root(self.store, portal, reactor=threads, auth_mode="static")
        lane = TFELane(StateLane(self.store, portal, threads), "static", clock=self.now)
        root.children[b"api"].putChild(b"v2", api_root(lane))
        self.lane = lane
        self.site = SiteClient(root)

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.clock.seconds(), UTC)

    def request(self, method: str, path: str, document: Any = None, body: bytes | None = None,
                token: str | None = TOKEN, headers: Mapping[str, str] | None = None) -> Reply:
        sent = dict(bearer(token) if token else {})
        if document is not None:
            body = json.dumps(document).encode()
            sent["Content-Type"] = JSONAPI
        sent.update(headers or {})
        return self.site.request(method, path, body, sent)

    def ok(self, method: str, path: str, document: Any = None, status: int = 200,
           **kwargs: Any) -> Any:
        reply = self.request(method, path, document, **kwargs)
        assert reply.status == status, (reply.status, reply.body)
        return reply.json() if reply.body else None

    def create(self, name: str, tags: Iterable[str] = ()) -> dict[str, Any]:
        created: dict[str, Any] = self.ok("POST", f"{ORG}/workspaces",
                                          workspace_document(name, tags), 201)["data"]
        return created

    def lock(self, workspace_id: str, token: str | None = TOKEN) -> Reply:
        return self.request("POST", f"/api/v2/workspaces/{workspace_id}/actions/lock",
                            {"data": {"attributes": {"reason": "Locked by Terraform"}}},
                            token=token)


def cli_config(path: Path, host: str, api_url: str, token: str | None = None) -> Path:
    """A Terraform CLI configuration whose C{host} block names the TFE API
    of C{host} (so no discovery, no TLS), with its token when given."""
    text = (f'host "{host}" {{\n  services = {{\n'
            f'    "tfe.v2"   = "{api_url}"\n    "tfe.v2.1" = "{api_url}"\n'
            f'    "tfe.v2.2" = "{api_url}"\n  }}\n}}\n')
    if token is not None:
        text += f'credentials "{host}" {{\n  token = "{token}"\n}}\n'
    path.write_text(text)
    return path


HOST = "kilolock.test"


#: Terraform's variable for the token of HOST (dots become underscores).
TOKEN_VARIABLE = "TF_TOKEN_kilolock_test"


SECRET_OUTPUT = """
output "secret" {
  value     = "s3cr3t-${var.generation}"
  sensitive = true
}
"""


def cloud_block(workspaces: str, organization: str = "default", host: str = HOST) -> str:
    return ("terraform {\n  cloud {\n"
            f"    hostname     = {hcl_string(host)}\n"
            f"    organization = {hcl_string(organization)}\n"
            f"    workspaces {{\n      {workspaces}\n    }}\n  }}\n}}\n")
