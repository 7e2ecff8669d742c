"""The cross-tenant matrix, through real servers in database mode on both
stores: every state-lane route x the path's owner (own hosted path, own
single-segment name, another tenant's ws/env, an unknown ws/env, own
workspace with another tenant's environment) x the credentials (write token,
read token, revoked token, write token with a Basic username that is not its
workspace).

Every cell starts from the same world: tenants A (the caller) and B each
have a state of the cell's own name, written and (for the unlock routes)
locked.  Then one request, its status checked, and the effect checked from
the owners' side: A's state changed exactly when the cell is allowed to, and
B's state never.  One test per route and store (a server each); all cells of
a route are checked before the test fails, so a failure lists every wrong
cell.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

from tests.support.fixtures_server import ServerFactory
from tests.support.hosted_support import HostedServer, TenantAccess, basic, start_hosted_server
from tests.support.stub_client import lock_body, state_body

OWNERS = ("own-hosted", "own-single", "foreign", "unknown", "own-ws-foreign-env")
CREDENTIALS = ("write", "read", "revoked", "wrong-username")


class Route:
    """One state-lane route: how to call it on a state, and what it changes."""

    def __init__(self, name: str, method: str, suffix: str = "", unlock_lane: bool = False,
                 body: Callable[[str], bytes | None] = lambda lock_id: None,
                 effect: str = "none", locked_before: bool = False) -> None:
        self.name = name
        self.method = method
        self.suffix = suffix
        self.unlock_lane = unlock_lane
        self.body = body
        #: What an allowed call does to A's state: "none", "write", "delete",
        #: "lock" or "unlock".
        self.effect = effect
        self.locked_before = locked_before

    def path(self, address: str) -> str:
        lane = "/v1/state-unlock/" if self.unlock_lane else "/v1/states/"
        return lane + address + self.suffix

    @property
    def reads_only(self) -> bool:
        return self.method in ("GET", "HEAD")


ROUTES = [
    Route("GET", "GET"),
    Route("HEAD", "HEAD"),
    Route("POST", "POST", body=lambda _: state_body(2), effect="write"),
    Route("PUT", "PUT", body=lambda _: state_body(2), effect="write"),
    Route("DELETE", "DELETE", effect="delete"),
    Route("LOCK", "LOCK", body=lambda _: lock_body("new-lock"), effect="lock"),
    Route("UNLOCK", "UNLOCK", body=lock_body, effect="unlock", locked_before=True),
    Route("POST-lock-alias", "POST", suffix="/lock", body=lambda _: lock_body("new-lock"),
          effect="lock"),
    Route("DELETE-lock-alias", "DELETE", suffix="/lock", body=lock_body, effect="unlock",
          locked_before=True),
    Route("POST-state-unlock", "POST", unlock_lane=True, body=lock_body, effect="unlock",
          locked_before=True),
]


def expected_status(route: Route, owner: str, credentials: str) -> int:
    if credentials == "revoked":
        return 401
    if credentials == "wrong-username" or owner not in ("own-hosted", "own-single"):
        return 403
    if credentials == "read" and not route.reads_only:
        return 403
    return 200


@pytest.fixture
def world(kilolock_server_factory: ServerFactory) -> tuple[HostedServer, TenantAccess,
                                                           TenantAccess]:
    server = start_hosted_server(kilolock_server_factory)
    return server, server.control.tenant("tenant-a"), server.control.tenant("tenant-b")


def _check(condition: bool, problems: list[str], cell: str, what: str) -> None:
    if not condition:
        problems.append(f"{cell}: {what}")


@pytest.mark.parametrize("route", ROUTES, ids=[route.name for route in ROUTES])
def test_cross_tenant_matrix(route: Route,
                             world: tuple[HostedServer, TenantAccess, TenantAccess]) -> None:
    """Every owner x credentials cell of one route: the status is 200 only
    for the caller's own state with a token allowed to do it, 401 for a
    revoked token, 403 otherwise (never 404); A's state changes only in the
    allowed cells and B's state never does."""
    server, a, b = world
    problems: list[str] = []
    for owner in OWNERS:
        for credentials in CREDENTIALS:
            cell = f"{route.name} {owner} {credentials}"
            name = f"s-{uuid.uuid4().hex[:8]}"
            a_state, b_state = state_body(1, lineage=str(uuid.uuid4())), state_body(
                1, lineage=str(uuid.uuid4()))
            a_lock, b_lock = f"lock-a-{name}", f"lock-b-{name}"
            for tenant, body, lock_id in ((a, a_state, a_lock), (b, b_state, b_lock)):
                address = f"/v1/states/{tenant.prefix}/{name}"
                auth = tenant.auth(tenant.write)
                assert server.with_body("POST", address, body, auth).status == 200
                if route.locked_before:
                    assert server.with_body("LOCK", address, lock_body(lock_id),
                                            auth).status == 200
            address = {
                "own-hosted": f"{a.prefix}/{name}",
                "own-single": name,
                "foreign": f"{b.prefix}/{name}",
                "unknown": f"ws_000000000000/env_000000000000/{name}",
                "own-ws-foreign-env": f"{a.workspace_id}/{b.env_id}/{name}",
            }[owner]
            secret = {"write": a.write, "read": a.read, "revoked": a.revoked,
                      "wrong-username": a.write}[credentials]
            username = b.workspace_id if credentials == "wrong-username" else a.workspace_id
            headers = basic(username, secret)
            body = route.body(a_lock if owner.startswith("own") else b_lock)
            if body is None:
                reply = server.request(route.method, route.path(address), headers=headers)
            else:
                reply = server.with_body(route.method, route.path(address), body, headers)

            expected = expected_status(route, owner, credentials)
            _check(reply.status == expected, problems, cell,
                   f"status {reply.status} ({reply.body[:120]!r}), expected {expected}")
            if expected == 401:
                _check(reply.header(b"www-authenticate") == b'Basic realm="kilolock"',
                       problems, cell, "401 without the Basic challenge")
            if route.method == "GET" and expected == 200:
                _check(reply.body == a_state, problems, cell, "GET did not answer A's bytes")

            allowed = expected == 200
            _check_state(server, a, name, a_state, a_lock, route,
                         route.effect if allowed else "none", problems, f"{cell} (A's state)")
            _check_state(server, b, name, b_state, b_lock, route, "none", problems,
                         f"{cell} (B's state)")
    assert not problems, "wrong cells:\n" + "\n".join(problems)
    for tenant in (a, b):
        assert server.control.ok("GET", f"/tenants/{tenant.slug}/events/verify")["ok"] is True


