"""What the dashboard asks of PostgreSQL: a page of states (filtered,
sorted, with the event that wrote each current version) and the browser
sessions (L{kilolock.store.interfaces.states.ISessionStore}).

Each call is one transaction; the rules are L{kilolock.rules.listing}'s,
said in SQL: the name filter folds ASCII letters only, a state without the
sorted value sorts first ascending and last descending, ties by path.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from twisted.internet.defer import Deferred, ensureDeferred

from kilolock.core.model import Principal, StateKey, StateSummary, UiSession
from kilolock.rules.listing import (
    ASCII_LOWER,
    ASCII_UPPER,
    StateListing,
    StateListQuery,
    StatePage,
    check_listing,
    tag_parts,
)
from kilolock.store.postgres import rows
from kilolock.store.postgres.rows import EVENT_COLUMNS_LIMITED
from kilolock.store.postgres.runner import TransactionRunner

__all__ = ["PostgresDashboard", "select_states_page"]

#: The column each sort orders by (constant fragments); C{sv} is the current
#: version, joined only for the sorts that need it.
_SORT_COLUMNS = {
    "updated": "s.updated_at",
    "serial": "sv.serial",
    "resources": "sv.resource_count",
    "size": "sv.size",
    "locked": "l.acquired_at",
}
_NEEDS_VERSION = {"serial", "resources", "size"}

_SORT_VERSION = """
    LEFT JOIN LATERAL (
        SELECT serial, resource_count, size FROM state_versions
        WHERE state_id = s.id ORDER BY number DESC LIMIT 1
    ) sv ON true"""

# The page's states are chosen first (sorted by a column of states or locks,
# or of the current version when the sort needs it); then, for those rows
# only, the current version, the version count, the latest event carrying
# the current version's digest, and the number of all matches.  {where},
# {order}, {version} and {events} are constant fragments.
_PAGE = """
WITH page AS (
    SELECT s.id, s.path, s.updated_at, l.info, l.acquired_at, l.principal AS lock_principal,
           row_number() OVER (ORDER BY {order}) AS position
    FROM states s
    LEFT JOIN locks l ON l.state_id = s.id{version}
    WHERE {where}
    ORDER BY {order}
    LIMIT %(limit)s OFFSET %(offset)s
)
SELECT n.path, n.updated_at, (SELECT count(*) FROM state_versions c WHERE c.state_id = n.id),
       n.info, n.acquired_at, n.lock_principal, v.resource_count,
       v.number, v.serial, v.lineage, v.sha256, v.size, v.created_at, v.principal,
       v.projected, (SELECT count(*) FROM states s WHERE {where}),
       (SELECT tw.tags FROM tfe_workspaces tw
        WHERE tw.tenant_id = %(tenant)s AND tw.path = n.path), w.*
