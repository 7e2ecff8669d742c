"""The native API's write side in memory: a site over one MemoryStateStore
whose callers are named by Bearer tokens (several tenants, several
principals of one tenant), whose operations can be held before any step,
and whose clock the test moves."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from twisted.cred.checkers import ICredentialsChecker
from twisted.cred.credentials import IAnonymous, ICredentials
from twisted.cred.error import UnauthorizedLogin
from twisted.internet.defer import Deferred, fail, succeed
from zope.interface import implementer

from kilolock.auth.portal import IBearerToken, build_portal
from kilolock.core.model import Principal
from kilolock.stateops.runner import OperationRunner
from kilolock.store.memory.store import MemoryStateStore
from kilolock.web.native.options import NativeOptions
from kilolock.web.site import build_root
from tests.support.paths import SAMPLE_STATES
from tests.support.stub_client import Reply, SiteClient, content_md5, terraform_headers

STATES = SAMPLE_STATES
MONOLITH = (STATES / "monolith.tfstate").read_bytes()
NATIVE = "/v1/native"

#: Callers by token: two principals of acme, one of globex, a read-only
#: and a scoped token of acme.
PRINCIPALS = {
    "ann": Principal("acme", "token:ann", token_id="tok_ann"),
    "bob": Principal("acme", "token:bob", token_id="tok_bob"),
    "gus": Principal("globex", "token:gus", token_id="tok_gus"),
    "reader": Principal("acme", "token:reader", scope="read", token_id="tok_reader"),
    "scoped": Principal("acme", "token:ci", workspace_id="ws_a", env_public_id="env_1",
                        token_id="tok_ci"),
}


@implementer(ICredentialsChecker)
class _Tokens:
    credentialInterfaces = (IAnonymous, IBearerToken, ICredentials)

    def requestAvatarId(self, credentials: Any) -> Deferred[Principal]:
        token = getattr(credentials, "token", b"").decode()
        if token in PRINCIPALS:
            return succeed(PRINCIPALS[token])
        return fail(UnauthorizedLogin())


def fired(deferred: Deferred[Any]) -> Any:
    """What an already-fired Deferred (the memory store's) fired with."""
    found: list[Any] = []
    deferred.addBoth(found.append)
    assert found, "the Deferred has not fired"
    if hasattr(found[0], "raiseException"):
        found[0].raiseException()
    return found[0]


class Clock:
    """The time the site and its operations see; tests move it."""

    def __init__(self) -> None:
        self.at = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.at

    def advance(self, seconds: float) -> None:
        self.at += timedelta(seconds=seconds)


class Holds:
    """Holds operations before a step: C{hold("writing")} makes every
    operation wait there until L{release}."""

    def __init__(self) -> None:
        self.step: str | None = None
        self.waiting: list[Deferred[None]] = []
        self.reached: list[tuple[str, str]] = []

    def hold(self, step: str) -> None:
        self.step = step

    def __call__(self, operation_id: str, step: str) -> Deferred[None]:
        self.reached.append((operation_id, step))
        if step != self.step:
            return succeed(None)
        waiting: Deferred[None] = Deferred()
        self.waiting.append(waiting)
        return waiting

    def release(self) -> None:
        self.step = None
        waiting, self.waiting = self.waiting, []
        for one in waiting:
            one.callback(None)


class NativeSite:
    """A Kilolock site in memory, its store, clock and operation holds."""

    def __init__(self, store: MemoryStateStore | None = None,
                 runner: Callable[..., OperationRunner] | None = None) -> None:
        self.clock = Clock()
        self.store = store if store is not None else MemoryStateStore(clock=self.clock)
        self.holds = Holds()
        self.runner = (runner or OperationRunner)(self.store, None, now=self.clock,
                                                  pause=self.holds)
        options = NativeOptions(runner=self.runner, now=self.clock, max_state_bytes=1 << 24,
                                max_open_uploads=4)
        self.site = SiteClient(build_root(self.store, build_portal(_Tokens()), reactor=None,
                                          native=options))

    def request(self, method: str, path: str, body: bytes | None = None,
                token: str | None = "ann", headers: dict[str, str] | None = None) -> Reply:
        sent = dict(headers or {})
        if token is not None:
            sent["Authorization"] = f"Bearer {token}"
        return self.site.request(method, path, body, sent)

    def json(self, method: str, path: str, document: Any, token: str | None = "ann") -> Reply:
        return self.request(method, path, json.dumps(document).encode(), token,
                            {"Content-Type": "application/json"})

    def put_state(self, name: str, raw: bytes, token: str = "ann",
                  lock_id: str | None = None) -> Reply:
        query = f"?ID={lock_id}" if lock_id else ""
        return self.request("POST", f"/v1/states/{name}{query}", raw, token,
                            {"Content-Type": "application/json", "Content-MD5": content_md5(raw)})

    def lock(self, name: str, body: bytes, token: str = "ann") -> Reply:
        return self.request("LOCK", f"/v1/states/{name}", body, token, terraform_headers(body))

    def unlock(self, name: str, body: bytes, token: str = "ann") -> Reply:
        return self.request("UNLOCK", f"/v1/states/{name}", body, token,
                            terraform_headers(body))

    def operation(self, document: Any, token: str = "ann") -> Reply:
        return self.json("POST", f"{NATIVE}/operations", document, token)

    def read_operation(self, operation_id: str, token: str = "ann") -> Any:
        reply = self.request("GET", f"{NATIVE}/operations/{operation_id}", token=token)
        assert reply.status == 200, reply
        return reply.json()

    def versions(self, name: str, token: str = "ann") -> list[Any]:
        reply = self.request("GET", f"{NATIVE}/states/{name}/-/versions", token=token)
        if reply.status == 404:
            return []
        versions: list[Any] = reply.json()["versions"]
        return versions

    def current(self, name: str, token: str = "ann") -> bytes | None:
        reply = self.request("GET", f"/v1/states/{name}", token=token)
        return reply.body if reply.status == 200 else None


@implementer(ICredentialsChecker)
class TokenTable:
    """Bearer tokens mapped to principals of several tenants (no token: 401)."""

    credentialInterfaces = (IAnonymous, IBearerToken, ICredentials)

    def __init__(self, principals: dict[str, Principal]) -> None:
        self.principals = principals

    def requestAvatarId(self, credentials: Any) -> Deferred[Principal]:
        token = getattr(credentials, "token", b"").decode()
        if token in self.principals:
            return succeed(self.principals[token])
        return fail(UnauthorizedLogin())
