
"""The store contract for CI identity, on both stores (the fixtures of
C{test_store_contract.py}): hosted tenants' OIDC policies
(L{IOidcPolicyStore}), the token digest a lock records, and why a
database token was refused."""

from __future__ import annotations

import json
from typing import Any

import pytest_twisted
from zope.interface.verify import verifyObject

from kilolock.auth.oidc.access import OidcAccess
from kilolock.auth.oidc.decision import Accepted
from kilolock.core.audit import first_broken_link
from kilolock.core.errors import TenantNotFound
from kilolock.core.events import OIDC_POLICY_DELETE, OIDC_POLICY_SET
from kilolock.core.model import Principal, StateKey
from kilolock.rules import hosted
from kilolock.store.interfaces.oidc import IOidcPolicyStore
from tests.support.awaiting import failure_of
from tests.support.hosted_support import CONTROL, default_env
from tests.support.stores import FakeClock, lock

DOCUMENT = json.dumps({"version": 1, "issuers": [
    {"name": "github", "url": "https://token.actions.githubusercontent.com",
     "audience": "https://kilolock.example.com"}],
    "rules": [{"name": "main", "issuer": "github", "claims": {"repository_id": "74"},
               "grant": {"access": "write", "states": ["*"]}}]}, sort_keys=True)
DIGEST = "d" * 64


def ci_principal(tenant: str) -> Principal:
    accepted = Accepted(principal="oidc:github:repo:octo-org/octo-repo:ref:refs/heads/main",
                        issuer="https://token.actions.githubusercontent.com", grants=(),
                        audit={"sub": "repo:octo-org/octo-repo:ref:refs/heads/main"},
                        expires_at=0.0)
    return Principal(tenant, accepted.principal, oidc=OidcAccess(accepted, DIGEST, True))


async def kinds(store: Any, tenant: str) -> list[str]:
    return [event.kind for event in await store.list_events(tenant)]


@pytest_twisted.ensureDeferred
async def test_provides_ioidcpolicystore(store: Any) -> None:
    assert verifyObject(IOidcPolicyStore, store)


@pytest_twisted.ensureDeferred
async def test_a_policy_is_set_replaced_and_removed(store: Any, clock: FakeClock) -> None:
    """None at first; put stores the text and its time (an event each
    time); a second put replaces it; delete answers the removed record,
    then None with no event; the chain holds."""
    tenant = await store.create_tenant("acme", "Acme", CONTROL)
    assert await store.get_oidc_policy("acme") is None
    first = await store.put_oidc_policy("acme", DOCUMENT, CONTROL)
    assert (first.tenant_id, first.document, first.updated_at) == (tenant.id, DOCUMENT,
                                                                    clock.now)
    assert await store.get_oidc_policy(tenant.id) == first
    clock.advance(60)
    replaced = await store.put_oidc_policy(tenant.id, "{}", CONTROL)
    assert (replaced.document, replaced.updated_at) == ("{}", clock.now)
    assert await store.get_oidc_policy("acme") == replaced
    assert await store.delete_oidc_policy("acme", CONTROL) == replaced
    assert await store.delete_oidc_policy("acme", CONTROL) is None
    assert await store.get_oidc_policy("acme") is None
    events = await store.list_events(tenant.id)
    assert [e.kind for e in events][-3:] == [OIDC_POLICY_SET, OIDC_POLICY_SET,
                                             OIDC_POLICY_DELETE]
    detail = json.loads(events[-3].detail)
    assert detail["issuers"] == [{"name": "github",
                                  "url": "https://token.actions.githubusercontent.com"}]
    assert (detail["rules"], detail["client"]) == (["main"], "192.0.2.7")
    assert first_broken_link(events) is None