FROM page n
LEFT JOIN LATERAL (
    SELECT * FROM state_versions WHERE state_id = n.id ORDER BY number DESC LIMIT 1
) v ON true
LEFT JOIN LATERAL (
    SELECT {events} FROM events e
    WHERE e.tenant_id = %(tenant)s AND e.state_path = n.path
      AND coalesce(e.sha256, encode(e.sha256_bytes, 'hex')) = v.sha256
    ORDER BY e.seq DESC LIMIT 1
) w ON true
ORDER BY n.position
"""

_COUNT = "SELECT count(*) FROM states s WHERE {where}"


def _where(query: StateListQuery) -> tuple[str, dict[str, Any]]:
    conditions = ["s.tenant_id = %(tenant)s"]
    params: dict[str, Any] = {}
    if query.name_contains:
        conditions.append("strpos(translate(s.path, %(upper)s, %(lower)s),"
                          " translate(%(name)s, %(upper)s, %(lower)s)) > 0")
        params.update(name=query.name_contains, upper=ASCII_UPPER, lower=ASCII_LOWER)
    if query.path_prefix is not None:
        conditions.append("starts_with(s.path, %(prefix)s)")
        params["prefix"] = query.path_prefix
    if query.lock == "locked":
        conditions.append("EXISTS (SELECT 1 FROM locks lk WHERE lk.state_id = s.id)")
    elif query.lock == "unlocked":
        conditions.append("NOT EXISTS (SELECT 1 FROM locks lk WHERE lk.state_id = s.id)")
    elif query.lock == "stale":
        conditions.append("EXISTS (SELECT 1 FROM locks lk WHERE lk.state_id = s.id"
                          " AND lk.acquired_at < %(stale_before)s)")
        params["stale_before"] = query.stale_before
    if query.unchanged_before is not None:
        conditions.append("s.updated_at < %(unchanged_before)s")
        params["unchanged_before"] = query.unchanged_before
    if query.tag is not None:
        key, value = tag_parts(query.tag)
        condition = ("EXISTS (SELECT 1 FROM tfe_workspaces tw, jsonb_array_elements(tw.tags) t"
                     " WHERE tw.tenant_id = s.tenant_id AND tw.path = s.path"
                     " AND t->>0 = %(tag_key)s")
        params["tag_key"] = key
        if value is not None:
            condition += " AND t->>1 = %(tag_value)s"
            params["tag_value"] = value
        conditions.append(condition + ")")
    return " AND ".join(conditions), params


def select_states_page(query: StateListQuery) -> tuple[str, str, dict[str, Any]]:
    """A listing page: its statement, the statement counting every match
    (for a page past the end), and their parameters (the tenant's is
    C{%(tenant)s}, set by the caller)."""
    where, params = _where(query)
    direction = "DESC" if query.descending else "ASC"
    order = f's.path COLLATE "C" {direction}'
    if query.sort in _SORT_COLUMNS:
        nulls = "NULLS LAST" if query.descending else "NULLS FIRST"
        order = f'{_SORT_COLUMNS[query.sort]} {direction} {nulls}, s.path COLLATE "C" ASC'
    params.update(limit=query.limit, offset=query.offset)
    version = _SORT_VERSION if query.sort in _NEEDS_VERSION else ""
    return (_PAGE.format(where=where, order=order, version=version, events=EVENT_COLUMNS_LIMITED),
            _COUNT.format(where=where), params)


def _listing(tenant: str, row: tuple[Any, ...]) -> StateListing:
    (path, updated_at, version_count, info, acquired_at, lock_principal, resource_count,
     *rest) = row
    version_columns, tags, events = rest[:8], rest[9], rest[10:]
    if isinstance(tags, str):
        tags = json.loads(tags)
    summary = StateSummary(
        key=StateKey(tenant, path),
        current=None if version_columns[0] is None else rows.version(version_columns),
        version_count=version_count,
        resource_count=resource_count or 0,
        lock=None if info is None else rows.held_lock((info, acquired_at, lock_principal, None)),
        updated_at=rows.utc(updated_at),
    )
    return StateListing(summary, None if events[0] is None else rows.event(events),
                        tuple((str(key), str(value)) for key, value in tags or ()))


_SESSION_COLUMNS = ("id_hash, tenant_id, name, scope, workspace_id, env_public_id, token_id,"
                    " credential_digest, csrf, created_at, expires_at")

_INSERT_SESSION = (
    "DELETE FROM ui_sessions WHERE expires_at <= %(created_at)s;"  # noqa: S608 - constants
    f" INSERT INTO ui_sessions ({_SESSION_COLUMNS})"
    " VALUES (%(id_hash)s, %(tenant)s, %(name)s, %(scope)s, %(workspace_id)s,"
    " %(env_public_id)s, %(token_id)s, %(credential_digest)s, %(csrf)s, %(created_at)s,"
    " %(expires_at)s)"
)
_FIND_SESSION = (f"SELECT {_SESSION_COLUMNS} FROM ui_sessions"  # noqa: S608 - constant columns
                 " WHERE id_hash = %s AND expires_at > %s")
_DELETE_SESSION = "DELETE FROM ui_sessions WHERE id_hash = %s"


def _session(row: tuple[Any, ...]) -> UiSession:
    (id_hash, tenant, name, scope, workspace_id, env_public_id, token_id, digest, csrf,
     created_at, expires_at) = row
    return UiSession(id_hash=id_hash,
                     principal=Principal(tenant=tenant, name=name, scope=scope,
                                         workspace_id=workspace_id,
                                         env_public_id=env_public_id, token_id=token_id),
                     credential_digest=digest, csrf=csrf, created_at=rows.utc(created_at),
                     expires_at=rows.utc(expires_at))


class PostgresDashboard:
    """The dashboard's reads and sessions, run by C{runner}."""

    def __init__(self, runner: TransactionRunner) -> None:
        self._runner = runner

    def list_states_page(self, tenant: str, query: StateListQuery) -> Deferred[StatePage]:
        """@return: a Deferred firing with the L{StatePage} (see
        L{kilolock.store.interfaces.states.IStateStore.list_states_page}); failing with
        L{kilolock.core.errors.BadRequest} for an unusable query."""
        page_sql, count_sql, params = select_states_page(query)
        params["tenant"] = tenant

        async def select(cursor: Any) -> StatePage:
            await cursor.execute(page_sql, params)
            found = cursor.fetchall()
            if found:
                total = found[0][15]
            else:
                await cursor.execute(count_sql, params)
                total = cursor.fetchone()[0]
            return StatePage(tuple(_listing(tenant, row) for row in found), total)

        async def page() -> StatePage:
            check_listing(query)
            return await self._runner.run_interaction(select)

        return ensureDeferred(page())

    def create_session(self, session: UiSession) -> Deferred[None]:
        """@return: a Deferred firing with None once C{session} is kept."""
        principal = session.principal
        params = {"id_hash": session.id_hash, "tenant": principal.tenant,
                  "name": principal.name, "scope": principal.scope,
                  "workspace_id": principal.workspace_id,
                  "env_public_id": principal.env_public_id, "token_id": principal.token_id,
                  "credential_digest": session.credential_digest, "csrf": session.csrf,
                  "created_at": session.created_at, "expires_at": session.expires_at}

        async def insert(cursor: Any) -> None:
            await cursor.execute(_INSERT_SESSION, params)

        return self._runner.run_interaction(insert)

    def find_session(self, id_hash: str, now: datetime) -> Deferred[UiSession | None]:
        """@return: a Deferred firing with the live session or None."""

        async def find(cursor: Any) -> UiSession | None:
            await cursor.execute(_FIND_SESSION, (id_hash, now))
            row = cursor.fetchone()
            return None if row is None else _session(row)

        return self._runner.run_interaction(find)

    def delete_session(self, id_hash: str) -> Deferred[None]:
        """@return: a Deferred firing with None once the session is gone."""

        async def delete(cursor: Any) -> None:
            await cursor.execute(_DELETE_SESSION, (id_hash,))

        return self._runner.run_interaction(delete)
