
"""The store contract of the TFE lane (L{ITFEStore}): one suite, run against
both stores through the fixtures of C{test_store_contract.py} (the memory
store, and the PostgreSQL store on a fresh database)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest_twisted
from zope.interface.verify import verifyObject

from kilolock.core.audit import first_broken_link
from kilolock.core.errors import ChecksumMismatch, NotFound
from kilolock.core.model import DEFAULT_TENANT, Principal, StateKey
from kilolock.store.interfaces.tfe import ITFEStore
from kilolock.tfe import grants
from kilolock.tfe.errors import InvalidAttribute, WorkspaceExists
from kilolock.tfe.model import (
    DISCARDED,
    FINALIZED,
    JSON_PART,
    PENDING,
    STATE_PART,
    TFE_TAGS_UPDATE,
    TFE_WORKSPACE_CREATE,
    TFE_WORKSPACE_DELETE,
    UPLOADING,
    PendingVersion,
    Tag,
)
from kilolock.tfe.names import MAX_TAGS, is_workspace_id, new_pending_id
from tests.contract.test_store_contract import failure_of
from tests.support.stores import FakeClock, upload
from tests.support.stub_client import state_body

ALICE = Principal(DEFAULT_TENANT, "alice")
APP = StateKey(DEFAULT_TENANT, "app")
MD5 = "0123456789abcdef0123456789abcdef"


def pending_for(workspace_id: str, clock: FakeClock, key: StateKey = APP,
                grant: str = "the-grant") -> PendingVersion:
    return PendingVersion(id=new_pending_id(), workspace_id=workspace_id, key=key, serial=3,
                          lineage="l-1", md5=MD5, lock_id="lock-1", principal="alice",
                          grant_hash=grants.grant_hash(grant), created_at=clock(),
                          expires_at=clock() + grants.GRANT_LIFETIME)


@pytest_twisted.ensureDeferred
async def test_provides_itfestore(store: Any) -> None:
    """The store provides every method of ITFEStore with matching signatures."""
    assert verifyObject(ITFEStore, store)


@pytest_twisted.ensureDeferred
async def test_create_find_by_key_and_id_and_events(store: Any, clock: FakeClock) -> None:
    """A created workspace has a ws- id, its tags in order, and is found by its
    state's key and by its id (in its tenant only); the creation is an audit
    event of the state's path, in an intact chain."""
    created = await store.tfe_create_workspace(APP, [Tag("web"), Tag("env", "prod")], ALICE)
    assert is_workspace_id(created.id)
    assert (created.key, created.name, created.created_at) == (APP, "app", clock())
    assert created.tags == (Tag("web"), Tag("env", "prod"))
    assert await store.tfe_find_workspace(APP) == created
    assert await store.tfe_workspace_by_id(DEFAULT_TENANT, created.id) == created
    assert await store.tfe_workspace_by_id("tn_000000000000", created.id) is None
    assert await store.tfe_workspace_by_id(DEFAULT_TENANT, "ws-AAAAAAAAAAAAAAAA") is None
    events = await store.list_events(DEFAULT_TENANT)
    assert [(event.kind, event.state_path) for event in events] == [
        (TFE_WORKSPACE_CREATE, "app")]
    assert first_broken_link(events) is None


@pytest_twisted.ensureDeferred
async def test_create_is_refused_when_the_workspace_or_its_state_exists(store: Any) -> None:
    """A second creation of a name, or the creation of a workspace whose state
    exists already, is WorkspaceExists (422) and records nothing."""
    await store.tfe_create_workspace(APP, [], ALICE)
    await failure_of(store.tfe_create_workspace(APP, [], ALICE), WorkspaceExists)
    other = StateKey(DEFAULT_TENANT, "written")
    await store.write_state(other, upload(state_body(1)), None, ALICE)
    await failure_of(store.tfe_create_workspace(other, [], ALICE), WorkspaceExists)
    kinds = [event.kind for event in await store.list_events(DEFAULT_TENANT)]
    assert kinds.count(TFE_WORKSPACE_CREATE) == 1


