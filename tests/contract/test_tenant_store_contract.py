
"""The store contract for hosted mode (L{ITenantStore}): one suite, run
against both stores through the very fixtures of C{test_store_contract.py}
(the memory store, and the PostgreSQL store on a fresh database)."""

from __future__ import annotations

import json
from typing import Any

import pytest_twisted
from twisted.internet.defer import DeferredList
from zope.interface.verify import verifyObject

from kilolock.core.audit import first_broken_link
from kilolock.core.errors import (
    AlreadyExists,
    EnvironmentNotFound,
    InvalidField,
    NotEmpty,
    TenantNotFound,
    TokenNotFound,
    Unauthorized,
    WorkspaceNotFound,
)
from kilolock.core.events import (
    STATE_DELETE,
    STATE_WRITE,
    TENANT_CREATE,
    TENANT_DELETE,
    TOKEN_CREATE,
    TOKEN_REVOKE,
)
from kilolock.core.model import Principal, StateKey
from kilolock.rules import hosted
from kilolock.store.interfaces.states import IStateStore
from kilolock.store.interfaces.tenants import ITenantStore
from tests.contract.test_store_contract import failure_of
from tests.support.hosted_support import CONTROL, default_env
from tests.support.stores import FakeClock, lock, postgres_store, upload
from tests.support.stub_client import state_body


def token_principal(issued: Any) -> Principal:
    token = issued.token
    return Principal(token.tenant_id, f"token:{token.name}", token.scope, token.workspace_id,
                     token.env_public_id, token.id)


async def kinds(store: Any, tenant_id: str) -> list[str]:
    return [event.kind for event in await store.list_events(tenant_id)]


@pytest_twisted.ensureDeferred
async def test_provides_itenantstore_next_to_istatestore(store: Any) -> None:
    """The same store object provides both interfaces completely."""
    assert verifyObject(ITenantStore, store)
    assert verifyObject(IStateStore, store)


@pytest_twisted.ensureDeferred
async def test_create_tenant_makes_default_workspace_and_environment(
        store: Any, clock: FakeClock) -> None:
    """A new tenant has a tn_ id, a workspace 'default' with an environment
    'default', and a first event tenant_create naming them (and the caller's address)."""
    tenant = await store.create_tenant("acme", "Acme Corp", CONTROL)
    assert hosted.is_public_id(tenant.id, "tn_")
    assert (tenant.slug, tenant.name, tenant.created_at, tenant.deleted_at) == (
        "acme", "Acme Corp", clock.now, None)
    workspace_id, env_id = await default_env(store, "acme")
    assert hosted.is_public_id(workspace_id, "ws_") and hosted.is_public_id(env_id, "env_")
    [event] = await store.list_events(tenant.id)
    assert (event.kind, event.principal, event.seq, event.state_path) == (
        TENANT_CREATE, "control", 1, None)
    assert json.loads(event.detail) == {"slug": "acme", "name": "Acme Corp",
                                        "workspace_id": workspace_id, "env_public_id": env_id,
                                        "client": "192.0.2.7"}
    assert await store.find_tenant("acme") == tenant
    assert await store.find_tenant(tenant.id) == tenant
    assert await store.find_tenant("nobody") is None
    assert await store.list_tenants() == [tenant]


@pytest_twisted.ensureDeferred
async def test_public_ids_are_random_and_plain_segments(store: Any) -> None:
    """Ids of two tenants differ and are lowercase hex after their prefix
    (nothing a URL would percent-encode)."""
    first = await store.create_tenant("one", "One", CONTROL)
    second = await store.create_tenant("two", "Two", CONTROL)
    ids = [first.id, second.id, *await default_env(store, "one"),
           *await default_env(store, "two")]
    assert len(set(ids)) == len(ids)
    for public_id in ids:
        prefix, _, digits = public_id.partition("_")
        assert prefix in ("tn", "ws", "env") and len(digits) == 12
        assert all(char in "0123456789abcdef" for char in digits)


