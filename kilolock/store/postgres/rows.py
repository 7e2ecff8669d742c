"""Rows to values: what each SELECT's columns become.

Each mapper reads the columns its C{*_COLUMNS} list names, in that order;
the statements select them with those lists.  Timestamps come back in UTC,
bytea as hex text (see L{kilolock.store.postgres.connection.BYTEA_AS_HEX}),
JSON columns in the parser's canonical form.  Pure functions: no I/O.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, overload

from attrs import evolve

from kilolock.core.audit import GENESIS
from kilolock.core.events import AuditEvent
from kilolock.core.model import (
    DependencyRow,
    HeldLock,
    LockInfo,
    OutputRow,
    Projection,
    ResourceRow,
    StateVersion,
)
from kilolock.rules.hosted import ApiToken, Environment, Tenant, Workspace
from kilolock.rules.locks import Holder
from kilolock.rules.resources import ResourceMatch
from kilolock.store.postgres.codecs import bytes_from_hex

__all__ = [
    "ENVIRONMENT_COLUMNS",
    "EVENT_COLUMNS",
    "EVENT_COLUMNS_LIMITED",
    "TENANT_COLUMNS",
    "TOKEN_COLUMNS",
    "VERSION_COLUMNS",
    "WORKSPACE_COLUMNS",
    "environment",
    "event",
    "held_lock",
    "holder",
    "listed_version",
    "matches_from_rows",
    "projection_from_rows",
    "tenant",
    "token",
    "utc",
    "version",
    "workspace",
]

#: A version row C{v}: L{version}.
VERSION_COLUMNS = (
    "v.number, v.serial, v.lineage, v.sha256, v.size, v.created_at, v.principal, v.projected"
)
# An event's hash and sha256 as lowercase hex text, whichever form its row
# holds (schema 12: text before, bytes since), for an C{events} row C{e};
# its lock ID likewise (since schema 12 a uuid when it is one, in lowercase).
_HASH = "coalesce({e}.hash, encode({e}.hash_bytes, 'hex'))"
_SHA256 = "coalesce(e.sha256, encode(e.sha256_bytes, 'hex'))"
# The prev_hash of an event stored without it (schema 12): L{GENESIS} at
# seq 1; else, in a statement that reads all the rows it selects in
# ascending seq, the hash of the row selected just before it when that is
# the event before; else that event's, looked up by events_tenant_seq; NULL
# when it is missing.
_LOOKED_UP = (f"(SELECT {_HASH.format(e='ep')} FROM events ep"  # noqa: S608 - constants
              " WHERE ep.tenant_id = e.tenant_id AND ep.seq = e.seq - 1)")
_PREV_FROM_ROW_BEFORE = (f"CASE WHEN e.seq = 1 THEN '{GENESIS}'"
                         " WHEN lag(e.seq) OVER (ORDER BY e.seq) = e.seq - 1"
                         f" THEN lag({_HASH.format(e='e')}) OVER (ORDER BY e.seq)"
                         f" ELSE {_LOOKED_UP} END")
_PREV_LOOKED_UP = f"CASE WHEN e.seq = 1 THEN '{GENESIS}' ELSE {_LOOKED_UP} END"
_COLUMNS = ("e.seq, e.tenant_id, e.kind, e.state_path, e.principal, e.at,"
            " coalesce(e.lock_id, e.lock_uuid::text) AS lock_id,"
            f" e.serial, {_SHA256} AS sha256, e.detail,"
            " coalesce(e.prev_hash, {prev}, '') AS prev_hash,"
            f" {_HASH.format(e='e')} AS hash")
#: An C{events} row C{e}: L{event}, for a statement that reads every row it
#: selects, ordered by C{e.seq} (ascending).  An event stored without its
#: prev_hash (schema 12) gets the hash of the event before it in the
#: tenant's chain, whether the statement selects it or not; an empty
#: prev_hash when that event is missing (its own hash then does not verify).
EVENT_COLUMNS = _COLUMNS.format(prev=_PREV_FROM_ROW_BEFORE)
#: L{EVENT_COLUMNS} for a statement with a LIMIT, in either order: each
#: prev_hash not stored is looked up (a window would read rows past the
#: LIMIT: the next peer, in descending order the rest of a selective scan).
EVENT_COLUMNS_LIMITED = _COLUMNS.format(prev=_PREV_LOOKED_UP)
#: A C{tenants} row: L{tenant}.
TENANT_COLUMNS = "id, slug, name, created_at, deleted_at"
#: A C{workspaces} row: L{workspace}.
WORKSPACE_COLUMNS = "id, tenant_id, name, created_at"
#: An C{environments} row: L{environment}.
ENVIRONMENT_COLUMNS = "id, workspace_id, tenant_id, name, created_at"
#: An C{api_tokens} row: L{token}.
TOKEN_COLUMNS = ("id, tenant_id, name, workspace_id, env_public_id, scope, created_at,"  # noqa: S105
                 " last_used_at, revoked_at")


@overload
def utc(moment: datetime) -> datetime: ...


@overload
def utc(moment: None) -> None: ...


def utc(moment: datetime | None) -> datetime | None:
    """A timestamp in UTC (None stays None)."""
    return None if moment is None else moment.astimezone(UTC)


def version(row: Any) -> StateVersion:
    number, serial, lineage, sha256, size, created_at, principal, projected = row
    return StateVersion(number=number, serial=serial, lineage=lineage, sha256=sha256,
                        size=size, created_at=utc(created_at), principal=principal,
                        projected=projected)


def listed_version(row: Any) -> StateVersion:
    """A row of L{VERSION_COLUMNS} followed by C{pruned_at, prune_reason}."""
    pruned_at, prune_reason = row[-2:]
    return evolve(version(row[:-2]), pruned_at=utc(pruned_at), prune_reason=prune_reason)


def held_lock(row: Any) -> HeldLock:
    """An (info, acquired_at, principal, token_digest) row of C{locks}."""
    info, acquired_at, principal, token_digest = row
    return HeldLock(info=LockInfo.stored(bytes_from_hex(info)),
                    acquired_at=utc(acquired_at),
                    principal=principal, token_digest=token_digest)


def holder(row: Any) -> Holder | None:
    """A (lock_id, info) row of C{locks} as the lock rules read it; no row,
    or a row of NULLs, is nothing held."""
    if row is None or row[0] is None:
        return None
    lock_id, info = row
    return Holder(lock_id, bytes_from_hex(info))


def event(row: Any) -> AuditEvent:
    (seq, tenant_id, kind, state_path, principal, at, lock_id, serial, sha256, detail,
     prev_hash, hash_) = row
    return AuditEvent(seq=seq, tenant=tenant_id, kind=kind, state_path=state_path,
                      principal=principal, at=utc(at), lock_id=lock_id, serial=serial,
                      sha256=sha256, detail=detail, prev_hash=prev_hash, hash=hash_)


def _canonical_json(text: str | None) -> str | None:
    """JSON text in the parser's form: compact, key-sorted, ASCII."""
    if text is None:
        return None
    return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))


