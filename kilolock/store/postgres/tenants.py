"""L{ITenantStore} in PostgreSQL: the hosted-mode half of the store.

L{kilolock.store.postgres.store.PostgresStateStore} holds a
L{PostgresTenants} made with its transaction runner and clock, and forwards
L{ITenantStore} to it.  Every public method is one transaction; every
mutation locks its tenant's row (C{FOR UPDATE}), which serialises the
control-plane changes of one tenant, and appends its event
(L{append_event_txn}) before committing.  The tenant's row holds the audit
chain's head, which comes last in the lock order of every mutation
(C{006_write_path.sql}): a mutation that also locks states (deleting a
tenant) locks them before the tenant's row.  The SQL stands beside its use.

Uniqueness is the database's: slugs of live tenants, workspace names per
tenant, environment names per workspace and live token names per tenant are
unique indexes, written with C{INSERT ... ON CONFLICT DO NOTHING RETURNING}
(never select-then-insert).  The schema's event trigger refuses state events
of a deleted tenant or environment (L{kilolock.store.schema.upgrade.OWNER_GONE_SQLSTATE});
the runner answers those with 401.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar

from attrs import evolve
from psycopg2.extensions import TransactionRollbackError
from twisted.internet.defer import Deferred, fail
from zope.interface import implementer

from kilolock.core.audit import control_detail, delete_detail
from kilolock.core.errors import (
    AlreadyExists,
    EnvironmentNotFound,
    InvalidField,
    TenantNotFound,
    TokenNotFound,
    WorkspaceNotFound,
)
from kilolock.core.events import (
    ENVIRONMENT_CREATE,
    ENVIRONMENT_DELETE,
    STATE_DELETE,
    TENANT_CREATE,
    TENANT_DELETE,
    TOKEN_CREATE,
    TOKEN_REVOKE,
    WORKSPACE_CREATE,
    WORKSPACE_DELETE,
)
from kilolock.core.model import Principal
from kilolock.rules import hosted
from kilolock.rules.hosted import (
    ApiToken,
    Environment,
    IssuedToken,
    Tenant,
    TenantDeletion,
    Workspace,
)
from kilolock.store.interfaces.tenants import ITenantStore
from kilolock.store.postgres import rows
from kilolock.store.postgres.events import append_event_txn
from kilolock.store.postgres.part import StorePart
from kilolock.store.postgres.rows import (
    ENVIRONMENT_COLUMNS,
    TENANT_COLUMNS,
    TOKEN_COLUMNS,
    WORKSPACE_COLUMNS,
)

__all__ = ["PostgresTenants"]

T = TypeVar("T")


@implementer(ITenantStore)
class PostgresTenants(StorePart):
    """Tenants, workspaces, environments and tokens in PostgreSQL, run by
    C{runner}."""

    # -- tenants --------------------------------------------------------

    def create_tenant(self, slug: str, name: str, actor: Principal) -> Deferred[Tenant]:
        try:
            hosted.check_slug(slug)
            hosted.check_display_name(name)
        except InvalidField:
            return fail()

        async def create(cursor: Any) -> Tenant:
            now = self._clock()
            tenant = await self._inserted_txn(
                cursor, rows.tenant,
                f"INSERT INTO tenants (id, slug, name, created_at)"  # noqa: S608 - constants
                " VALUES (%(id)s, %(slug)s, %(name)s, %(now)s)"
                " ON CONFLICT (slug) WHERE slug IS NOT NULL AND deleted_at IS NULL DO NOTHING"
                f" RETURNING {TENANT_COLUMNS}",
                {"id": hosted.new_tenant_id(), "slug": slug, "name": name, "now": now})
            if tenant is None:
                raise AlreadyExists("slug", f"a tenant with the slug {slug!r} exists")
            created = await self._insert_workspace_txn(cursor, tenant.id, hosted.DEFAULT_NAME,
                                                       now)
            assert created is not None
            workspace, environment = created
            await append_event_txn(
                cursor, tenant.id, TENANT_CREATE, actor.name, None, now,
                detail=control_detail(actor, slug=slug, name=name, workspace_id=workspace.id,
                                      env_public_id=environment.id))
            return tenant

        return self._runner.run_interaction(create)

    def list_tenants(self, include_deleted: bool = False) -> Deferred[list[Tenant]]:
        async def select(cursor: Any) -> list[Tenant]:
            await cursor.execute(
                f"SELECT {TENANT_COLUMNS} FROM tenants WHERE slug IS NOT NULL"  # noqa: S608
                + ("" if include_deleted else " AND deleted_at IS NULL")
                + ' ORDER BY slug COLLATE "C", created_at, id')
            return [rows.tenant(row) for row in cursor.fetchall()]

        return self._runner.run_interaction(select)

    def find_tenant(self, tenant: str) -> Deferred[Tenant | None]:
        async def find(cursor: Any) -> Tenant | None:
            return await self._find_tenant_txn(cursor, tenant)

        return self._runner.run_interaction(find)

    def delete_tenant(self, tenant: str, actor: Principal,
                      delete_states: bool = False) -> Deferred[TenantDeletion]:
        async def delete(cursor: Any) -> TenantDeletion:
            # The lock order of every mutation (006_write_path.sql): the
            # state rows first (which keeps LOCKs and writes out until the
            # commit), the tenant's row after them.  A state created in
            # between is found by the second look: then the whole
            # transaction is tried again.
            states = await self._tenant_states_txn(cursor, await self._known_tenant_txn(
                cursor, tenant))
            found = await self._live_tenant_txn(cursor, tenant)
            if await self._tenant_states_txn(cursor, found) != states:
                raise TransactionRollbackError("a state was created meanwhile")
            hosted.check_tenant_deletable(
                len(states), [path for _, path, is_locked, _ in states if is_locked],
                delete_states)
            now = self._clock()
            if states:
                await cursor.execute("DELETE FROM states WHERE tenant_id = %s", (found.id,))
            for _, path, _, versions in states:
                await append_event_txn(cursor, found.id, STATE_DELETE, actor.name, path, now,
                                       detail=delete_detail(versions, actor))
            revoked = await self._revoke_txn(cursor, "tenant_id", found.id, now)
            await cursor.execute("DELETE FROM environments WHERE tenant_id = %s;"
                                 " DELETE FROM workspaces WHERE tenant_id = %s",
                                 (found.id, found.id))
            await cursor.execute(
                f"UPDATE tenants SET deleted_at = %s WHERE id = %s"  # noqa: S608 - constants
                f" RETURNING {TENANT_COLUMNS}", (now, found.id))
            deleted = rows.tenant(cursor.fetchone())
            await append_event_txn(
                cursor, found.id, TENANT_DELETE, actor.name, None, now,
                detail=control_detail(actor, slug=found.slug, deleted_states=len(states),
                                      revoked_tokens=list(revoked)))
            return TenantDeletion(deleted, tuple(path for _, path, _, _ in states), revoked)

        return self._runner.run_interaction(delete)

    # -- workspaces and environments -------------------------------------

    def create_workspace(self, tenant: str, name: str, actor: Principal) -> Deferred[Workspace]:
        try:
            hosted.check_name(name, "name")
        except InvalidField:
            return fail()

        async def create(cursor: Any) -> Workspace:
            found = await self._live_tenant_txn(cursor, tenant)
            now = self._clock()
            created = await self._insert_workspace_txn(cursor, found.id, name, now)
            if created is None:
                raise AlreadyExists("name", f"the tenant has a workspace named {name!r}")
            workspace, environment = created
            await append_event_txn(
                cursor, found.id, WORKSPACE_CREATE, actor.name, None, now,
                detail=control_detail(actor, workspace_id=workspace.id, name=name,
                                      env_public_id=environment.id))
            return workspace

        return self._runner.run_interaction(create)

    def list_workspaces(self, tenant: str) -> Deferred[list[Workspace]]:
        return self._of_known_tenant(
            tenant, f"SELECT {WORKSPACE_COLUMNS} FROM workspaces"  # noqa: S608 - constants
            ' WHERE tenant_id = %s ORDER BY name COLLATE "C"', rows.workspace)

    def delete_workspace(self, tenant: str, workspace: str,
                         actor: Principal) -> Deferred[Workspace]:
        async def delete(cursor: Any) -> Workspace:
            found, target = await self._live_workspace_txn(cursor, tenant, workspace)
            await self._refuse_states_under_txn(cursor, found.id, target.id + "/", "workspace")
            now = self._clock()
            revoked = await self._revoke_txn(cursor, "workspace_id", target.id, now)
            await cursor.execute("DELETE FROM environments WHERE workspace_id = %s RETURNING id",
                                 (target.id,))
            environments = sorted(row[0] for row in cursor.fetchall())
            await cursor.execute("DELETE FROM workspaces WHERE id = %s", (target.id,))
            await append_event_txn(
                cursor, found.id, WORKSPACE_DELETE, actor.name, None, now,
                detail=control_detail(actor, workspace_id=target.id, name=target.name,
                                      env_public_ids=environments,
                                      revoked_tokens=list(revoked)))
            return target

        return self._runner.run_interaction(delete)

    def create_environment(self, tenant: str, workspace: str, name: str,
                           actor: Principal) -> Deferred[Environment]:
        try:
            hosted.check_name(name, "name")
        except InvalidField:
            return fail()

        async def create(cursor: Any) -> Environment:
            found, parent = await self._live_workspace_txn(cursor, tenant, workspace)
            now = self._clock()
            environment = await self._insert_environment_txn(cursor, parent, name, now)
            if environment is None:
                raise AlreadyExists("name", f"the workspace has an environment named {name!r}")
            await append_event_txn(
                cursor, found.id, ENVIRONMENT_CREATE, actor.name, None, now,
                detail=control_detail(actor, workspace_id=parent.id,
                                      env_public_id=environment.id, name=name))
            return environment

        return self._runner.run_interaction(create)

    def list_environments(self, tenant: str,
                          workspace: str | None = None) -> Deferred[list[Environment]]:
        async def select(cursor: Any) -> list[Environment]:
            found = await self._known_tenant_txn(cursor, tenant)
            if workspace is None:
                condition, value = "tenant_id = %s", found.id
            else:
                parent = await self._workspace_txn(cursor, found.id, workspace)
                condition, value = "workspace_id = %s", parent.id
            await cursor.execute(
                f"SELECT {ENVIRONMENT_COLUMNS} FROM environments"  # noqa: S608 - constants
                f' WHERE {condition} ORDER BY name COLLATE "C", workspace_id', (value,))
            return [rows.environment(row) for row in cursor.fetchall()]

        return self._runner.run_interaction(select)

    def delete_environment(self, tenant: str, workspace: str, environment: str,
                           actor: Principal) -> Deferred[Environment]:
        async def delete(cursor: Any) -> Environment:
            found, parent = await self._live_workspace_txn(cursor, tenant, workspace)
            target = await self._environment_txn(cursor, parent, environment)
            await self._refuse_states_under_txn(cursor, found.id,
                                                f"{parent.id}/{target.id}/", "environment")
            now = self._clock()
            revoked = await self._revoke_txn(cursor, "env_public_id", target.id, now)
            await cursor.execute("DELETE FROM environments WHERE id = %s", (target.id,))
            await append_event_txn(
                cursor, found.id, ENVIRONMENT_DELETE, actor.name, None, now,
                detail=control_detail(actor, workspace_id=parent.id, env_public_id=target.id,
                                      name=target.name, revoked_tokens=list(revoked)))
            return target

        return self._runner.run_interaction(delete)

    # -- tokens ---------------------------------------------------------

    def create_token(self, tenant: str, name: str, workspace: str | None, environment: str,
                     scope: str, actor: Principal) -> Deferred[IssuedToken]:
        try:
            hosted.check_name(name, "name")
            hosted.check_scope(scope)
        except InvalidField:
            return fail()

        async def create(cursor: Any) -> IssuedToken:
            found = await self._live_tenant_txn(cursor, tenant)
            try:
                parent = await self._workspace_txn(cursor, found.id,
                                                   workspace or hosted.DEFAULT_NAME)
            except WorkspaceNotFound:
                raise InvalidField("workspace", "the tenant has no such workspace") from None
            try:
                target = await self._environment_txn(cursor, parent, environment)
            except EnvironmentNotFound:
                raise InvalidField("environment",
                                   "the workspace has no such environment") from None
            now = self._clock()
            secret = hosted.new_token_secret()
            token = await self._inserted_txn(
                cursor, rows.token,
                "INSERT INTO api_tokens (id, tenant_id, name, token_hash, workspace_id,"  # noqa: S608
                " env_public_id, scope, created_at)"
                " VALUES (%(id)s, %(tenant)s, %(name)s, %(hash)s, %(workspace)s,"
                " %(environment)s, %(scope)s, %(now)s)"
                " ON CONFLICT (tenant_id, name) WHERE revoked_at IS NULL DO NOTHING"
                f" RETURNING {TOKEN_COLUMNS}",
                {"id": hosted.new_token_id(), "tenant": found.id, "name": name,
                 "hash": hosted.token_hash(secret), "workspace": parent.id,
                 "environment": target.id, "scope": scope, "now": now})
            if token is None:
                raise AlreadyExists("name", f"the tenant has a live token named {name!r}")
            await append_event_txn(
                cursor, found.id, TOKEN_CREATE, actor.name, None, now,
                detail=control_detail(actor, token_id=token.id, name=name, scope=scope,
                                      workspace_id=parent.id, env_public_id=target.id))
            return IssuedToken(token, secret)

        return self._runner.run_interaction(create)

    def list_tokens(self, tenant: str) -> Deferred[list[ApiToken]]:
        return self._of_known_tenant(
            tenant, f"SELECT {TOKEN_COLUMNS} FROM api_tokens"  # noqa: S608 - constants
            " WHERE tenant_id = %s ORDER BY created_at, id", rows.token)

    def revoke_token(self, tenant: str, token_id: str, actor: Principal) -> Deferred[ApiToken]:
        async def revoke(cursor: Any) -> ApiToken:
            found = await self._live_tenant_txn(cursor, tenant)
            await cursor.execute(
                f"SELECT {TOKEN_COLUMNS} FROM api_tokens"  # noqa: S608 - constants
                " WHERE id = %s AND tenant_id = %s FOR UPDATE", (token_id, found.id))
            row = cursor.fetchone()
            if row is None:
                raise TokenNotFound("the tenant has no such token")
            token = rows.token(row)
            if token.revoked_at is not None:
                return token
            now = self._clock()
            await cursor.execute(
                f"UPDATE api_tokens SET revoked_at = %s WHERE id = %s"  # noqa: S608
                f" RETURNING {TOKEN_COLUMNS}", (now, token.id))
            revoked = rows.token(cursor.fetchone())
            await append_event_txn(
                cursor, found.id, TOKEN_REVOKE, actor.name, None, now,
                detail=control_detail(actor, token_id=token.id, name=token.name))
            return revoked

        return self._runner.run_interaction(revoke)

    # One statement, one round trip: find the live token of a live tenant and,
    # when its last use was recorded more than the interval ago, record this one
    # (the update re-checks the condition under its row lock, so concurrent
    # requests record it once).
    _AUTHENTICATE = f"""