@pytest_twisted.ensureDeferred
async def test_duplicate_and_invalid_slugs(store: Any) -> None:
    """A taken slug is AlreadyExists and a malformed one InvalidField, both
    naming the field 'slug'; neither leaves a tenant or an event behind."""
    await store.create_tenant("acme", "Acme", CONTROL)
    taken = await failure_of(store.create_tenant("acme", "Other", CONTROL), AlreadyExists)
    assert taken.field == "slug"
    for slug in ("", "Acme", "-acme", "acme-", "a" * 64, "tn_0123456789ab", "ac me", "ä"):
        bad = await failure_of(store.create_tenant(slug, "X", CONTROL), InvalidField)
        assert bad.field == "slug"
    bad_name = await failure_of(store.create_tenant("fine", "", CONTROL), InvalidField)
    assert bad_name.field == "name"
    assert [t.slug for t in await store.list_tenants()] == ["acme"]


@pytest_twisted.ensureDeferred
async def test_concurrent_creates_of_one_slug_have_one_winner(store: Any) -> None:
    """Ten simultaneous creations of the same slug: exactly one tenant exists."""
    results = await DeferredList([store.create_tenant("race", f"R{n}", CONTROL)
                                  for n in range(10)], consumeErrors=True)
    winners = [value for ok, value in results if ok]
    losers = [value for ok, value in results if not ok]
    assert len(winners) == 1
    assert all(failure.check(AlreadyExists) for failure in losers)
    assert len(await store.list_tenants()) == 1


@pytest_twisted.ensureDeferred
async def test_workspaces_and_environments(store: Any) -> None:
    """A new workspace comes with an environment 'default'; names are unique
    per tenant (workspaces) and per workspace (environments); ids and names
    both find them; unknown ones are not found."""
    tenant = await store.create_tenant("acme", "Acme", CONTROL)
    network = await store.create_workspace("acme", "network", CONTROL)
    assert network.tenant_id == tenant.id and network.name == "network"
    assert [e.name for e in await store.list_environments("acme", "network")] == ["default"]
    staging = await store.create_environment("acme", network.id, "staging", CONTROL)
    assert (staging.workspace_id, staging.tenant_id) == (network.id, tenant.id)
    # the same environment name in another workspace is fine
    await store.create_environment("acme", "default", "staging", CONTROL)
    names = [(w.name) for w in await store.list_workspaces(tenant.id)]
    assert names == ["default", "network"]
    assert len(await store.list_environments("acme")) == 4
    assert [e.name for e in await store.list_environments("acme", network.id)] == [
        "default", "staging"]

    taken = await failure_of(store.create_workspace("acme", "network", CONTROL), AlreadyExists)
    assert taken.field == "name"
    await failure_of(store.create_environment("acme", "network", "staging", CONTROL),
                     AlreadyExists)
    bad = await failure_of(store.create_workspace("acme", "ws_0123456789ab", CONTROL),
                           InvalidField)
    assert bad.field == "name"
    await failure_of(store.create_environment("acme", "nowhere", "x", CONTROL),
                     WorkspaceNotFound)
    await failure_of(store.create_workspace("nobody", "x", CONTROL), TenantNotFound)
    await failure_of(store.delete_environment("acme", "network", "env_0123456789ab", CONTROL),
                     EnvironmentNotFound)
    assert first_broken_link(await store.list_events(tenant.id)) is None


@pytest_twisted.ensureDeferred
async def test_workspaces_of_one_tenant_are_invisible_to_another(store: Any) -> None:
    """A workspace id of tenant A named under tenant B is not found."""
    await store.create_tenant("a", "A", CONTROL)
    await store.create_tenant("b", "B", CONTROL)
    a_workspace, a_env = await default_env(store, "a")
    await failure_of(store.create_environment("b", a_workspace, "x", CONTROL),
                     WorkspaceNotFound)
    await failure_of(store.list_environments("b", a_workspace), WorkspaceNotFound)
    await failure_of(store.delete_workspace("b", a_workspace, CONTROL), WorkspaceNotFound)
    bad = await failure_of(store.create_token("b", "t", a_workspace, a_env, "write", CONTROL),
                           InvalidField)
    assert bad.field == "workspace"


