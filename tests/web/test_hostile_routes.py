"""Every route family of both listeners (the state lane, the native API,
the control API, health and metrics, the dashboard, the TFE lane), fuzzed with hostile input on both
stores (property-based, hypothesis), in process through the real
L{KilolockSite}: no input is answered 5xx, a JSON answer is always JSON,
nothing is stored from a refused request, and the server serves on
afterwards with every audit chain intact.

The PostgreSQL store runs fewer examples (each is a few round trips to a
real database); the memory store runs many.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import pytest_twisted
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.hostile_support import (
    STORES,
    Harness,
    Reply,
    bodies,
    control_bodies,
    fuzz,
    lock_infos,
    make_harness,
    requests,
    state_texts,
    still_serving,
    tfe_bodies,
)

#: Examples per route family and store.
EXAMPLES = {"memory": 120, "postgres": 20}
#: Examples per focused body test and store.
BODY_EXAMPLES = {"memory": 80, "postgres": 12}


@pytest.fixture(params=STORES)
def harness(request: pytest.FixtureRequest) -> Iterator[Harness]:
    """A seeded harness on each store; after the test it must still serve."""
    built = make_harness(request)
    yield built
    still_serving(built)


STATE_LANE = requests(
    ["/v1/states/{s}", "/v1/states/{s}/lock", "/v1/state-unlock/{s}", "/v1/states/{s}/{s}/{s}",
     "/v1/states/{s}/{s}/{s}/lock", "/v1/state-unlock/{s}/{s}/{s}", "/v1/states",
     "/v1/states/{s}/{s}", "/v1/states/app", "/v1/states/held", "/v1/states/held/lock",
     "/v1/state-unlock/held", "/v1/states/new", "/v1/states/new", "/v1/states/new/lock",
     "/v1/state-unlock/new", "/v1/states/app"],
    ["ID"],
    st.one_of(st.tuples(st.just("LOCK"), lock_infos()),
              st.tuples(st.sampled_from(["POST", "PUT"]), state_texts()),
              st.tuples(st.sampled_from(["UNLOCK", "DELETE"]), st.one_of(lock_infos(), bodies)),
              st.tuples(st.just("POST"), lock_infos())))

NATIVE = requests(
    ["/v1/native", "/v1/native/states", "/v1/native/states/", "/v1/native/states/{s}",
     "/v1/native/states/{s}/-/{s}", "/v1/native/states/app/-/versions",
     "/v1/native/states/app/-/versions/{s}", "/v1/native/states/app/-/diff",
     "/v1/native/states/app/-/outputs", "/v1/native/states/app/-/resources",
     "/v1/native/states/{s}/-/lock", "/v1/native/states/held/-/lock",
     "/v1/native/states/app/-/events", "/v1/native/states/app/-/rollback",
     "/v1/native/states/held/-/rollback", "/v1/native/resources", "/v1/native/events",
     "/v1/native/events/verify", "/v1/native/events/head", "/v1/native/{s}"],
    ["type", "address", "module", "attribute", "state", "limit", "kind", "since", "until",
     "after", "last", "from", "to", "version", "head", "ID"],
    st.tuples(st.just("POST"), st.sampled_from([
        b'{"version": 1}', b'{"version": 2147483648}', b'{"version": 1e400}',
        b'{"version": 9999999999999999999999}', b'{"version": 1, "x": "\\ud800"}'])))

CONTROL = requests(
    ["/v1/api/tenants", "/v1/api/tenants/{s}", "/v1/api/tenants/acme",
     "/v1/api/tenants/{s}/states", "/v1/api/tenants/acme/workspaces",
     "/v1/api/tenants/acme/workspaces/{s}",
     "/v1/api/tenants/acme/workspaces/default/environments",
     "/v1/api/tenants/acme/workspaces/default/environments/{s}",
     "/v1/api/tenants/acme/tokens", "/v1/api/tenants/acme/tokens/{s}",
     "/v1/api/tenants/{s}/events", "/v1/api/tenants/acme/events/verify", "/v1/api/{s}",
     "/v1/api/tenants/acme/oidc-policy", "/v1/{s}", "/healthz"],
    ["deleted", "states", "state", "kind", "since", "until", "head"],
    st.tuples(st.sampled_from(["POST", "PUT", "DELETE"]), control_bodies))

DASHBOARD = requests(
    ["/ui/", "/ui/{s}", "/ui/states/{s}", "/ui/states/app", "/ui/states/{s}/-/{s}",
     "/ui/states/app/-/history", "/ui/states/app/-/diff", "/ui/states/app/-/versions/{s}",
     "/ui/states/held/-/unlock", "/ui/audit", "/ui/audit/verify", "/ui/search",
     "/ui/sign-in", "/ui/sign-out", "/ui/static/{s}", "/"],
    ["kind", "state", "by", "page", "before", "after", "type", "address", "module",
     "attribute", "from", "to", "q", "sort", "next", "token", "csrf"])

TFE = requests(
    ["/api/v2/ping", "/api/v2/{s}", "/api/v2/organizations", "/api/v2/organizations/{s}",
     "/api/v2/organizations/default/entitlement-set", "/api/v2/organizations/default/workspaces",
     "/api/v2/organizations/default/workspaces/{s}",
     "/api/v2/organizations/default/workspaces/app",
     "/api/v2/organizations/default/workspaces/{s}/actions/safe-delete",
     "/api/v2/workspaces/{s}", "/api/v2/workspaces/{s}/actions/lock",
     "/api/v2/workspaces/{app-ws}", "/api/v2/workspaces/{app-ws}/actions/lock",
     "/api/v2/workspaces/{app-ws}/actions/unlock",
     "/api/v2/workspaces/{app-ws}/actions/force-unlock",
     "/api/v2/workspaces/{app-ws}/current-state-version",
     "/api/v2/workspaces/{app-ws}/current-state-version-outputs",
     "/api/v2/workspaces/{app-ws}/state-versions", "/api/v2/workspaces/{app-ws}/tag-bindings",
     "/api/v2/workspaces/{app-ws}/relationships/tags",
     "/api/v2/workspaces/{s}/actions/unlock", "/api/v2/workspaces/{s}/actions/force-unlock",
     "/api/v2/workspaces/{s}/current-state-version",
     "/api/v2/workspaces/{s}/current-state-version-outputs",
     "/api/v2/workspaces/{s}/state-versions", "/api/v2/workspaces/{s}/tag-bindings",
     "/api/v2/workspaces/{s}/relationships/tags", "/api/v2/state-versions/{s}",
     "/api/v2/state-versions/{s}/download", "/api/v2/state-version-outputs/{s}",
     "/api/v2/state-version-uploads/{s}/state", "/.well-known/terraform.json"],
    ["search[name]", "search[tags]", "search[wildcard-name]", "page[number]", "page[size]",
     "include", "grant", "filter[tagged][0][key]"],
    st.tuples(st.sampled_from(["POST", "PATCH", "PUT"]), st.one_of(tfe_bodies(),
                                                                 state_texts())))

HEALTH = requests(
    ["/healthz", "/readyz", "/metrics", "/", "/.well-known/kilolock", "/healthz/{s}",
     "/readyz/{s}", "/metrics/{s}", "/{s}", "/.well-known/{s}", "/v1", "/v1/{s}"],
    ["x", "format"])


def _state(harness: Harness) -> Callable[..., Reply]:
    return harness.state_request


def _control(harness: Harness) -> Callable[..., Reply]:
    return harness.control_request


FAMILIES = {
    "state-lane": (STATE_LANE, _state),
    "native": (NATIVE, _state),
    "control": (CONTROL, _control),
    "health-metrics": (HEALTH, _state),
    "dashboard": (DASHBOARD, _state),
    "tfe": (TFE, _state),
}


def examples(harness: Harness, table: dict[str, int]) -> settings:
    """The hypothesis settings of a test on C{harness}'s store."""
    return settings(max_examples=table[harness.kind],
                    deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest_twisted.ensureDeferred
async def test_no_input_reaches_a_5xx_or_stores_anything_when_refused(harness: Harness,
                                                               family: str) -> None:
    """Hostile methods, paths, queries and bodies on one route family: every
    answer is below 500, JSON when it says so, and a refused request leaves
    the store as it was; the server serves on afterwards."""
    strategy, lane_of = FAMILIES[family]
    lane = lane_of(harness)

    @examples(harness, EXAMPLES)
    @given(strategy)
    def one(request: Any) -> None:
        fuzz(harness, lane, request)
        harness.release("app", "new")

    await harness.run(one)


#: Where a LockInfo goes: LOCK (and its alias) to take, UNLOCK (and its
#: aliases) to release.
LOCK_ROUTES = [("LOCK", "/v1/states/app"), ("POST", "/v1/states/app/lock")]
UNLOCK_ROUTES = [("UNLOCK", "/v1/states/app"), ("DELETE", "/v1/states/app/lock"),
                 ("POST", "/v1/state-unlock/app")]


@pytest_twisted.ensureDeferred
async def test_a_lock_body_is_refused_or_never_breaks_a_read(harness: Harness) -> None:
    """A LockInfo with hostile members, taken through each lock route: it is
    refused (400, nothing stored) or taken, and then every read view answers
    and the same body releases it through each unlock route."""

    @examples(harness, BODY_EXAMPLES)
    @given(lock_infos(), st.sampled_from(LOCK_ROUTES), st.sampled_from(UNLOCK_ROUTES))
    def one(body: bytes, take: tuple[str, str], release: tuple[str, str]) -> None:
        harness.release("app")
        taken = fuzz(harness, harness.state_request, (*take, body))
        assert taken.status in (200, 400), taken.body
        fuzz(harness, harness.state_request, (*release, body))
        harness.release("app")

    await harness.run(one)


@pytest_twisted.ensureDeferred
async def test_a_state_body_is_refused_or_never_breaks_a_read(harness: Harness) -> None:
    """A state with hostile text and numbers where Terraform puts them: it is
    refused (nothing stored) or stored, and then every read view answers --
    the diff against the version before, its outputs and resources, a
    rollback to it."""

    @examples(harness, BODY_EXAMPLES)
    @given(state_texts())
    def one(body: bytes) -> None:
        harness.delete("fuzzed")
        harness.state_request("POST", "/v1/states/fuzzed", b'{"version": 4, "serial": 1,'
                              b' "lineage": "l", "resources": []}')
        stored = fuzz(harness, harness.state_request, ("POST", "/v1/states/fuzzed", body))
        assert stored.status in (200, 400), stored.body
        for path in ("/-/diff", "/-/outputs", "/-/outputs?version=2", "/-/resources",
                     "/-/versions/2", "/-/versions"):
            fuzz(harness, harness.state_request, ("GET", "/v1/native/states/fuzzed" + path,
                                                 None))
        fuzz(harness, harness.state_request, ("POST", "/v1/native/states/fuzzed/-/rollback",
                                             b'{"version": 2}'))
        fuzz(harness, harness.state_request, ("GET", "/v1/native/states/fuzzed/-/diff", None))

    await harness.run(one)


@pytest_twisted.ensureDeferred
async def test_a_control_body_is_refused_or_never_breaks_a_read(harness: Harness) -> None:
    """Control-API bodies with hostile members on every route that takes
    one: refused (400, nothing stored) or stored, and every read answers."""
    routes = ["/v1/api/tenants", "/v1/api/tenants/acme/workspaces",
              "/v1/api/tenants/acme/workspaces/default/environments",
              "/v1/api/tenants/acme/tokens"]

    @examples(harness, BODY_EXAMPLES)
    @given(control_bodies, st.sampled_from(routes))
    def one(body: bytes, path: str) -> None:
        reply = fuzz(harness, harness.control_request, ("POST", path, body))
        assert reply.status in (201, 400, 404, 409), reply.body
        for view in ("", "/acme", "/acme/workspaces", "/acme/tokens", "/acme/events"):
            fuzz(harness, harness.control_request, ("GET", "/v1/api/tenants" + view, None))

    await harness.run(one)


@pytest_twisted.ensureDeferred
async def test_a_tfe_document_is_refused_or_never_breaks_a_read(harness: Harness) -> None:
    """JSON:API documents with hostile values on the TFE lane's routes that
    take one (a workspace, a lock reason, a state version, tags): refused
    (4xx, nothing stored) or stored, and every read view answers."""
    routes = [("POST", "/api/v2/organizations/default/workspaces"),
              ("POST", "/api/v2/workspaces/{app-ws}/actions/lock"),
              ("POST", "/api/v2/workspaces/{app-ws}/state-versions"),
              ("PATCH", "/api/v2/workspaces/{app-ws}"),
              ("PATCH", "/api/v2/workspaces/{app-ws}/tag-bindings"),
              ("POST", "/api/v2/workspaces/{app-ws}/relationships/tags")]

    @examples(harness, BODY_EXAMPLES)
    @given(tfe_bodies(), st.sampled_from(routes))
    def one(body: bytes, route: tuple[str, str]) -> None:
        fuzz(harness, harness.state_request, (*route, body))
        harness.release("app")

    await harness.run(one)
