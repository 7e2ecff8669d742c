"""Hostile input against a whole Kilolock, in process, on either store.

  - L{Harness}: one store behind the real L{KilolockSite} of the state
    listener (open auth, metrics and the dashboard on: the state lane, the
    native API, health, metrics, the dashboard) and of the control API, each
    reached through L{SiteClient}.  On the PostgreSQL store the answers come
    from the real reactor (see L{Harness.call}).
  - L{Harness.snapshot}: what the store holds, as a value to compare before
    and after a request (every mutation moves its tenant's chain head).
  - Hypothesis strategies of hostile text, JSON documents, bodies, path
    segments and query values.
"""

from __future__ import annotations

import inspect
import json
import os
import threading
from collections.abc import Callable
from functools import partial
from typing import Any
from urllib.parse import quote_from_bytes

import pytest
import pytest_twisted
from hypothesis import strategies as st
from twisted.internet.defer import Deferred, ensureDeferred, maybeDeferred
from twisted.internet.threads import blockingCallFromThread, deferToThread
from twisted.python.failure import Failure

from kilolock.auth.portal import OpenChecker, build_portal
from kilolock.core.model import DEFAULT_TENANT, Principal, StateKey
from kilolock.server.metrics import Metrics
from kilolock.store.memory.store import MemoryStateStore
from kilolock.web.control.api import ControlAPI
from kilolock.web.control.tree import build_control_root
from kilolock.web.site import build_root
from kilolock.web.ui.tree import UiOptions
from tests.support.hosted_support import CONTROL_HEADERS, CONTROL_TOKEN, STUB_PUBLIC_URL
from tests.support.stub_client import Reply, SiteClient, lock_body, state_body, terraform_headers

#: The states every harness starts with: "app" (two versions, unlocked)
#: and "held" (one version, locked with HELD_LOCK).
HELD_LOCK = "held-lock-0001"
#: Who releases locks and deletes states between examples.
RESETTER = Principal(DEFAULT_TENANT, "reset")
TENANT_SLUG = "acme"