WITH found AS (
    SELECT t.id, t.last_used_at FROM api_tokens t JOIN tenants n ON n.id = t.tenant_id
    WHERE t.token_hash = %(hash)s AND t.revoked_at IS NULL AND n.deleted_at IS NULL
), touched AS (
    UPDATE api_tokens SET last_used_at = %(now)s
    WHERE id = (SELECT id FROM found)
      AND (last_used_at IS NULL OR last_used_at <= %(stale)s)
    RETURNING id, last_used_at
)
SELECT {", ".join("t." + column.strip() for column in TOKEN_COLUMNS.split(","))},
       (SELECT last_used_at FROM touched)
FROM api_tokens t WHERE t.id = (SELECT id FROM found)
"""  # noqa: S608 - constant columns; every value is a parameter

    def authenticate_token(self, token_hash: str) -> Deferred[ApiToken | None]:
        async def authenticate(cursor: Any) -> ApiToken | None:
            now = self._clock()
            await cursor.execute(self._AUTHENTICATE, {
                "hash": token_hash, "now": now,
                "stale": now - timedelta(seconds=hosted.LAST_USED_INTERVAL)})
            row = cursor.fetchone()
            if row is None:
                return None
            *columns, touched_at = row
            token = rows.token(columns)
            if touched_at is not None:
                token = evolve(token, last_used_at=rows.utc(touched_at))
            return token

        return self._runner.run_interaction(authenticate)

    def refused_token_reason(self, token_hash: str) -> Deferred[str]:
        async def reason(cursor: Any) -> str:
            await cursor.execute(
                "SELECT t.revoked_at IS NOT NULL, n.deleted_at IS NOT NULL FROM api_tokens t"
                " JOIN tenants n ON n.id = t.tenant_id WHERE t.token_hash = %s", (token_hash,))
            row = cursor.fetchone()
            if row is None:
                return "unknown_token"
            revoked, tenant_deleted = row
            if tenant_deleted:
                return "tenant_deleted"
            return "revoked_token" if revoked else "unknown_token"

        return self._runner.run_interaction(reason)

    # -- transaction steps ----------------------------------------------

    def _of_known_tenant(self, tenant: str, query: str,
                         value: Callable[[Any], T]) -> Deferred[list[T]]:
        """@return: a Deferred firing with the rows C{query} selects for a
        known tenant (its id the one parameter), each made a C{value}."""

        async def select(cursor: Any) -> list[T]:
            found = await self._known_tenant_txn(cursor, tenant)
            await cursor.execute(query, (found.id,))
            return [value(row) for row in cursor.fetchall()]

        return self._runner.run_interaction(select)

    async def _find_tenant_txn(self, cursor: Any, tenant: str, *,
                               lock: bool = False) -> Tenant | None:
        if hosted.is_public_id(tenant, hosted.TENANT_PREFIX):
            condition = "id = %s AND slug IS NOT NULL"
        else:
            condition = "slug = %s AND deleted_at IS NULL"
        await cursor.execute(
            f"SELECT {TENANT_COLUMNS} FROM tenants WHERE {condition}"  # noqa: S608
            + (" FOR UPDATE" if lock else ""), (tenant,))
        row = cursor.fetchone()
        return None if row is None else rows.tenant(row)

    async def _known_tenant_txn(self, cursor: Any, tenant: str) -> Tenant:
        found = await self._find_tenant_txn(cursor, tenant)
        if found is None:
            raise TenantNotFound("no such tenant")
        return found

    async def _tenant_states_txn(self, cursor: Any, found: Tenant) -> list[Any]:
        """The tenant's states (id, path, locked, versions), their rows
        locked, in path order."""
        await cursor.execute(
            "SELECT s.id, s.path, l.state_id IS NOT NULL,"
            " (SELECT count(*) FROM state_versions v WHERE v.state_id = s.id)"
            " FROM states s LEFT JOIN locks l ON l.state_id = s.id"
            ' WHERE s.tenant_id = %s ORDER BY s.path COLLATE "C" FOR UPDATE OF s',
            (found.id,))
        return list(cursor.fetchall())

    async def _live_tenant_txn(self, cursor: Any, tenant: str) -> Tenant:
        """The live tenant, its row locked until the transaction ends."""
        found = await self._find_tenant_txn(cursor, tenant, lock=True)
        if found is None or found.deleted_at is not None:
            raise TenantNotFound("no such tenant")
        return found

    async def _live_workspace_txn(self, cursor: Any, tenant: str,
                                  workspace: str) -> tuple[Tenant, Workspace]:
        """A live tenant, its row locked, and one of its workspaces."""
        found = await self._live_tenant_txn(cursor, tenant)
        return found, await self._workspace_txn(cursor, found.id, workspace)

    async def _workspace_txn(self, cursor: Any, tenant_id: str, workspace: str) -> Workspace:
        column = "id" if hosted.is_public_id(workspace, hosted.WORKSPACE_PREFIX) else "name"
        await cursor.execute(
            f"SELECT {WORKSPACE_COLUMNS} FROM workspaces"  # noqa: S608 - constants
            f" WHERE tenant_id = %s AND {column} = %s", (tenant_id, workspace))
        row = cursor.fetchone()
        if row is None:
            raise WorkspaceNotFound("the tenant has no such workspace")
        return rows.workspace(row)

    async def _environment_txn(self, cursor: Any, parent: Workspace,
                               environment: str) -> Environment:
        column = ("id" if hosted.is_public_id(environment, hosted.ENVIRONMENT_PREFIX)
                  else "name")
        await cursor.execute(
            f"SELECT {ENVIRONMENT_COLUMNS} FROM environments"  # noqa: S608 - constants
            f" WHERE workspace_id = %s AND {column} = %s", (parent.id, environment))
        row = cursor.fetchone()
        if row is None:
            raise EnvironmentNotFound("the workspace has no such environment")
        return rows.environment(row)

    async def _inserted_txn(self, cursor: Any, value: Callable[[Any], T], statement: str,
                            params: Any) -> T | None:
        """Run an C{INSERT ... ON CONFLICT DO NOTHING RETURNING} (how a name
        is taken: never select-then-insert).  @return: the inserted row made
        a value by C{value}, or None when the name was taken."""
        await cursor.execute(statement, params)
        row = cursor.fetchone()
        return None if row is None else value(row)

    async def _insert_workspace_txn(self, cursor: Any, tenant_id: str, name: str,
                                    now: datetime) -> tuple[Workspace, Environment] | None:
        """Insert a workspace and the environment every workspace starts
        with (L{hosted.DEFAULT_NAME}).  @return: both, or None when the
        tenant has a workspace of that name."""
        workspace = await self._inserted_txn(
            cursor, rows.workspace,
            "INSERT INTO workspaces (id, tenant_id, name, created_at)"  # noqa: S608
            " VALUES (%s, %s, %s, %s) ON CONFLICT (tenant_id, name) DO NOTHING"
            f" RETURNING {WORKSPACE_COLUMNS}",
            (hosted.new_workspace_id(), tenant_id, name, now))
        if workspace is None:
            return None
        environment = await self._insert_environment_txn(cursor, workspace,
                                                         hosted.DEFAULT_NAME, now)
        assert environment is not None
        return workspace, environment

    async def _insert_environment_txn(self, cursor: Any, parent: Workspace, name: str,
                                      now: datetime) -> Environment | None:
        return await self._inserted_txn(
            cursor, rows.environment,
            "INSERT INTO environments (id, workspace_id, tenant_id, name, created_at)"  # noqa: S608
            " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (workspace_id, name) DO NOTHING"
            f" RETURNING {ENVIRONMENT_COLUMNS}",
            (hosted.new_environment_id(), parent.id, parent.tenant_id, name, now))

    async def _refuse_states_under_txn(self, cursor: Any, tenant_id: str, prefix: str,
                                       what: str) -> None:
        await cursor.execute(
            "SELECT count(*) FROM states WHERE tenant_id = %s AND starts_with(path, %s)",
            (tenant_id, prefix))
        (count,) = cursor.fetchone()
        hosted.check_no_states_under(what, count)

    async def _revoke_txn(self, cursor: Any, column: str, value: str,
                          now: datetime) -> tuple[str, ...]:
        """Revoke the live tokens whose C{column} is C{value}.
        @return: their ids, in creation order."""
        await cursor.execute(
            f"UPDATE api_tokens SET revoked_at = %s"  # noqa: S608 - column is a constant
            f" WHERE {column} = %s AND revoked_at IS NULL RETURNING id, created_at",
            (now, value))
        return tuple(id_ for id_, _ in sorted(cursor.fetchall(), key=lambda row: (row[1], row[0])))