@pytest_twisted.ensureDeferred
async def test_unknown_and_deleted_tenants(store: Any) -> None:
    """Unknown tenants are TenantNotFound; a deleted tenant's policy can be
    read by its id but not changed."""
    for call in (store.get_oidc_policy("nobody"),
                 store.put_oidc_policy("nobody", DOCUMENT, CONTROL),
                 store.delete_oidc_policy("nobody", CONTROL)):
        await failure_of(call, TenantNotFound)
    tenant = await store.create_tenant("acme", "Acme", CONTROL)
    await store.put_oidc_policy("acme", DOCUMENT, CONTROL)
    await store.delete_tenant("acme", CONTROL)
    assert (await store.get_oidc_policy(tenant.id)).document == DOCUMENT
    await failure_of(store.put_oidc_policy(tenant.id, DOCUMENT, CONTROL), TenantNotFound)
    await failure_of(store.delete_oidc_policy(tenant.id, CONTROL), TenantNotFound)


@pytest_twisted.ensureDeferred
async def test_the_tenant_of_a_workspace(store: Any) -> None:
    """A workspace id names its live tenant, with the policy (None before
    one is set) and every workspace and environment of the tenant (by id);
    an unknown workspace, or one of a deleted tenant, names none."""
    tenant = await store.create_tenant("acme", "Acme", CONTROL)
    other = await store.create_workspace("acme", "infra", CONTROL)
    await store.create_environment("acme", "infra", "production", CONTROL)
    await store.create_tenant("beta", "Beta", CONTROL)
    workspace_id, _ = await default_env(store, "acme")
    found = await store.oidc_tenant_of_workspace(workspace_id)
    assert (found.tenant_id, found.document) == (tenant.id, None)
    assert sorted(w.id for w in found.workspaces) == sorted([workspace_id, other.id])
    assert [w.id for w in found.workspaces] == sorted(w.id for w in found.workspaces)
    assert sorted((e.workspace_id, e.name) for e in found.environments) == sorted(
        [(workspace_id, "default"), (other.id, "default"), (other.id, "production")])
    await store.put_oidc_policy("acme", DOCUMENT, CONTROL)
    assert (await store.oidc_tenant_of_workspace(other.id)).document == DOCUMENT
    assert await store.oidc_tenant_of_workspace("ws_000000000000") is None
    await store.delete_tenant("acme", CONTROL)
    assert await store.oidc_tenant_of_workspace(workspace_id) is None


@pytest_twisted.ensureDeferred
async def test_a_lock_records_the_digest_of_the_ci_token_that_took_it(store: Any) -> None:
    """get_lock, the summary and the release carry the token digest of a CI
    principal's lock; any other principal's lock has none."""
    await store.create_tenant("acme", "Acme", CONTROL)
    tenant = (await store.find_tenant("acme")).id
    workspace_id, env_id = await default_env(store, "acme")
    key = StateKey(tenant, f"{workspace_id}/{env_id}/network")
    assert await store.acquire_lock(key, lock("ci-lock"), ci_principal(tenant))
    held = await store.get_lock(key)
    assert (held.token_digest, held.principal) == (DIGEST, ci_principal(tenant).name)
    assert (await store.get_summary(key)).lock.token_digest == DIGEST
    [listed] = await store.list_states(tenant)
    assert listed.lock == held
    released = await store.release_lock(key, "ci-lock", ci_principal(tenant))
    assert released.token_digest == DIGEST
    other = Principal(tenant, "token:writer")
    assert await store.acquire_lock(key, lock("plain-lock"), other)
    assert (await store.get_lock(key)).token_digest is None
    assert json.loads((await store.list_events(tenant))[-2].detail)["oidc"] == {
        "sub": "repo:octo-org/octo-repo:ref:refs/heads/main"}


@pytest_twisted.ensureDeferred
async def test_why_a_database_token_was_refused(store: Any) -> None:
    """unknown_token, revoked_token, and tenant_deleted (its tokens revoked
    with it)."""
    await store.create_tenant("acme", "Acme", CONTROL)
    live = await store.create_token("acme", "live", None, "default", "write", CONTROL)
    gone = await store.create_token("acme", "gone", None, "default", "write", CONTROL)
    await store.revoke_token("acme", gone.token.id, CONTROL)
    assert await store.refused_token_reason(hosted.token_hash("kl_nothing")) == "unknown_token"
    assert await store.refused_token_reason(hosted.token_hash(gone.secret)) == "revoked_token"
    await store.delete_tenant("acme", CONTROL)
    assert await store.refused_token_reason(hosted.token_hash(live.secret)) == "tenant_deleted"