class Harness:
    """A store behind both listeners' sites, and a way to await it.

    The memory store answers at once.  The PostgreSQL store answers on the
    real reactor, which runs on the main thread: there (fixtures) a result
    is awaited with C{pytest_twisted.blockon}; the hypothesis examples of a
    test run in a worker thread (L{run}) and await results with
    C{blockingCallFromThread}."""

    def __init__(self, store: Any, reactor: Any = None) -> None:
        self.store = store
        self.reactor = reactor
        self.kind = "memory" if reactor is None else "postgres"
        #: The PostgreSQL store's database (None for memory).
        self.dsn: str | None = None
        self.placeholders: dict[str, str] = {}
        metrics = Metrics.create()
        root = build_root(store, build_portal(OpenChecker()), reactor=reactor, metrics=metrics,
                          ui=UiOptions())
        self.state = SiteClient(root)
        api = ControlAPI(store, CONTROL_TOKEN, reactor, lambda request: STUB_PUBLIC_URL)
        self.control = SiteClient(build_control_root(api))

    def call(self, producer: Callable[[], Any]) -> Any:
        """What C{producer()} (a Deferred, or a coroutine) gives, awaited
        where this thread can await it; its failure raised."""

        def started() -> Deferred[Any]:
            result = producer()
            return ensureDeferred(result) if inspect.iscoroutine(result) else result

        if self.reactor is None:
            fired: list[Any] = []
            started().addBoth(fired.append)
            assert fired, "the memory store answers at once"
            if isinstance(fired[0], Failure):
                fired[0].raiseException()
            return fired[0]
        if threading.current_thread() is threading.main_thread():
            return pytest_twisted.blockon(started())
        return blockingCallFromThread(self.reactor, started)

    def wait(self, deferred_of: Callable[[], Deferred[Any]]) -> Any:
        return self.call(deferred_of)

    def run(self, examples: Callable[[], None]) -> Deferred[None]:
        """Run C{examples} (a hypothesis test): inline on the memory store,
        in a worker thread on the PostgreSQL store (so that it can wait for
        the reactor the test itself runs on).

        @return: a Deferred firing when they are done."""
        if self.reactor is None:
            return maybeDeferred(examples)
        return deferToThread(examples)

    # -- requests --------------------------------------------------------

    def _request(self, client: SiteClient, method: str, path: str, body: bytes | None,
                 headers: dict[str, str] | None) -> Reply:
        if self.reactor is None:
            return client.request(method, path, body, headers)
        reply: Reply = self.call(lambda: client.request_live(self.reactor, method, path, body,
                                                             headers))
        return reply

    def state_request(self, method: str, path: str, body: bytes | None = None,
                      headers: dict[str, str] | None = None) -> Reply:
        return self._request(self.state, method, path, body, headers)

    def control_request(self, method: str, path: str, body: bytes | None = None) -> Reply:
        headers = {**CONTROL_HEADERS, "Content-Type": "application/json"}
        return self._request(self.control, method, path, body, headers)

    def seed(self) -> None:
        """The world every test starts from: two states and a tenant."""
        for serial in (1, 2):
            body = state_body(serial)
            assert self.state_request("POST", "/v1/states/app", body,
                                      terraform_headers(body)).status == 200
        body = state_body(1)
        assert self.state_request("POST", "/v1/states/held", body,
                                  terraform_headers(body)).status == 200
        info = lock_body(HELD_LOCK)
        assert self.state_request("LOCK", "/v1/states/held", info,
                                  terraform_headers(info)).status == 200
        created = self.control_request("POST", "/v1/api/tenants", json.dumps(
            {"slug": TENANT_SLUG, "name": "Acme"}).encode())
        assert created.status == 201, created.body
        workspace = self.state_request("GET", "/api/v2/organizations/default/workspaces/app")
        #: What a path template's placeholders stand for: C{{app-ws}}, the
        #: TFE lane's workspace id of "app".
        self.placeholders = {"{app-ws}": workspace.json()["data"]["id"]}

    def release(self, *names: str) -> None:
        """Force-release the locks of the default tenant's states C{names}
        (between examples: each LOCK is then a first one, which stores its
        LockInfo)."""
        for name in names:
            key = StateKey(DEFAULT_TENANT, name)
            if self.wait(partial(self.store.get_lock, key)) is not None:
                self.wait(partial(self.store.release_lock, key, None, RESETTER))

    def delete(self, name: str) -> None:
        """Delete the default tenant's state C{name} (unlocked first), if any."""
        self.release(name)
        key = StateKey(DEFAULT_TENANT, name)
        if self.wait(lambda: self.store.get_summary(key)) is not None:
            self.wait(lambda: self.store.delete_state(key, None, RESETTER))

    # -- what is stored ----------------------------------------------------

    def snapshot(self) -> tuple[Any, ...]:
        """Every tenant's chain head (each mutation appends an event, so it
        moves one) and the default tenant's states with their locks."""
        store = self.store
        tenants = [DEFAULT_TENANT] + [tenant.id for tenant in self.wait(
            lambda: store.list_tenants(include_deleted=True))]
        heads = tuple((tenant, str(self.wait(partial(store.chain_head, tenant))))
                      for tenant in tenants)
        states = tuple(
            (summary.key.path, summary.version_count,
             None if summary.current is None else summary.current.sha256,
             None if summary.lock is None else summary.lock.info.raw)
            for summary in self.wait(lambda: store.list_states(DEFAULT_TENANT)))
        return heads, states


def make_harness(request: Any) -> Harness:
    """A seeded harness on the store C{request.param} names (C{memory} or
    C{postgres}, a fresh database of the session's server), for a fixture:
    the PostgreSQL store is stopped when the test ends.  C{dsn} is the
    database's (None for memory)."""
    if request.param == "memory":
        built = Harness(MemoryStateStore())
        built.dsn = None
    else:
        from twisted.internet import reactor

        from kilolock.store.postgres.store import PostgresStateStore

        dsn = request.getfixturevalue("postgres_dsn")
        store = PostgresStateStore(dsn, reactor, pool_size=2)
        pytest_twisted.blockon(store.start())
        request.addfinalizer(lambda: pytest_twisted.blockon(store.stop()))
        built = Harness(store, reactor)
        built.dsn = dsn
    built.seed()
    return built


#: The store parameters of a harness fixture.
STORES = ["memory", pytest.param("postgres", marks=pytest.mark.postgres)]


def check_answer(reply: Reply, before: tuple[Any, ...], after: tuple[Any, ...],
                 what: str) -> None:
    """The promises every answer keeps: no 5xx; a JSON body that is JSON
    (strict UTF-8); nothing stored by a refused request."""
    assert reply.status < 500, f"{what}: {reply.status} {reply.body[:300]!r}"
    content_type = reply.header(b"content-type") or b""
    if reply.body and content_type.startswith(b"application/json"):
        json.loads(reply.body.decode("utf-8"))
    if reply.status >= 400:
        assert after == before, f"{what}: refused with {reply.status} but the store changed"