@pytest_twisted.ensureDeferred
async def test_a_state_written_elsewhere_is_adopted_once(store: Any) -> None:
    """A state written through the HTTP lane has no record until the TFE lane
    looks it up (adopt) or lists it; then it keeps one id."""
    await store.write_state(APP, upload(state_body(1)), None, ALICE)
    assert await store.tfe_find_workspace(APP, adopt=False) is None
    adopted = await store.tfe_find_workspace(APP)
    assert adopted is not None and adopted.tags == ()
    assert await store.tfe_find_workspace(APP) == adopted
    assert [w.id for w in await store.tfe_list_workspaces(DEFAULT_TENANT, None)] == [
        adopted.id]
    assert await store.tfe_find_workspace(StateKey(DEFAULT_TENANT, "none")) is None


@pytest_twisted.ensureDeferred
async def test_listing_sees_only_what_the_scope_can_address(store: Any) -> None:
    """A whole-tenant listing holds its one-segment states (adopted on the way,
    three-segment ones left out, names a workspace cannot have left out); a
    scoped listing holds the states under its prefix, by name."""
    for path in ("b", "a", "x/y/z", "ws_1/env_1/prod", "ws_1/env_1/dev", "ws_1/env_2/qa"):
        await store.write_state(StateKey(DEFAULT_TENANT, path), upload(state_body(1)), None,
                                ALICE)
    await store.tfe_create_workspace(StateKey(DEFAULT_TENANT, "c"), [], ALICE)
    whole = await store.tfe_list_workspaces(DEFAULT_TENANT, None)
    assert [w.name for w in whole] == ["a", "b", "c"]
    scoped = await store.tfe_list_workspaces(DEFAULT_TENANT, "ws_1/env_1/")
    assert [(w.name, w.key.path) for w in scoped] == [("dev", "ws_1/env_1/dev"),
                                                      ("prod", "ws_1/env_1/prod")]
    assert await store.tfe_list_workspaces("tn_000000000000", None) == []


@pytest_twisted.ensureDeferred
async def test_tags_merge_and_are_audited_only_when_they_change(store: Any) -> None:
    """Added tags merge by key: a value sets it, a plain tag never clears one;
    an addition that changes nothing appends no event; too many is 422."""
    created = await store.tfe_create_workspace(APP, [Tag("env", "prod")], ALICE)
    updated = await store.tfe_add_tags(DEFAULT_TENANT, created.id,
                                       [Tag("env"), Tag("web"), Tag("tier", "1")], ALICE)
    assert updated.tags == (Tag("env", "prod"), Tag("web"), Tag("tier", "1"))
    assert await store.tfe_find_workspace(APP) == updated
    assert await store.tfe_add_tags(DEFAULT_TENANT, created.id, [Tag("web")], ALICE) == updated
    kinds = [event.kind for event in await store.list_events(DEFAULT_TENANT)]
    assert kinds == [TFE_WORKSPACE_CREATE, TFE_TAGS_UPDATE]
    await failure_of(store.tfe_add_tags(DEFAULT_TENANT, created.id,
                                        [Tag(f"t{i}") for i in range(MAX_TAGS)], ALICE),
                     InvalidAttribute)
    await failure_of(store.tfe_add_tags("tn_000000000000", created.id, [Tag("x")], ALICE),
                     NotFound)


@pytest_twisted.ensureDeferred
async def test_delete_forgets_the_record_and_its_pending_versions(
        store: Any, clock: FakeClock) -> None:
    """Deleting a workspace forgets its record and pending versions and is
    audited; deleting an unknown or foreign id does nothing."""
    created = await store.tfe_create_workspace(APP, [], ALICE)
    pending = pending_for(created.id, clock)
    await store.tfe_create_pending_version(pending)
    await store.tfe_delete_workspace("tn_000000000000", created.id, ALICE)
    assert await store.tfe_find_workspace(APP) == created
    await store.tfe_delete_workspace(DEFAULT_TENANT, created.id, ALICE)
    assert await store.tfe_find_workspace(APP) is None
    assert await store.tfe_pending_version(pending.id) is None
    kinds = [event.kind for event in await store.list_events(DEFAULT_TENANT)]
    assert kinds == [TFE_WORKSPACE_CREATE, TFE_WORKSPACE_DELETE]


