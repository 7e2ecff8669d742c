"""The store contract of what the dashboard asks: a paged, filtered, sorted
state listing (L{IStateStore.list_states_page}), browser sessions
(L{ISessionStore}) and the force release's event detail, on both stores
(the fixtures of tests/contract/test_store_contract.py)."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest_twisted
from zope.interface.verify import verifyObject

from kilolock.core.errors import BadRequest
from kilolock.core.events import LOCK_FORCE_RELEASE
from kilolock.core.model import DEFAULT_TENANT, Principal, StateKey, UiSession
from kilolock.rules.listing import MAX_PAGE, STATE_SORTS, StateListQuery
from kilolock.store.interfaces.sessions import ISessionStore
from kilolock.store.interfaces.tfe import ITFEStore
from kilolock.tfe.model import Tag
from tests.support.awaiting import failure_of
from tests.support.stores import ALICE, ENVELOPE, KEY, FakeClock, lock, upload, write
from tests.support.stub_client import state_body

NAMES = ["beta", "Alpha", "gamma-Prod", "delta", "prod-api", "épsilon"]


def key(name: str, tenant: str = DEFAULT_TENANT) -> StateKey:
    return StateKey(tenant, name)


async def seed(store: Any, clock: FakeClock) -> None:
    """Six states written one second apart with growing serials and sizes
    (the last written first), one locked, one with only a lock."""
    for index, name in enumerate(NAMES):
        resources = [{"mode": "managed", "type": "terraform_data", "name": f"r{n}",
                      "provider": 'provider["terraform.io/builtin/terraform"]',
                      "instances": [{"schema_version": 0, "attributes": {"id": f"{n}"}}]}
                     for n in range(index % 3)]
        await write(store, state_body(10 - index, resources=resources), key(name))
        clock.advance(1)
    await store.acquire_lock(key("delta"), lock("L1"), ALICE)
    clock.advance(1)
    await store.acquire_lock(key("zeta-only-lock"), lock("L2"), ALICE)
    await write(store, state_body(1), key("other", "acme"), principal=Principal("acme", "x"))


async def names(store: Any, **query: Any) -> list[str]:
    page = await store.list_states_page(DEFAULT_TENANT, StateListQuery(**query))
    return [listing.summary.key.path for listing in page.listings]


@pytest_twisted.ensureDeferred
async def test_listing_sorts_filters_and_pages(store: Any, clock: FakeClock) -> None:
    """By name (code points), filtered by an ASCII-case-insensitive
    substring, paged with the total of all matches, only the tenant's."""
    await seed(store, clock)
    everything = sorted([*NAMES, "zeta-only-lock"], key=lambda name: name.encode())
    assert await names(store) == everything
    assert await names(store, descending=True) == everything[::-1]
    assert await names(store, name_contains="PROD") == ["gamma-Prod", "prod-api"]
    assert await names(store, name_contains="ÉPS") == []  # only ASCII letters fold
    page = await store.list_states_page(DEFAULT_TENANT, StateListQuery(offset=2, limit=3))
    assert [listing.summary.key.path for listing in page.listings] == everything[2:5]
    assert page.total == 7
    past = await store.list_states_page(DEFAULT_TENANT, StateListQuery(offset=50, limit=3))
    assert (past.listings, past.total) == ((), 7)
    assert await names(store, path_prefix="prod") == ["prod-api"]


@pytest_twisted.ensureDeferred
async def test_listing_sorts_by_each_value_missing_ones_first(store: Any,
                                                               clock: FakeClock) -> None:
    """Each sort: a state without the value first ascending, last
    descending; ties by path ascending either way."""
    await seed(store, clock)
    assert await names(store, sort="serial") == [
        "zeta-only-lock", "épsilon", "prod-api", "delta", "gamma-Prod", "Alpha", "beta"]
    assert await names(store, sort="serial", descending=True) == [
        "beta", "Alpha", "gamma-Prod", "delta", "prod-api", "épsilon", "zeta-only-lock"]
    updated = await names(store, sort="updated", descending=True)
    assert updated == ["zeta-only-lock", "épsilon", "prod-api", "delta", "gamma-Prod",
                       "Alpha", "beta"]
    assert await names(store, sort="locked") == [
        "Alpha", "beta", "gamma-Prod", "prod-api", "épsilon", "delta", "zeta-only-lock"]
    assert await names(store, sort="resources", descending=True) == [
        "gamma-Prod", "épsilon", "Alpha", "prod-api", "beta", "delta", "zeta-only-lock"]
    sizes = await names(store, sort="size")
    assert sizes[0] == "zeta-only-lock"
    assert set(STATE_SORTS) == {"name", "updated", "serial", "resources", "size", "locked"}


@pytest_twisted.ensureDeferred
async def test_listing_carries_the_event_that_wrote_the_current_version(
        store: Any, clock: FakeClock) -> None:
    """Each listed state comes with the event of its current version's
    write (detail included); a state with only a lock has none."""
    await seed(store, clock)
    await store.write_state(key("beta"), upload(state_body(20)), None,
                            Principal(DEFAULT_TENANT, "ci", address="10.0.0.9"),
                            event_detail={"terraform_version": "1.15.5"})
    page = await store.list_states_page(DEFAULT_TENANT, StateListQuery())
    by_name = {listing.summary.key.path: listing for listing in page.listings}
    beta = by_name["beta"]
    assert beta.last_write is not None
    assert (beta.last_write.principal, beta.last_write.serial) == ("ci", 20)
    assert json.loads(beta.last_write.detail)["terraform_version"] == "1.15.5"
    assert json.loads(beta.last_write.detail)["client"] == "10.0.0.9"
    assert beta.summary.version_count == 2
    assert by_name["zeta-only-lock"].last_write is None
    assert by_name["delta"].summary.lock is not None