# -- hostile text ------------------------------------------------------------------

#: Strings that break a rule, and ordinary ones (JSON-escaped text, as it
#: would appear between quotes).
_ESCAPED_TEXT = st.one_of(
    st.sampled_from([
        "", "ok", "\\u0000", "a\\u0000b", "\\ud800", "\\udfff", "x\\ud83d", "\\ud83d\\ude00",
        "\\ude00\\ud83d", "\\\\u0000", "\\u00e9", "é", "\\n\\t", "%00", "\\\"", "Infinity",
    ]),
    st.text(max_size=20).map(lambda text: json.dumps(text)[1:-1]),
    st.integers(200, 4000).map(lambda n: os.urandom(n).hex()),
)

#: Numbers as JSON text: ordinary, huge, beyond a double, and constants.
_NUMBERS = st.sampled_from([
    "0", "-1", "1.5", "1e400", "-1e400", "1e-400", "9" * 400, "2147483648",
    "9223372036854775808", "NaN", "Infinity", "-Infinity", "1E+308", "0.1e1",
])


def _json_text() -> st.SearchStrategy[str]:
    """JSON documents as text (so that 1e400, NaN and lone surrogate escapes
    can be in them), nested a little."""
    scalar = st.one_of(_NUMBERS, st.sampled_from(["true", "false", "null"]),
                       _ESCAPED_TEXT.map(lambda text: f'"{text}"'))
    return st.recursive(scalar, lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(lambda items: "[" + ",".join(items) + "]"),
        st.lists(st.tuples(_ESCAPED_TEXT, inner), max_size=4).map(
            lambda members: "{" + ",".join(f'"{k}":{v}' for k, v in members) + "}")),
        max_leaves=10)


json_text = _json_text()

#: Nesting far beyond the limit, and just around it.
deep_text = st.one_of(
    st.sampled_from([100_000, 513, 600, 1000]).map(lambda n: "[" * n + "]" * n),
    st.sampled_from([512, 600]).map(lambda n: '{"a":' * n + "1e400" + "}" * n),
)


#: Strings (as JSON text) that break a text rule.
_RULE_BREAKERS = st.sampled_from([
    '"\\u0000"', '"a\\u0000b"', '"\\ud800"', '"x\\udfff"', '"\\ud83d"', '"\\ude00\\ud83d"',
]) | st.integers(2000, 5000).map(lambda n: '"' + os.urandom(n).hex() + '"')

#: A JSON value as text: mostly one that breaks a rule, else any document.
_value = st.one_of(_RULE_BREAKERS, _RULE_BREAKERS, _NUMBERS, deep_text, json_text,
                   _ESCAPED_TEXT.map(lambda text: f'"{text}"'))


@st.composite
def lock_infos(draw: st.DrawFn) -> bytes:
    """LockInfos as Terraform sends them (one ID, so that LOCKs of it
    succeed), any of their members made hostile."""
    members = {"ID": '"fuzz-lock"', "Operation": '"OperationTypeApply"', "Info": '""',
               "Who": '"alice@laptop"', "Version": '"1.15.5"',
               "Created": '"2026-11-29T23:05:20.206526015Z"', "Path": '""'}
    members = {key: draw(st.one_of(st.just(value), _value)) for key, value in members.items()}
    return ("{" + ",".join(f'"{key}":{value}' for key, value in members.items())
            + "}").encode()


_STATE = ('{"version":4,"terraform_version":"1.15.5","serial":%(serial)s,"lineage":"l",'
          '"outputs":{"o":{"value":%(output)s,"type":"string"}},"resources":[{'
          '"mode":"managed","type":%(type)s,"name":%(name)s,"module":%(module)s,'
          '"provider":%(provider)s,"instances":[{"index_key":%(index_key)s,'
          '"deposed":%(deposed)s,"schema_version":0,"attributes":{"id":"x","a":%(attribute)s},'
          '"dependencies":[%(dependency)s],"sensitive_attributes":%(sensitive)s}]}]}')
_ENVELOPE = ('{"serial":%(serial)s,"lineage":"l","encrypted_data":%(data)s,'
             '"encryption_version":"v0","meta":{"x":%(meta)s}}')
#: The smallest states Terraform's rules allow (a few dozen bytes): shorter
#: than any version before them, so a history mixes tiny and large ones.
_TINY = '{"version":4,"serial":%(serial)s,"lineage":"l"}'


