"""A window of a tenant's audit events, chosen by the store: the rule of
which events a L{EventPageQuery} matches, and the order they come in.

Paging is by key (an event's C{seq}), never by offset: a page starts right
below (C{before}) or right above (C{after}) an event of the page next to
it, so reading any page of a long chain costs what the page holds, and
events appended meanwhile never shift a page.  Both stores follow
L{event_matches}: the memory store calls it, the PostgreSQL store says the
same in SQL (L{kilolock.store.postgres.event_pages}).
"""

from __future__ import annotations

import json

from attrs import frozen

from kilolock.core.events import AuditEvent


@frozen
class EventPageQuery:
    """Which events, and how many.

    C{before}: only events with a lower seq, newest first (also when both
    are None: the newest events); C{after}: only events with a higher seq,
    oldest first.  C{kind}: that kind only; C{state_path}: that state only;
    C{path_prefix}: only states whose path starts with it (a token scoped
    to one environment; events about no state excluded); C{by}: text the
    event's principal or one of its detail's values contains."""

    limit: int
    before: int | None = None
    after: int | None = None
    kind: str | None = None
    state_path: str | None = None
    path_prefix: str | None = None
    by: str | None = None

    @property
    def ascending(self) -> bool:
        return self.after is not None


def escaped(text: str) -> str:
    """C{text} as it appears inside a JSON string of an event's detail
    (which is stored as canonical JSON, non-ASCII characters escaped)."""
    return json.dumps(text)[1:-1]


def event_matches(query: EventPageQuery, event: AuditEvent) -> bool:
    """Whether C{event} is one C{query} asks for (its position aside)."""
    if query.kind is not None and event.kind != query.kind:
        return False
    if query.state_path is not None and event.state_path != query.state_path:
        return False
    if query.path_prefix is not None and not (
            event.state_path is not None and event.state_path.startswith(query.path_prefix)):
        return False
    return query.by is None or query.by in event.principal or escaped(query.by) in event.detail


def in_window(query: EventPageQuery, seq: int) -> bool:
    """Whether an event's seq lies on the asked side of the cursors."""
    return ((query.before is None or seq < query.before)
            and (query.after is None or seq > query.after))
