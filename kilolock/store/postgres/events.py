"""The audit chain in PostgreSQL: appending an event, inside the caller's
transaction, and the two calls of L{IStateStore} about events.

Events are chained per tenant: the chain head (last seq and hash) is kept on
the tenant row, which an append locks last in its transaction (the schema's
C{kl_append_event}; the lock order is described in C{006_write_path.sql});
the hash is PostgreSQL's sha256() over the text L{kilolock.core.audit.event_hash}
hashes (L{kilolock.core.audit.event_hash_template}), so both stores chain alike.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from attrs import evolve
from twisted.internet.defer import Deferred

from kilolock.core.audit import GENESIS_HEAD, ChainHead, event_hash_template, unchained_event
from kilolock.core.events import AuditEvent
from kilolock.store.postgres import rows, statements
from kilolock.store.postgres.runner import TransactionRunner

__all__ = ["PostgresEvents", "append_event_and_commit_txn", "append_event_txn",
           "event_parameters", "numbered_event_parameters"]

#: Stand-ins for a version number that only the database learns: numbers no
#: event text holds otherwise (the first that occurs once is used).
_NUMBER_STAND_INS = (987654321987654321, 918273645546372819, 897969594939291909)


def event_parameters(tenant: str, kind: str, principal: str, state_path: str | None,
                     at: datetime, *, lock_id: str | None = None, serial: int | None = None,
                     sha256: str | None = None,
                     detail: Mapping[str, Any] | None = None) -> tuple[AuditEvent, dict[str, Any]]:
    """An event (seq and hashes still to come) and the parameters of
    L{statements.APPEND_EVENT} (and of the mutations that append one) that
    append it."""
    event = unchained_event(tenant, kind, principal, state_path, at, lock_id=lock_id,
                            serial=serial, sha256=sha256, detail=detail)
    prefix, suffix = event_hash_template(event)
    return event, {
        "tenant": tenant, "kind": kind, "path": state_path, "principal": principal,
        "at": at, "lock_id": lock_id, "serial": serial, "sha256": sha256,
        "detail": event.detail, "prefix": prefix, "suffix": suffix,
    }


def numbered_event_parameters(
        tenant: str, kind: str, principal: str, state_path: str | None, at: datetime,
        detail_of: Callable[[int], Mapping[str, Any]], *, lock_id: str | None = None,
        serial: int | None = None, sha256: str | None = None) -> dict[str, Any]:
    """The parameters that append an event whose detail names a number
    (C{detail_of(number)}: a new version's) that the database picks: the
    detail and the hash prefix each in two parts around the number, so that
    C{detail = detail_head || number || detail_tail} and the hash input is
    C{prev_hash || prefix_head || number || prefix_tail || seq || suffix}
    (the detail comes before C{seq} in the event's canonical JSON)."""
    for stand_in in _NUMBER_STAND_INS:
        _, params = event_parameters(tenant, kind, principal, state_path, at, lock_id=lock_id,
                                     serial=serial, sha256=sha256, detail=detail_of(stand_in))
        mark = str(stand_in)
        if params["detail"].count(mark) == 1 and params["prefix"].count(mark) == 1 \
                and mark not in params["suffix"]:
            detail_head, detail_tail = params.pop("detail").split(mark)
            prefix_head, prefix_tail = params.pop("prefix").split(mark)
            return {**params, "detail_head": detail_head, "detail_tail": detail_tail,
                    "prefix_head": prefix_head, "prefix_tail": prefix_tail}
    raise ValueError("every stand-in for the number occurs in the event's text")


async def append_event_txn(cursor: Any, tenant: str, kind: str, principal: str,
                           state_path: str | None, at: datetime, *,
                           lock_id: str | None = None, serial: int | None = None,
                           sha256: str | None = None,
                           detail: dict[str, Any] | None = None) -> AuditEvent:
    """Append an event to the tenant's chain in one statement: lock the
    chain head on the tenant row, link, hash, insert, move the head.  A
    missing tenant is created first.

    @return: the appended L{AuditEvent}."""
    event, params = event_parameters(tenant, kind, principal, state_path, at,
                                     lock_id=lock_id, serial=serial, sha256=sha256,
                                     detail=detail)
    await cursor.execute(statements.APPEND_EVENT, params)
    row = cursor.fetchone()
    if row[0] is None:  # no such tenant yet
        await cursor.execute(statements.CREATE_TENANT, (tenant,))
        await cursor.execute(statements.APPEND_EVENT, params)
        row = cursor.fetchone()
    seq, prev_hash, hash_ = row
    return evolve(event, seq=seq, prev_hash=prev_hash, hash=hash_)


async def append_event_and_commit_txn(cursor: Any, tenant: str, kind: str, principal: str,
                                      state_path: str | None, at: datetime, *,
                                      lock_id: str | None = None, serial: int | None = None,
                                      sha256: str | None = None,
                                      detail: dict[str, Any] | None = None) -> None:
    """L{append_event_txn} as a transaction's last statement, with the
    COMMIT in the same round trip.  Only for a tenant that exists: one with
    a state row (a foreign key), as every state-lane event has."""
    _, params = event_parameters(tenant, kind, principal, state_path, at,
                                 lock_id=lock_id, serial=serial, sha256=sha256, detail=detail)
    await cursor.execute(statements.APPEND_EVENT, params, commit=True)


class PostgresEvents:
    """Reading a tenant's chain and appending control-plane events."""

    def __init__(self, runner: TransactionRunner, clock: Callable[[], datetime]) -> None:
        self._runner = runner
        self._clock = clock

    def list_events(self, tenant: str, state_path: str | None = None,
                    kinds: Iterable[str] | None = None, since: datetime | None = None,
                    until: datetime | None = None) -> Deferred[list[AuditEvent]]:
        """@return: a Deferred firing with the tenant's events in chain order,
        filtered by state path, kinds and the time range [since, until)."""
        wanted = None if kinds is None else list(kinds)
        query = statements.select_events(state_path, wanted, since, until)
        params = {"tenant": tenant, "path": state_path, "kinds": wanted,
                  "since": since, "until": until}

        async def select(cursor: Any) -> list[AuditEvent]:
            await cursor.execute(query, params)
            return [rows.event(row) for row in cursor.fetchall()]

        return self._runner.run_interaction(select)

    def record_event(self, tenant: str, kind: str, principal: str,
                     state_path: str | None = None,
                     detail: dict[str, Any] | None = None) -> Deferred[AuditEvent]:
        """Append a control-plane event to the tenant's chain.

        @return: a Deferred firing with the new L{AuditEvent}."""

        async def record(cursor: Any) -> AuditEvent:
            return await append_event_txn(cursor, tenant, kind, principal, state_path,
                                          self._clock(), detail=detail or {})

        return self._runner.run_interaction(record)

    def chain_head(self, tenant: str) -> Deferred[ChainHead]:
        """@return: a Deferred firing with the tenant's chain head as its
        tenant row records it (L{SELECT_CHAIN_HEAD})."""

        async def select(cursor: Any) -> ChainHead:
            await cursor.execute(SELECT_CHAIN_HEAD, (tenant,))
            row = cursor.fetchone()
            return GENESIS_HEAD if row is None else ChainHead(int(row[0]), str(row[1]))

        return self._runner.run_interaction(select)


# The chain head as the tenant row records it.  Every append moves it in the
# statement that inserts the event (statements.APPEND_EVENT_STEPS, "moved"),
# so deleting the newest events leaves it ahead of them: verify compares.
SELECT_CHAIN_HEAD = "SELECT chain_seq, chain_head FROM tenants WHERE id = %s"