@st.composite
def state_texts(draw: st.DrawFn, serial: int | None = None) -> bytes:
    """v4 states (and OpenTofu envelopes) as Terraform writes them, any place
    where Terraform puts text or a value made hostile:
    type, name, module, provider, index key, deposed key, an attribute, a
    dependency, an output, the serial (C{serial} instead when given); and
    the tiniest states."""
    slots = {"serial": str(draw(st.integers(3, 10**6))), "output": '"v"', "type": '"t"',
             "name": '"n"', "module": '"module.m"', "provider": '"p"', "index_key": "null",
             "deposed": "null", "attribute": "1", "dependency": '"t.other"',
             "sensitive": "[]", "data": '"eA=="', "meta": "1"}
    slots = {key: draw(st.one_of(st.just(value), _value)) for key, value in slots.items()}
    if serial is not None:
        slots["serial"] = str(serial)
    template = draw(st.sampled_from([_STATE, _STATE, _STATE, _ENVELOPE, _TINY]))
    return (template % slots).encode()


@st.composite
def state_histories(draw: st.DrawFn) -> list[bytes]:
    """Two to eight versions of one state, serials 1, 2, ..., each one of
    L{state_texts}' shapes: tiny, large and incompressible ones after one
    another, as a chain of versions in the store sees them."""
    count = draw(st.integers(2, 8))
    return [draw(state_texts(serial=serial)) for serial in range(1, count + 1)]


#: A request body: JSON-ish documents, LockInfos, states, too deep, raw bytes.
bodies = st.one_of(
    st.none(), st.just(b""),
    json_text.map(str.encode), deep_text.map(str.encode), lock_infos(), state_texts(),
    st.binary(max_size=64),
)


def _percent(raw: bytes) -> str:
    return quote_from_bytes(raw, safe="")


#: Path segments: names the harness has, path-rule breakers, random bytes.
segments = st.one_of(
    st.sampled_from(["app", "held", "new", "-", "lock", ".", "..", "%2F", "%00", "%FF",
                     "%ED%A0%80", "a%20b", "%5C", "x" * 300, "ws_000000000000",
                     TENANT_SLUG, "default"]),
    st.binary(min_size=1, max_size=12).map(_percent),
)

#: Query values: ordinary, rule breakers (NUL, not UTF-8, an encoded
#: surrogate), numbers out of range, a pinned head.
query_values = st.one_of(
    st.sampled_from(["", "1", "2", "0", "-1", "99999999999", "%C2%B2", "%D9%A1", "%00", "a%00b",
                     "%FF", "%ED%A0%80", "app", "state_write", "2026-01-02T03:04:05Z",
                     "tags.Name=web", "a.0.b=1", "*", "%2F", "x" * 3000,
                     "1:" + "0" * 64, "0:" + "0" * 64, "5:abc"]),
    st.binary(max_size=12).map(_percent),
)


def query(names: list[str]) -> st.SearchStrategy[str]:
    """A query string of some of C{names}, each with a hostile value."""
    return st.lists(st.tuples(st.sampled_from(names), query_values), max_size=3).map(
        lambda pairs: ("?" + "&".join(f"{name}={value}" for name, value in pairs))
        if pairs else "")


METHODS = ["GET", "HEAD", "POST", "PUT", "DELETE", "LOCK", "UNLOCK", "PATCH", "OPTIONS",
           "get"]


#: Any method with any body.
anything = st.tuples(st.sampled_from(METHODS), bodies)


@st.composite
def requests(draw: st.DrawFn, templates: list[str], names: list[str],
             shapes: st.SearchStrategy[tuple[str, bytes | None]] = anything,
             ) -> tuple[str, str, bytes | None]:
    """A method and a body (one of C{shapes}, or anything), a path from one
    of C{templates} ({s}: a segment) with a query of C{names}."""
    path = draw(st.sampled_from(templates))
    while "{s}" in path:
        path = path.replace("{s}", draw(segments), 1)
    method, body = draw(st.one_of(shapes, anything))
    return method, path + draw(query(names)), body