def projection_from_rows(resources: Any, dependencies: Any, outputs: Any) -> Projection:
    """The rows of the three projection tables, in state order."""
    return Projection(
        resources=tuple(
            ResourceRow(address=address, module=module, mode=mode, type=type_, name=name,
                        provider=provider, index_key=_canonical_json(index_key),
                        deposed=deposed, attributes=_canonical_json(attributes) or "{}")
            for address, module, mode, type_, name, provider, index_key, deposed, attributes
            in resources),
        dependencies=tuple(DependencyRow(address=address, depends_on=depends_on)
                           for address, depends_on in dependencies),
        outputs=tuple(OutputRow(name=name, type=_canonical_json(type_),
                                value=_canonical_json(value), sensitive=sensitive)
                      for name, type_, value, sensitive in outputs),
    )


def matches_from_rows(rows: Any) -> list[ResourceMatch]:
    """The rows of a resource query: the state's path and current version
    number, then the resource's columns."""
    return [
        ResourceMatch(state_path=path, version=number, resource=ResourceRow(
            address=address, module=module, mode=mode, type=type_, name=name,
            provider=provider, index_key=_canonical_json(index_key), deposed=deposed,
            attributes=_canonical_json(attributes) or "{}"))
        for (path, number, address, module, mode, type_, name, provider, index_key, deposed,
             attributes) in rows]


def tenant(row: Any) -> Tenant:
    id_, slug, name, created_at, deleted_at = row
    return Tenant(id=id_, slug=slug, name=name, created_at=utc(created_at),
                  deleted_at=utc(deleted_at))


def workspace(row: Any) -> Workspace:
    id_, tenant_id, name, created_at = row
    return Workspace(id=id_, tenant_id=tenant_id, name=name, created_at=utc(created_at))


def environment(row: Any) -> Environment:
    id_, workspace_id, tenant_id, name, created_at = row
    return Environment(id=id_, workspace_id=workspace_id, tenant_id=tenant_id, name=name,
                       created_at=utc(created_at))


def token(row: Any) -> ApiToken:
    (id_, tenant_id, name, workspace_id, env_public_id, scope, created_at, last_used_at,
     revoked_at) = row
    return ApiToken(id=id_, tenant_id=tenant_id, name=name, workspace_id=workspace_id,
                    env_public_id=env_public_id, scope=scope, created_at=utc(created_at),
                    last_used_at=utc(last_used_at), revoked_at=utc(revoked_at))