def _check_state(server: HostedServer, tenant: TenantAccess, name: str, written: bytes,
                 lock_id: str, route: Route, effect: str, problems: list[str],
                 cell: str) -> None:
    """What the owner sees of its state after the cell's request."""
    address = f"/v1/states/{tenant.prefix}/{name}"
    auth = tenant.auth(tenant.write)
    current = server.request("GET", address, headers=auth)
    if effect == "delete":
        _check(current.status == 404, problems, cell, "not deleted")
        return
    wanted = state_body(2) if effect == "write" else written
    _check(current.status == 200 and current.body == wanted, problems, cell,
           f"bytes are {'not ' if effect == 'write' else ''}the new ones"
           if current.body != wanted else f"GET answered {current.status}")
    locked = route.locked_before or effect == "lock"
    if effect == "unlock":
        locked = False
    probe = server.with_body("LOCK", address, lock_body(f"probe-{name}"), auth)
    if locked:
        _check(probe.status == 423, problems, cell, f"lock is gone (probe {probe.status})")
        holder: Any = probe.json() if probe.status == 423 else {}
        wanted_holder = "new-lock" if effect == "lock" else lock_id
        _check(holder.get("ID") == wanted_holder, problems, cell,
               f"lock held by {holder.get('ID')!r}, expected {wanted_holder!r}")
    else:
        _check(probe.status == 200, problems, cell, f"still locked (probe {probe.status})")
        server.with_body("UNLOCK", address, lock_body(f"probe-{name}"), auth)