@st.composite
def tfe_bodies(draw: st.DrawFn) -> bytes:
    """JSON:API documents of the TFE lane (a workspace, a state version, a
    lock reason, tags) with hostile values where a client puts text."""
    value = draw(st.one_of(st.sampled_from(['"fuzz"', '"ws-1"', '"app"', "3", '"abc"']),
                           _value))
    kind = draw(st.sampled_from(["workspaces", "state-versions", "tags", "tag-bindings",
                                 "vars"]))
    templates = [
        '{"data":{"type":"KIND","attributes":{"name":VALUE}}}',
        '{"data":{"type":"state-versions","attributes":{"serial":VALUE,"md5":VALUE,'
        '"lineage":VALUE}}}',
        '{"reason":VALUE}',
        '{"data":[{"type":"KIND","attributes":{"key":VALUE,"value":VALUE}}]}',
        '{"data":{"type":"workspaces","attributes":{"name":"fuzz"},"relationships":'
        '{"tags":{"data":[{"type":"tags","attributes":{"name":VALUE}}]}}}}',
    ]
    template = draw(st.sampled_from(templates))
    return template.replace("KIND", kind).replace("VALUE", value).encode()


#: Control-API bodies: objects of its members with hostile values.
control_bodies = st.dictionaries(
    st.sampled_from(["slug", "name", "environment", "workspace", "scope", "state", "x"]),
    st.one_of(_ESCAPED_TEXT.map(lambda text: f'"{text}"'), json_text,
              st.sampled_from(['"fuzz"', '"default"', '"read"', '"write"', '"acme2"'])),
    max_size=4).map(lambda members: ("{" + ",".join(
        f'"{key}":{value}' for key, value in members.items()) + "}").encode())


#: The read views of what a tenant stores: none may ever fail on a stored record.
READ_VIEWS = [
    "/v1/native/states", "/v1/native/states/fuzzed", "/v1/native/states/fuzzed/-/lock",
    "/v1/native/states/app", "/v1/native/states/held",
    "/v1/native/states/new", "/v1/native/states/app/-/lock", "/v1/native/states/held/-/lock",
    "/v1/native/states/new/-/lock", "/v1/native/states/app/-/versions",
    "/v1/native/states/app/-/diff", "/v1/native/states/app/-/outputs",
    "/v1/native/states/app/-/resources", "/v1/native/resources", "/v1/native/events",
    "/v1/native/events/verify", "/v1/native/events/head", "/v1/states/app",
    "/ui/", "/ui/states/app", "/ui/states/held", "/ui/states/fuzzed", "/ui/audit",
    "/ui/audit/verify", "/ui/audit?before=2", "/ui/audit?after=1&by=x",
    "/ui/states/app/-/history", "/ui/states/fuzzed/-/history", "/ui/states/fuzzed/-/diff",
    "/ui/search?type=t", "/api/v2/organizations/default/workspaces",
    "/api/v2/organizations/default/workspaces/app",
    "/api/v2/organizations/default/workspaces/app?include=outputs",
]


def read_views_answer(harness: Harness) -> None:
    """Every read view answers below 500 with JSON, and the chains verify."""
    for path in READ_VIEWS:
        reply = harness.state_request("GET", path)
        check_answer(reply, (), (), f"GET {path}")
    assert harness.state_request("GET", "/v1/native/events/verify").json()["verified"]
    for tenant in harness.wait(lambda: harness.store.list_tenants(include_deleted=True)):
        for view in ("states", "events", "events/verify"):
            reply = harness.control_request("GET", f"/v1/api/tenants/{tenant.id}/{view}")
            check_answer(reply, (), (), f"GET control {view}")


def fuzz(harness: Harness, lane: Callable[..., Reply],
         request: tuple[str, str, bytes | None]) -> Reply:
    """Send one request through C{lane} and check what every answer promises;
    when it stored something, every read view must still answer."""
    method, path, body = request
    for placeholder, value in harness.placeholders.items():
        path = path.replace(placeholder, value)
    before = harness.snapshot()
    reply = lane(method, path, body)
    after = harness.snapshot()
    check_answer(reply, before, after, f"{method} {path} {body!r:.200}")
    if after != before:
        read_views_answer(harness)
    return reply


def still_serving(harness: Harness) -> None:
    """After the fuzzing: both listeners answer, every read view answers,
    and every chain verifies."""
    assert harness.state_request("GET", "/healthz").status == 200
    assert harness.control_request("GET", "/healthz").status == 200
    read_views_answer(harness)
    for tenant in harness.wait(lambda: harness.store.list_tenants(include_deleted=True)):
        check = harness.control_request("GET", f"/v1/api/tenants/{tenant.id}/events/verify")
        assert check.status == 200 and check.json()["ok"] is True, check.body
