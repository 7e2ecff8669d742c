"""A window of a tenant's audit events in PostgreSQL
(L{kilolock.rules.event_pages}): L{event_matches} said in SQL, paged by C{seq}
on the C{events_tenant_seq} index, one statement in one transaction.

The C{by} filter: C{strpos} on the principal, and on the detail's stored
JSON text for the search text escaped as JSON escapes it
(L{kilolock.rules.event_pages.escaped}); the detail is never parsed, so a detail
stored before today's text rules (a lone surrogate's escape) is searched
like any other.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.defer import Deferred

from kilolock.core.events import AuditEvent
from kilolock.rules.event_pages import EventPageQuery, escaped
from kilolock.store.postgres import rows
from kilolock.store.postgres.rows import EVENT_COLUMNS_LIMITED
from kilolock.store.postgres.runner import TransactionRunner

__all__ = ["PostgresEventPages", "select_events_page"]

#: Each filter that is set adds its condition (constant fragments).
_CONDITIONS = (
    ("before", "seq < %(before)s"),
    ("after", "seq > %(after)s"),
    ("kind", "kind = %(kind)s"),
    ("state_path", "state_path = %(state_path)s"),
    ("path_prefix", "starts_with(state_path, %(path_prefix)s)"),
    ("by", "(strpos(principal, %(by)s) > 0 OR strpos(detail, %(by_escaped)s) > 0)"),
)


def select_events_page(tenant: str, query: EventPageQuery) -> tuple[str, dict[str, Any]]:
    """The statement and parameters of C{query}'s window of C{tenant}'s events."""
    params: dict[str, Any] = {"tenant": tenant, "limit": query.limit, "before": query.before,
                              "after": query.after, "kind": query.kind,
                              "state_path": query.state_path,
                              "path_prefix": query.path_prefix, "by": query.by,
                              "by_escaped": None if query.by is None else escaped(query.by)}
    conditions = ["tenant_id = %(tenant)s"]
    conditions += [condition for name, condition in _CONDITIONS if params[name] is not None]
    order = "ASC" if query.ascending else "DESC"
    return (f"SELECT {EVENT_COLUMNS_LIMITED} FROM events e"  # noqa: S608 - constant fragments
            f" WHERE {' AND '.join(conditions)} ORDER BY e.seq {order} LIMIT %(limit)s", params)


class PostgresEventPages:
    """L{kilolock.store.interfaces.states.IStateStore.list_events_page} for PostgreSQL."""

    def __init__(self, runner: TransactionRunner) -> None:
        self._runner = runner

    def list_events_page(self, tenant: str,
                         query: EventPageQuery) -> Deferred[list[AuditEvent]]:
        """@return: a Deferred firing with the window's events, newest first
        (oldest first with C{query.after})."""
        statement, params = select_events_page(tenant, query)

        async def select(cursor: Any) -> list[AuditEvent]:
            await cursor.execute(statement, params)
            return [rows.event(row) for row in cursor.fetchall()]

        return self._runner.run_interaction(select)