@pytest_twisted.ensureDeferred
async def test_create_token_shows_the_secret_once_and_stores_its_hash(store: Any) -> None:
    """create_token returns a kl_ secret; the token authenticates by the
    secret's SHA-256; listings and events never hold the secret or its hash."""
    tenant = await store.create_tenant("acme", "Acme", CONTROL)
    workspace_id, env_id = await default_env(store, "acme")
    issued = await store.create_token("acme", "terraform-ci", None, "default", "write", CONTROL)
    assert issued.secret.startswith("kl_") and len(issued.secret) == 46
    token = issued.token
    assert hosted.is_public_id(token.id, "tok_")
    assert (token.tenant_id, token.name, token.workspace_id, token.env_public_id,
            token.scope, token.revoked_at) == (tenant.id, "terraform-ci", workspace_id, env_id,
                                               "write", None)
    found = await store.authenticate_token(hosted.token_hash(issued.secret))
    assert found is not None and found.id == token.id
    assert await store.authenticate_token(hosted.token_hash(issued.secret + "x")) is None
    assert await store.authenticate_token(hosted.token_hash(issued.secret[:-1])) is None
    [listed] = await store.list_tokens("acme")
    assert listed.id == token.id and "kl_" not in repr(listed)
    assert "kl_" not in repr(issued)
    events = await store.list_events(tenant.id)
    assert [e.kind for e in events] == [TENANT_CREATE, TOKEN_CREATE]
    serialised = repr(events)
    assert issued.secret not in serialised
    assert hosted.token_hash(issued.secret) not in serialised
    assert json.loads(events[-1].detail)["token_id"] == token.id


@pytest_twisted.ensureDeferred
async def test_create_token_checks_its_fields(store: Any) -> None:
    """Unknown workspace or environment and an unknown scope are InvalidField
    naming the field; a live token's name is taken (AlreadyExists) until it
    is revoked; a read token can be created for a named workspace."""
    await store.create_tenant("acme", "Acme", CONTROL)
    network = await store.create_workspace("acme", "network", CONTROL)
    for workspace, environment, scope, field in (
            ("nowhere", "default", "write", "workspace"),
            (None, "nowhere", "write", "environment"),
            (None, "default", "owner", "scope")):
        error = await failure_of(store.create_token("acme", "t", workspace, environment,
                                                    scope, CONTROL), InvalidField)
        assert error.field == field
    bad_name = await failure_of(store.create_token("acme", "has space", None, "default",
                                                   "write", CONTROL), InvalidField)
    assert bad_name.field == "name"
    first = await store.create_token("acme", "ci", None, "default", "write", CONTROL)
    taken = await failure_of(store.create_token("acme", "ci", None, "default", "read",
                                                CONTROL), AlreadyExists)
    assert taken.field == "name"
    await store.revoke_token("acme", first.token.id, CONTROL)
    again = await store.create_token("acme", "ci", "network", "default", "read", CONTROL)
    assert (again.token.workspace_id, again.token.scope) == (network.id, "read")
    assert [t.name for t in await store.list_tokens("acme")] == ["ci", "ci"]


@pytest_twisted.ensureDeferred
async def test_revoked_token_no_longer_authenticates(store: Any, clock: FakeClock) -> None:
    """After revoke_token the secret is refused; revoking again changes
    nothing and appends no second event; the token stays listed, revoked."""
    tenant = await store.create_tenant("acme", "Acme", CONTROL)
    issued = await store.create_token("acme", "ci", None, "default", "write", CONTROL)
    clock.advance(5)
    revoked = await store.revoke_token("acme", issued.token.id, CONTROL)
    assert revoked.revoked_at == clock.now
    assert await store.authenticate_token(hosted.token_hash(issued.secret)) is None
    clock.advance(5)
    assert await store.revoke_token(tenant.id, issued.token.id, CONTROL) == revoked
    assert (await kinds(store, tenant.id)).count(TOKEN_REVOKE) == 1
    [listed] = await store.list_tokens("acme")
    assert listed.revoked_at == revoked.revoked_at


