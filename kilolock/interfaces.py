"""The interfaces every store implements.

All methods return Deferreds.  Failures are the typed errors of
L{kilolock.errors}; a store never raises anything HTTP-specific beyond them and
never knows about requests.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from zope.interface import Attribute, Interface

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred

    from kilolock.audit import ChainHead
    from kilolock.event_pages import EventPageQuery
    from kilolock.model import (
        ApiToken,
        AuditEvent,
        Environment,
        HeldLock,
        IssuedToken,
        LockInfo,
        OidcPolicyRecord,
        OidcTenant,
        Principal,
        Projection,
        ResourceMatch,
        ResourceQuery,
        StateKey,
        StateListQuery,
        StatePage,
        StateSummary,
        StateUpload,
        StateVersion,
        StoreProbe,
        Tenant,
        TenantDeletion,
        UiSession,
        Workspace,
        WriteOutcome,
    )


class IStateStore(Interface):
    """States of many tenants: versions kept byte-for-byte, locks, projection
    rows and the audit trail.

    Every public method is one transaction: the lock check, the write, the
    projection and the audit event commit together or not at all.  The lock
    matrix and the serial rule below are decided, for every store, by
    L{kilolock.state_rules}.
    """

    def start() -> Deferred[None]:
        """Prepare the store (connect, apply the schema).

        @return: a Deferred firing with None when the store can serve.
        """

    def stop() -> Deferred[None]:
        """Release connections.  @return: a Deferred firing with None."""

    def probe() -> Deferred[StoreProbe]:
        """Check the database within a few seconds; never fails.

        @return: a Deferred firing with a L{StoreProbe}.
        """

    def read_current(key: StateKey) -> Deferred[bytes | None]:
        """The bytes of the current version of C{key} (a L{StateKey}).

        @return: a Deferred firing with the exact bytes last written, or None
            when no version exists (also when only a lock created the row).
        """

    def write_state(key: StateKey, upload: StateUpload, lock_id: str | None,
                    principal: Principal, event_kind: str = "state_write",
                    event_detail: Mapping[str, Any] | None = None) -> Deferred[WriteOutcome]:
        """Store C{upload} (a L{StateUpload}) as the new current version.

        The lock matrix: with C{lock_id} (a str) the lock must be held with
        that ID (L{LockNotHeld} when no lock is held, L{LockConflict} 423 when
        another is); with C{lock_id} None the state must be unlocked
        (L{LockConflict} 423).  An upload whose serial and SHA-256 equal a
        stored version's is an idempotent replay (no new version, no event).
        Otherwise a serial equal to the I{current} version's serial is a
        L{SerialConflict}, and any other serial (lower ones included: C{state
        push -force}) becomes a new current version.  Writes one C{state_write}
        event (C{event_kind} names another kind, e.g. C{state_rollback}, and
        C{event_detail} adds keys to its detail, e.g. the restored version).

        @return: a Deferred firing with a L{WriteOutcome}.
        """

    def delete_state(key: StateKey, lock_id: str | None,
                     principal: Principal) -> Deferred[None]:
        """Delete the state, its versions, projection rows and lock; keep its
        events and add a C{state_delete} event.  Same lock rules as
        L{write_state}; L{StateNotFound} when there is no such state.

        @return: a Deferred firing with None.
        """

    def acquire_lock(key: StateKey, info: LockInfo, principal: Principal) -> Deferred[bool]:
        """Lock C{key} with C{info} (a L{LockInfo}), creating the state row if
        needed.  A LOCK with the holder's own ID is an idempotent success.
        L{LockConflict} (423, the holder's bytes) when someone else holds it.
        The lock records C{principal.oidc_token_digest} (see L{HeldLock}).

        @return: a Deferred firing with True when newly acquired, False for the
            idempotent replay.
        """

    def release_lock(key: StateKey, lock_id: str | None, principal: Principal,
                     event_detail: Mapping[str, Any] | None = None,
                     ) -> Deferred[HeldLock | None]:
        """Release the lock.  C{lock_id} str: owner release (idempotent when no
        lock is held; L{LockConflict} 409 when another ID holds it).
        C{lock_id} None: force release of whatever is held, audited as
        C{lock_force_release}.  C{event_detail} adds keys to the event's
        detail (the dashboard marks its force releases).

        @return: a Deferred firing with the released L{HeldLock}, or None when
            nothing was held.
        """

    def get_lock(key: StateKey) -> Deferred[HeldLock | None]:
        """@return: a Deferred firing with the L{HeldLock} on C{key} or None."""

    def get_summary(key: StateKey) -> Deferred[StateSummary | None]:
        """@return: a Deferred firing with a L{StateSummary}, or None when the
        state does not exist."""

    def list_states(tenant: str) -> Deferred[list[StateSummary]]:
        """@return: a Deferred firing with the tenant's L{StateSummary} list,
        ordered by path."""

    def list_states_page(tenant: str, query: StateListQuery) -> Deferred[StatePage]:
        """One page of the tenant's states (see L{StateListQuery}), each with
        the event that wrote its current version.

        @return: a Deferred firing with a L{StatePage}."""

    def list_versions(key: StateKey) -> Deferred[list[StateVersion]]:
        """@return: a Deferred firing with the L{StateVersion} list of C{key},
        oldest first, tombstones included (C{pruned_at} set; empty when the
        state does not exist)."""

    def read_version(key: StateKey, number: int) -> Deferred[bytes | None]:
        """@return: a Deferred firing with the bytes of version C{number}, or
        None when the state has no such version; failing with
        L{kilolock.errors.VersionPruned} (410) when only its tombstone is
        left (see L{kilolock.retention_interfaces.IRetentionStore})."""

    def get_projection(key: StateKey) -> Deferred[Projection | None]:
        """@return: a Deferred firing with the L{Projection} of the current
        version, or None when there is no current version or it was not
        projected (an encrypted envelope)."""

    def query_resources(tenant: str, query: ResourceQuery) -> Deferred[list[ResourceMatch]]:
        """The resource rows of the current versions of C{tenant}'s states that
        match C{query} (a L{ResourceQuery}), ordered by state path then state
        order, at most C{query.limit} of them.

        @return: a Deferred firing with a list of L{ResourceMatch}."""

    def list_events(tenant: str, state_path: str | None = None,
                    kinds: Iterable[str] | None = None, since: datetime | None = None,
                    until: datetime | None = None) -> Deferred[list[AuditEvent]]:
        """@return: a Deferred firing with the tenant's L{AuditEvent} list in
        chain order, filtered by state path, kinds and a time range."""

    def list_events_page(tenant: str, query: EventPageQuery) -> Deferred[list[AuditEvent]]:
        """A window of the tenant's events (L{kilolock.event_pages}): at most
        C{query.limit} events that L{event_matches} C{query}, on its side of
        its cursor; in one transaction, costing what the window holds.

        @return: a Deferred firing with the events, newest first (oldest
            first when C{query.after} is set)."""

    def record_event(tenant: str, kind: str, principal: str, state_path: str | None = None,
                     detail: dict[str, Any] | None = None) -> Deferred[AuditEvent]:
        """Append a control-plane event to the tenant's chain.

        @return: a Deferred firing with the new L{AuditEvent}."""

    def chain_head(tenant: str) -> Deferred[ChainHead]:
        """The head of the tenant's chain as the store recorded it apart from
        the events (moved in the transaction of every append), so that a
        deletion of the newest events shows (L{kilolock.audit.verify_chain}).

        @return: a Deferred firing with the L{ChainHead} (seq 0 and the
            genesis hash for a tenant without events)."""


class IOverlappedWrites(Interface):
    """A state store that can start writing a large upload while it is
    still being parsed (see L{kilolock.upload_feed})."""

    def write_state_overlapped(key: StateKey, feed: Any, lock_id: str | None,
                               principal: Principal, event_kind: str = "state_write",
                               detail_of: Any = None) -> Deferred[WriteOutcome]:
        """L{IStateStore.write_state} of the upload C{feed} (an
        L{kilolock.upload_feed.UploadFeed}) is parsing, C{detail_of(upload)}
        adding to the event's detail.  The answers and their order are
        those of the parse, then of C{write_state}: a body the parse refuses
        is refused with the parse's error whatever the lock or the serial,
        and nothing is stored.

        @return: a Deferred firing with a L{WriteOutcome}.
        """


class ISessionStore(Interface):
    """The dashboard's browser sessions, kept where the states are, so every
    Kilolock process on one database knows them.  Both stores provide it."""

    def create_session(session: UiSession) -> Deferred[None]:
        """Keep C{session}; sessions expired by its C{created_at} are dropped
        in the same transaction.  @return: a Deferred firing with None."""

    def find_session(id_hash: str, now: datetime) -> Deferred[UiSession | None]:
        """@return: a Deferred firing with the session whose cookie secret
        has SHA-256 C{id_hash}, or None when there is none or it expired by
        C{now}."""

    def delete_session(id_hash: str) -> Deferred[None]:
        """Forget a session (sign-out); nothing when there is none.
        @return: a Deferred firing with None."""


class IHealthCheck(Interface):
    """Something whose readiness the server reports."""

    reachable = Attribute("True when the last contact with the database worked")


class ITenantStore(Interface):
    """Hosted mode (C{KL_AUTH_MODE=database}): tenants, their workspaces and
    environments, and API tokens.  Both stores provide it next to
    L{IStateStore} (the same object).

    Every method is one transaction, and every mutation appends its event
    (C{tenant_create}, C{workspace_create}, C{token_revoke}, ...) to the
    tenant's audit chain in that transaction.  Events never hold a token's
    secret or hash.

    C{tenant} arguments name a tenant by its slug (live tenants only) or by
    its id (C{tn_...}, deleted tenants too; mutating a deleted tenant is
    L{kilolock.errors.NotFound}).  C{workspace} and C{environment} arguments
    take an id (C{ws_...}, C{env_...}) or a name.  C{actor} is the
    L{Principal} recorded in the events.  Unknown tenants, workspaces,
    environments and tokens named by the caller are L{kilolock.errors.NotFound};
    a name that is taken is L{kilolock.errors.AlreadyExists}.
    """

    def create_tenant(slug: str, name: str, actor: Principal) -> Deferred[Tenant]:
        """Create a tenant with a workspace C{default} holding an environment
        C{default}.  @return: a Deferred firing with the new L{Tenant}."""

    def list_tenants(include_deleted: bool = False) -> Deferred[list[Tenant]]:
        """@return: a Deferred firing with the tenants (live ones, plus the
        deleted ones with C{include_deleted}), by slug, then oldest first."""

    def find_tenant(tenant: str) -> Deferred[Tenant | None]:
        """@return: a Deferred firing with the L{Tenant} or None."""

    def delete_tenant(tenant: str, actor: Principal,
                      delete_states: bool = False) -> Deferred[TenantDeletion]:
        """Delete a live tenant: revoke its tokens, delete its workspaces and
        environments, free its slug, mark it deleted and append
        C{tenant_delete} (its row and its whole audit chain are kept).

        While it has states this is L{kilolock.errors.NotEmpty}, unless
        C{delete_states}: then its states are deleted first (one
        C{state_delete} event each), and it is still C{NotEmpty} while any of
        them is locked.

        @return: a Deferred firing with a L{TenantDeletion}."""

    def create_workspace(tenant: str, name: str, actor: Principal) -> Deferred[Workspace]:
        """Create a workspace with an environment C{default}.
        @return: a Deferred firing with the new L{Workspace}."""

    def list_workspaces(tenant: str) -> Deferred[list[Workspace]]:
        """@return: a Deferred firing with the tenant's workspaces, by name."""

    def delete_workspace(tenant: str, workspace: str, actor: Principal) -> Deferred[Workspace]:
        """Delete a workspace and its environments, revoking their tokens;
        L{kilolock.errors.NotEmpty} while any state lives under it.
        @return: a Deferred firing with the deleted L{Workspace}."""

    def create_environment(tenant: str, workspace: str, name: str,
                           actor: Principal) -> Deferred[Environment]:
        """@return: a Deferred firing with the new L{Environment}."""

    def list_environments(tenant: str,
                          workspace: str | None = None) -> Deferred[list[Environment]]:
        """@return: a Deferred firing with the environments of one workspace
        (or of the whole tenant), by name."""

    def delete_environment(tenant: str, workspace: str, environment: str,
                           actor: Principal) -> Deferred[Environment]:
        """Delete an environment, revoking its tokens; L{kilolock.errors.NotEmpty}
        while any state lives under it.
        @return: a Deferred firing with the deleted L{Environment}."""

    def create_token(tenant: str, name: str, workspace: str | None, environment: str,
                     scope: str, actor: Principal) -> Deferred[IssuedToken]:
        """Create a token for one environment (of C{workspace}, or of the
        workspace C{default} when None).  A workspace or environment that
        does not exist is L{kilolock.errors.InvalidField} naming the field;
        a name used by another live token of the tenant is AlreadyExists.

        @return: a Deferred firing with the L{IssuedToken} (its secret is
            shown this once and stored only as SHA-256)."""

    def list_tokens(tenant: str) -> Deferred[list[ApiToken]]:
        """@return: a Deferred firing with the tenant's tokens, revoked ones
        included, oldest first (never a secret)."""

    def revoke_token(tenant: str, token_id: str, actor: Principal) -> Deferred[ApiToken]:
        """Revoke a token from now on (revoking a revoked token changes
        nothing and appends no event).
        @return: a Deferred firing with the L{ApiToken}."""

    def authenticate_token(token_hash: str) -> Deferred[ApiToken | None]:
        """The live token whose secret has SHA-256 C{token_hash} (hex), of a
        live tenant; None for an unknown or revoked one.  Records
        C{last_used_at}, at most once per
        L{kilolock.hosted.LAST_USED_INTERVAL} seconds per token (so a busy
        token does not make every request a write).

        @return: a Deferred firing with the L{ApiToken} or None."""

    def refused_token_reason(token_hash: str) -> Deferred[str]:
        """Why L{authenticate_token} found no live token with this hash, for
        the access log (asked only after a refusal).

        @return: a Deferred firing with C{"unknown_token"},
            C{"revoked_token"} or C{"tenant_deleted"}."""


class IOidcPolicyStore(Interface):
    """Hosted mode: each tenant's OIDC policy (trusted issuers and rules for
    CI tokens).  Both stores provide it next to L{IStateStore}.

    The store keeps the document as text; the control API validates it
    (L{kilolock.oidc.validation}).  Setting and removing a policy append
    C{oidc_policy_set} / C{oidc_policy_delete} to the tenant's chain in the
    same transaction.  C{tenant} names a tenant by slug or id, as in
    L{ITenantStore}; an unknown (or, for changes, deleted) one is
    L{kilolock.errors.TenantNotFound}.
    """

    def get_oidc_policy(tenant: str) -> Deferred[OidcPolicyRecord | None]:
        """@return: a Deferred firing with the tenant's L{OidcPolicyRecord},
        or None when it has none."""

    def put_oidc_policy(tenant: str, document: str,
                        actor: Principal) -> Deferred[OidcPolicyRecord]:
        """Set (or replace) the tenant's policy: C{document} is the canonical
        JSON text of a validated policy.

        @return: a Deferred firing with the stored L{OidcPolicyRecord}."""

    def delete_oidc_policy(tenant: str, actor: Principal) -> Deferred[OidcPolicyRecord | None]:
        """Remove the tenant's policy (no event when it had none).

        @return: a Deferred firing with the removed record, or None."""

    def oidc_tenant_of_workspace(workspace_id: str) -> Deferred[OidcTenant | None]:
        """What verifying a CI token for a state of workspace C{workspace_id}
        needs: the live tenant owning it, its policy, its workspaces and
        environments.

        @return: a Deferred firing with the L{OidcTenant}, or None when no
            live tenant has that workspace."""