@pytest_twisted.ensureDeferred
async def test_listing_filters_by_tag_lock_and_last_change(store: Any,
                                                           clock: FakeClock) -> None:
    """A TFE workspace's tags come with its state and filter the listing (a
    key matches any value, KEY=VALUE that value); the lock filter keeps
    states locked, not locked, or locked before the stale moment; the change
    filter states not written since a moment. Filters combine; the total
    counts what they keep."""
    await seed(store, clock)
    tfe = ITFEStore(store)
    for name, tags in (("beta", [Tag("network"), Tag("team", "ops")]),
                       ("delta", [Tag("team", "web")])):
        workspace = await tfe.tfe_find_workspace(key(name))
        await tfe.tfe_add_tags(DEFAULT_TENANT, workspace.id, tags, ALICE)
    page = await store.list_states_page(DEFAULT_TENANT, StateListQuery(tag="team"))
    assert {listing.summary.key.path: listing.tags for listing in page.listings} == {
        "beta": (("network", ""), ("team", "ops")), "delta": (("team", "web"),)}
    assert page.total == 2
    assert await names(store, tag="team=ops") == ["beta"]
    assert await names(store, tag="team=") == []
    assert await names(store, tag="nothing") == []
    assert await names(store, lock="locked") == ["delta", "zeta-only-lock"]
    assert await names(store, lock="unlocked") == ["Alpha", "beta", "gamma-Prod", "prod-api",
                                                   "épsilon"]
    delta_locked = (await store.get_summary(key("delta"))).lock.acquired_at
    assert await names(store, lock="stale", stale_before=delta_locked
                       + timedelta(microseconds=1)) == ["delta"]
    assert await names(store, lock="stale", stale_before=delta_locked) == []
    third = (await store.get_summary(key("gamma-Prod"))).updated_at
    assert await names(store, unchanged_before=third) == ["Alpha", "beta"]
    assert await names(store, unchanged_before=third, tag="team") == ["beta"]
    assert await names(store, lock="locked", tag="team") == ["delta"]
    untagged = (await store.list_states_page(DEFAULT_TENANT, StateListQuery())).listings
    assert {listing.summary.key.path: listing.tags for listing in untagged}["Alpha"] == ()


@pytest_twisted.ensureDeferred
async def test_listing_refuses_unusable_queries(store: Any) -> None:
    """An unknown sort, a negative offset, a page of 0 or over the maximum,
    an unknown lock filter, a stale filter without its moment, a tag filter
    without a key: BadRequest, from both stores."""
    for query in (StateListQuery(sort="colour"), StateListQuery(offset=-1),
                  StateListQuery(limit=0), StateListQuery(limit=MAX_PAGE + 1),
                  StateListQuery(lock="jammed"), StateListQuery(lock="stale"),
                  StateListQuery(tag="=ops")):
        error = await failure_of(store.list_states_page(DEFAULT_TENANT, query), BadRequest)
        assert error.status == 400, query


@pytest_twisted.ensureDeferred
async def test_listing_shows_an_encrypted_state_unprojected(store: Any) -> None:
    """An OpenTofu envelope is listed with its version, not projected."""
    await write(store, ENVELOPE)
    [listing] = (await store.list_states_page(DEFAULT_TENANT, StateListQuery())).listings
    assert listing.summary.current is not None
    assert listing.summary.current.projected is False


def session(id_hash: str, clock: FakeClock, seconds: float = 60,
            principal: Principal | None = None) -> UiSession:
    return UiSession(id_hash=id_hash,
                     principal=principal or Principal("tn_1", "token:web", scope="read",
                                                      workspace_id="ws_1",
                                                      env_public_id="env_1", token_id="tok_1"),
                     credential_digest="d" * 64, csrf="c" * 32, created_at=clock.now,
                     expires_at=clock.now + timedelta(seconds=seconds))


@pytest_twisted.ensureDeferred
async def test_sessions_are_kept_found_expired_and_deleted(store: Any,
                                                           clock: FakeClock) -> None:
    """A session is found by its hash until it expires; deleting it (or a
    new session after its expiry) removes it."""
    assert verifyObject(ISessionStore, store)
    kept = session("a" * 64, clock)
    await store.create_session(kept)
    assert await store.find_session("a" * 64, clock.now) == kept
    assert await store.find_session("b" * 64, clock.now) is None
    assert await store.find_session("a" * 64, clock.now + timedelta(seconds=60)) is None
    await store.delete_session("a" * 64)
    assert await store.find_session("a" * 64, clock.now) is None
    await store.delete_session("a" * 64)  # nothing left: no error
    await store.create_session(session("c" * 64, clock, seconds=5))
    clock.advance(10)
    await store.create_session(session("e" * 64, clock))
    assert await store.find_session("c" * 64, clock.now - timedelta(seconds=9)) is None


@pytest_twisted.ensureDeferred
async def test_force_release_records_the_detail_it_is_given(store: Any) -> None:
    """release_lock(lock_id=None, event_detail=...) is a lock_force_release
    whose detail carries the extra keys next to the holder's."""
    await write(store, state_body(1))
    await store.acquire_lock(KEY, lock("L9", who="ci@runner"), ALICE)
    released = await store.release_lock(KEY, None, ALICE, event_detail={"via": "dashboard"})
    assert released is not None and released.info.id == "L9"
    events = await store.list_events(DEFAULT_TENANT)
    assert events[-1].kind == LOCK_FORCE_RELEASE
    detail = json.loads(events[-1].detail)
    assert (detail["via"], detail["who"]) == ("dashboard", "ci@runner")