@pytest_twisted.ensureDeferred
async def test_token_of_another_tenant_looks_missing(store: Any) -> None:
    """Revoking tenant A's token id through tenant B is TokenNotFound, exactly
    like an id that never existed; the token keeps working."""
    await store.create_tenant("a", "A", CONTROL)
    await store.create_tenant("b", "B", CONTROL)
    issued = await store.create_token("a", "ci", None, "default", "write", CONTROL)
    foreign = await failure_of(store.revoke_token("b", issued.token.id, CONTROL), TokenNotFound)
    missing = await failure_of(store.revoke_token("b", "tok_000000000000", CONTROL),
                               TokenNotFound)
    assert (foreign.code, foreign.message) == (missing.code, missing.message)
    assert await store.authenticate_token(hosted.token_hash(issued.secret)) is not None
    assert await store.list_tokens("b") == []


@pytest_twisted.ensureDeferred
async def test_last_used_is_recorded_at_most_once_a_minute(
        store: Any, clock: FakeClock) -> None:
    """The first use records last_used_at; uses within the interval leave it;
    the first use after the interval records it again."""
    await store.create_tenant("acme", "Acme", CONTROL)
    issued = await store.create_token("acme", "ci", None, "default", "write", CONTROL)
    digest = hosted.token_hash(issued.secret)
    first_use = clock.now
    assert (await store.authenticate_token(digest)).last_used_at == first_use
    clock.advance(hosted.LAST_USED_INTERVAL - 1)
    assert (await store.authenticate_token(digest)).last_used_at == first_use
    [listed] = await store.list_tokens("acme")
    assert listed.last_used_at == first_use
    clock.advance(2)
    assert (await store.authenticate_token(digest)).last_used_at == clock.now
    [listed] = await store.list_tokens("acme")
    assert listed.last_used_at == clock.now


@pytest_twisted.ensureDeferred
async def test_workspace_or_environment_with_states_cannot_be_deleted(store: Any) -> None:
    """NotEmpty while a state (even a lock-only one) lives under the
    workspace or environment; nothing is deleted or revoked then."""
    tenant = await store.create_tenant("acme", "Acme", CONTROL)
    workspace_id, env_id = await default_env(store, "acme")
    issued = await store.create_token("acme", "ci", None, "default", "write", CONTROL)
    key = StateKey(tenant.id, f"{workspace_id}/{env_id}/prod")
    await store.acquire_lock(key, lock("held"), token_principal(issued))
    await failure_of(store.delete_environment("acme", workspace_id, env_id, CONTROL), NotEmpty)
    await failure_of(store.delete_workspace("acme", "default", CONTROL), NotEmpty)
    assert await store.authenticate_token(hosted.token_hash(issued.secret)) is not None
    assert await default_env(store, "acme") == (workspace_id, env_id)


@pytest_twisted.ensureDeferred
async def test_deleting_an_environment_revokes_its_tokens(store: Any) -> None:
    """Deleting an empty environment revokes exactly its tokens and records
    them in its event; a state can no longer be created under it (401)."""
    tenant = await store.create_tenant("acme", "Acme", CONTROL)
    workspace_id, _ = await default_env(store, "acme")
    staging = await store.create_environment("acme", "default", "staging", CONTROL)
    doomed = await store.create_token("acme", "doomed", None, staging.id, "write", CONTROL)
    kept = await store.create_token("acme", "kept", None, "default", "write", CONTROL)
    deleted = await store.delete_environment("acme", "default", "staging", CONTROL)
    assert deleted == staging
    assert await store.authenticate_token(hosted.token_hash(doomed.secret)) is None
    assert await store.authenticate_token(hosted.token_hash(kept.secret)) is not None
    [event] = [e for e in await store.list_events(tenant.id) if e.kind == "environment_delete"]
    assert json.loads(event.detail)["revoked_tokens"] == [doomed.token.id]
    orphan = StateKey(tenant.id, f"{workspace_id}/{staging.id}/prod")
    await failure_of(store.write_state(orphan, upload(state_body(1)), None,
                                       token_principal(doomed)), Unauthorized)
    await failure_of(store.acquire_lock(orphan, lock("x"), token_principal(doomed)),
                     Unauthorized)
    assert await store.get_summary(orphan) is None
    assert await store.list_states(tenant.id) == []
    assert first_broken_link(await store.list_events(tenant.id)) is None