@pytest_twisted.ensureDeferred
async def test_pending_version_round_trip_and_claims(store: Any, clock: FakeClock) -> None:
    """A pending version is kept as given; its state part is claimed once
    (then uploading), with the right grant and MD5 only; its JSON part once;
    a reopened claim (the database was out of reach) can be claimed again;
    settling finalizes it with the version's number."""
    created = await store.tfe_create_workspace(APP, [], ALICE)
    pending = pending_for(created.id, clock)
    await store.tfe_create_pending_version(pending)
    assert await store.tfe_pending_version(pending.id) == pending
    wrong = grants.grant_hash("another")
    right = grants.grant_hash("the-grant")
    await failure_of(store.tfe_claim_upload(pending.id, wrong, STATE_PART, MD5), NotFound)
    await failure_of(store.tfe_claim_upload("sv-nope", right, STATE_PART, MD5), NotFound)
    await failure_of(store.tfe_claim_upload(pending.id, right, STATE_PART, "f" * 32),
                     ChecksumMismatch)
    assert (await store.tfe_pending_version(pending.id)).status == PENDING
    claimed = await store.tfe_claim_upload(pending.id, right, STATE_PART, MD5)
    assert claimed == pending
    assert (await store.tfe_pending_version(pending.id)).status == UPLOADING
    await failure_of(store.tfe_claim_upload(pending.id, right, STATE_PART, MD5), NotFound)
    await store.tfe_claim_upload(pending.id, right, JSON_PART, None)
    await failure_of(store.tfe_claim_upload(pending.id, right, JSON_PART, None), NotFound)
    await store.tfe_settle_upload(pending.id, None, reopen=True)
    assert (await store.tfe_pending_version(pending.id)).status == PENDING
    await store.tfe_claim_upload(pending.id, right, STATE_PART, MD5)
    await store.tfe_settle_upload(pending.id, 7)
    settled = await store.tfe_pending_version(pending.id)
    assert (settled.status, settled.version, settled.json_received) == (FINALIZED, 7, True)


@pytest_twisted.ensureDeferred
async def test_grants_expire_and_discarded_versions_stay_unusable(
        store: Any, clock: FakeClock) -> None:
    """A grant is refused from its expiry on (the store's clock); a settled
    discard is final; long-expired pending versions are forgotten when a new
    one is created."""
    created = await store.tfe_create_workspace(APP, [], ALICE)
    right = grants.grant_hash("the-grant")
    expiring = pending_for(created.id, clock)
    await store.tfe_create_pending_version(expiring)
    clock.advance(grants.GRANT_LIFETIME.total_seconds())
    await failure_of(store.tfe_claim_upload(expiring.id, right, STATE_PART, MD5), NotFound)
    assert (await store.tfe_pending_version(expiring.id)).status_at(clock()) == DISCARDED
    discarded = pending_for(created.id, clock)
    await store.tfe_create_pending_version(discarded)
    await store.tfe_claim_upload(discarded.id, right, STATE_PART, MD5)
    await store.tfe_settle_upload(discarded.id, None)
    await failure_of(store.tfe_claim_upload(discarded.id, right, STATE_PART, MD5), NotFound)
    assert (await store.tfe_pending_version(discarded.id)).status == DISCARDED
    clock.advance((grants.PENDING_RETENTION + timedelta(seconds=1)).total_seconds())
    await store.tfe_create_pending_version(pending_for(created.id, clock))
    assert await store.tfe_pending_version(expiring.id) is None