@pytest_twisted.ensureDeferred
async def test_deleting_a_workspace_deletes_its_environments_and_revokes_tokens(
        store: Any) -> None:
    """An empty workspace goes with its environments and their tokens."""
    await store.create_tenant("acme", "Acme", CONTROL)
    network = await store.create_workspace("acme", "network", CONTROL)
    issued = await store.create_token("acme", "net", "network", "default", "write", CONTROL)
    assert await store.delete_workspace("acme", network.id, CONTROL) == network
    assert [w.name for w in await store.list_workspaces("acme")] == ["default"]
    assert len(await store.list_environments("acme")) == 1
    assert await store.authenticate_token(hosted.token_hash(issued.secret)) is None


@pytest_twisted.ensureDeferred
async def test_tenant_with_states_is_not_deleted_by_default(store: Any) -> None:
    """delete_tenant refuses (NotEmpty) while the tenant has states; with
    delete_states it still refuses while one of them is locked."""
    tenant = await store.create_tenant("acme", "Acme", CONTROL)
    workspace_id, env_id = await default_env(store, "acme")
    issued = await store.create_token("acme", "ci", None, "default", "write", CONTROL)
    who = token_principal(issued)
    await store.write_state(StateKey(tenant.id, f"{workspace_id}/{env_id}/app"),
                            upload(state_body(1)), None, who)
    locked = StateKey(tenant.id, f"{workspace_id}/{env_id}/busy")
    await store.acquire_lock(locked, lock("apply-running"), who)
    await failure_of(store.delete_tenant("acme", CONTROL), NotEmpty)
    error = await failure_of(store.delete_tenant("acme", CONTROL, delete_states=True), NotEmpty)
    assert "locked" in error.message
    assert len(await store.list_states(tenant.id)) == 2
    assert (await store.find_tenant("acme")).deleted_at is None


@pytest_twisted.ensureDeferred
async def test_deleting_a_tenant_keeps_its_audit_chain_and_frees_the_slug(
        store: Any, clock: FakeClock) -> None:
    """delete_tenant with delete_states deletes the states (a state_delete
    event each), revokes every token, removes workspaces and environments,
    keeps the tenant row (deleted_at) and its verifiable chain ending in
    tenant_delete; the slug then names a new tenant with a new id and chain."""
    tenant = await store.create_tenant("acme", "Acme", CONTROL)
    workspace_id, env_id = await default_env(store, "acme")
    issued = await store.create_token("acme", "ci", None, "default", "write", CONTROL)
    key = StateKey(tenant.id, f"{workspace_id}/{env_id}/app")
    await store.write_state(key, upload(state_body(1)), None, token_principal(issued))
    clock.advance(1)
    deletion = await store.delete_tenant("acme", CONTROL, delete_states=True)
    assert deletion.deleted_states == (key.path,)
    assert deletion.revoked_tokens == (issued.token.id,)
    assert deletion.tenant.deleted_at == clock.now
    assert await store.list_states(tenant.id) == []
    assert await store.authenticate_token(hosted.token_hash(issued.secret)) is None
    assert await store.list_workspaces(tenant.id) == []
    events = await store.list_events(tenant.id)
    assert [e.kind for e in events] == [TENANT_CREATE, TOKEN_CREATE, STATE_WRITE,
                                        STATE_DELETE, TENANT_DELETE]
    assert first_broken_link(events) is None
    assert json.loads(events[-1].detail)["deleted_states"] == 1

    assert await store.find_tenant("acme") is None
    gone = await store.find_tenant(tenant.id)
    assert gone is not None and gone.deleted_at == clock.now
    assert await store.list_tenants() == []
    assert [t.id for t in await store.list_tenants(include_deleted=True)] == [tenant.id]
    await failure_of(store.create_workspace(tenant.id, "x", CONTROL), TenantNotFound)
    await failure_of(store.create_token(tenant.id, "x", None, "default", "write", CONTROL),
                     TenantNotFound)
    await failure_of(store.delete_tenant(tenant.id, CONTROL), TenantNotFound)
    # a request let in before the deletion cannot write or lock any more
    await failure_of(store.write_state(key, upload(state_body(2)), None,
                                       token_principal(issued)), Unauthorized)
    await failure_of(store.acquire_lock(key, lock("late"), token_principal(issued)),
                     Unauthorized)

    reborn = await store.create_tenant("acme", "Acme again", CONTROL)
    assert reborn.id != tenant.id
    assert await store.find_tenant("acme") == reborn
    assert await kinds(store, reborn.id) == [TENANT_CREATE]
    assert len(await store.list_events(tenant.id)) == 5


@pytest_twisted.ensureDeferred
async def test_two_tenants_with_state_prod_never_meet(store: Any) -> None:
    """Tenants A and B each write a state 'prod' under their own ws/env: each
    reads its own bytes, lists only its own state, and their chains are apart."""
    written = {}
    for slug, serial in (("a", 1), ("b", 7)):
        tenant = await store.create_tenant(slug, slug.upper(), CONTROL)
        workspace_id, env_id = await default_env(store, slug)
        issued = await store.create_token(slug, "ci", None, "default", "write", CONTROL)
        key = StateKey(tenant.id, f"{workspace_id}/{env_id}/prod")
        await store.write_state(key, upload(state_body(serial)), None, token_principal(issued))
        written[slug] = (tenant.id, key)
    for slug, serial in (("a", 1), ("b", 7)):
        tenant_id, key = written[slug]
        assert await store.read_current(key) == state_body(serial)
        assert [s.key for s in await store.list_states(tenant_id)] == [key]
        assert {e.tenant for e in await store.list_events(tenant_id)} == {tenant_id}
    a_id, a_key = written["a"]
    b_id, b_key = written["b"]
    assert await store.read_current(StateKey(b_id, a_key.path)) is None
    assert await store.read_current(StateKey(a_id, b_key.path)) is None


# -- PostgreSQL only: a deletion that commits while a write waits ---------------


@pytest_twisted.ensureDeferred
async def test_write_waiting_behind_an_environment_deletion_is_refused(
        postgres_dsn: str) -> None:
    """A write whose request was let in before its environment was deleted,
    and which reaches the database while the deletion holds the tenant's row,
    fails with 401 once the deletion commits, leaving no state behind (the
    event trigger of 002_hosted.sql, which sees the committed deletion)."""
    import psycopg2
    from twisted.internet import reactor
    from twisted.internet.task import deferLater

    store = postgres_store(postgres_dsn)
    await store.start()
    try:
        tenant = await store.create_tenant("acme", "Acme", CONTROL)
        doomed = await store.create_environment("acme", "default", "doomed", CONTROL)
        issued = await store.create_token("acme", "ci", None, doomed.id, "write", CONTROL)
        key = StateKey(tenant.id, f"{doomed.workspace_id}/{doomed.id}/app")

        deleting = psycopg2.connect(postgres_dsn)
        watcher = psycopg2.connect(postgres_dsn)
        watcher.autocommit = True
        try:
            with deleting.cursor() as cursor:  # what delete_environment does, unfinished
                cursor.execute("SELECT id FROM tenants WHERE id = %s FOR UPDATE", (tenant.id,))
                cursor.execute("UPDATE api_tokens SET revoked_at = now() WHERE env_public_id = %s",
                               (doomed.id,))
                cursor.execute("DELETE FROM environments WHERE id = %s", (doomed.id,))
            writing = store.write_state(key, upload(state_body(1)), None,
                                        token_principal(issued))
            for _ in range(200):
                with watcher.cursor() as cursor:
                    cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname ="
                                   " current_database() AND wait_event_type = 'Lock'")
                    (waiting,) = cursor.fetchone()
                if waiting:
                    break
                await deferLater(reactor, 0.02)
            assert waiting == 1, "the write never waited for the tenant row"
            assert not writing.called
            deleting.commit()
            await failure_of(writing, Unauthorized)
        finally:
            deleting.close()
            watcher.close()
        assert await store.get_summary(key) is None
        assert await store.list_states(tenant.id) == []
    finally:
        await store.stop()
