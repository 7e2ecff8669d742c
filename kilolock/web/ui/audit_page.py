"""The audit trail (C{/ui/audit}): the events the viewer may see, filtered
and paged by key on the server (L{kilolock.rules.event_pages}: a page costs what
it shows, however long the chain), with the tenant's chain head; and
C{/ui/audit/verify}, the verification of the whole hash chain
(L{kilolock.web.chain.check_tenant_chain}) naming the first broken link,
an action of its own since it reads every event of the tenant."""

from __future__ import annotations

from typing import Any

from attrs import define, evolve, frozen
from twisted.web.server import Request
from twisted.web.template import Element, Tag, renderer, tags

from kilolock.core.audit import ChainHead
from kilolock.core.errors import BadRequest
from kilolock.core.events import (
    LOCK_ACQUIRE,
    LOCK_FORCE_RELEASE,
    LOCK_RELEASE,
    STATE_DELETE,
    STATE_OPERATION,
    STATE_ROLLBACK,
    STATE_WRITE,
    AuditEvent,
)
from kilolock.core.model import Principal
from kilolock.rules.event_pages import EventPageQuery
from kilolock.rules.scope import in_scope, scope_prefix
from kilolock.store.interfaces.states import IStateStore
from kilolock.web.chain import check_tenant_chain
from kilolock.web.resource import Response
from kilolock.web.ui import BASE_PATH, format
from kilolock.web.ui.base import UiResource, Viewer, render_page, template
from kilolock.web.ui.params import number, state_url, text, with_query
from kilolock.web.ui.states_page import labelled, options

EVENT_PAGE = 100
#: Windows of the store read at most for one page when the viewer's scope
#: cannot be said to the store (a CI identity's grants): beyond them the
#: page shows what it found and links on from where it stopped.
MAX_WINDOWS = 10
#: The largest seq a cursor may name.
MAX_SEQ = 2**31 - 1
STATE_KINDS = (STATE_WRITE, STATE_ROLLBACK, STATE_OPERATION, STATE_DELETE, LOCK_ACQUIRE,
               LOCK_RELEASE, LOCK_FORCE_RELEASE)
AUDIT_PATH = BASE_PATH + "/audit"
VERIFY_PATH = AUDIT_PATH + "/verify"


def facts(event: AuditEvent) -> list[str]:
    """The event's facts that are not its author: lock, serial, version."""
    detail = format.detail_of(event)
    parts = []
    for key in ("version", "size", "restored_version", "versions", "terraform_version",
                "operation", "who", "via"):
        if key in detail and detail[key] not in ("", None):
            parts.append(f"{key}={detail[key]}")
    if event.serial is not None:
        parts.append(f"serial={event.serial}")
    if event.lock_id:
        parts.append(f"lock={event.lock_id}")
    return parts



@frozen
class EventWindow:
    """One page of events, newest first, and the cursors of the pages
    around it (None: no such page)."""

    events: list[AuditEvent]
    older: int | None
    newer: int | None


async def event_window(store: IStateStore, principal: Principal, filters: dict[str, str],
                       before: int | None, after: int | None) -> EventWindow:
    """The page of events the principal may see below C{before} (or above
    C{after}; the newest without either), matching C{filters}.

    A token's environment is said to the store as a path prefix; the grants
    of a CI identity are checked here, reading up to L{MAX_WINDOWS} windows.

    @return: (awaited) the L{EventWindow}.
    """
    query = EventPageQuery(limit=EVENT_PAGE + 1, before=before, after=after,
                           kind=filters["kind"] or None, state_path=filters["state"] or None,
                           path_prefix=scope_prefix(principal), by=filters["by"] or None)
    found: list[AuditEvent] = []
    exhausted = False
    for _ in range(MAX_WINDOWS):
        window = await store.list_events_page(principal.tenant, query)
        found += [event for event in window if in_scope(principal, event.state_path)]
        exhausted = len(window) < query.limit
        if exhausted or len(found) > EVENT_PAGE:
            break
        query = _moved(query, window[-1].seq)
    shown = found[:EVENT_PAGE]
    further: int | None = None
    if len(found) > EVENT_PAGE:
        further = shown[-1].seq
    elif not exhausted:  # stopped after MAX_WINDOWS: go on from the last event read
        further = query.after if query.ascending else query.before
    if after is not None:
        older = shown[0].seq if shown else after + 1
        shown.reverse()
        return EventWindow(shown, older=older, newer=further)
    newer = None if before is None else (shown[0].seq if shown else before - 1)
    return EventWindow(shown, older=further, newer=newer)


def _moved(query: EventPageQuery, last: int) -> EventPageQuery:
    """C{query}'s next window, past the event with seq C{last}."""
    return evolve(query, after=last) if query.ascending else evolve(query, before=last)


@define(slots=False, eq=False)
class AuditView(Element):
    loader = template("audit")

    window: EventWindow
    filters: dict[str, str]
    head: ChainHead

    @renderer
    def page(self, request: Request, tag: Tag) -> Tag:
        shown = self.window.events
        count = "No events on this page."
        if shown:
            count = (f"{format.plural(len(shown), 'event')} on this page, seq {shown[0].seq}"
                     f" down to {shown[-1].seq}.")
        return tag.fillSlots(state=self.filters["state"], by=self.filters["by"], count=count)

    @renderer
    def chain(self, request: Request, tag: Tag) -> Tag:
        head = self.head
        facts = (f"the tenant's chain has {head.seq} events; its head (seq {head.seq}) is"
                 f" {head.hash[:16]}…." if head.seq else "the tenant's chain has no events.")
        return tag(tags.p(tags.strong("Audit chain: "), facts, " ",
                          tags.a("Verify the whole chain", href=VERIFY_PATH),
                          " (reads every event of the tenant)."), class_="chain")

    @renderer
    def kind_options(self, request: Request, tag: Tag) -> Tag:
        kinds = {"": "any", **{kind: kind for kind in STATE_KINDS}}
        if self.filters["kind"] and self.filters["kind"] not in kinds:
            kinds[self.filters["kind"]] = self.filters["kind"]
        return tag(options(self.filters["kind"], kinds))

    @renderer
    def events(self, request: Request, tag: Tag) -> Tag:
        if not self.window.events:
            return tag(tags.tr(tags.td("No events.", colspan="7")))
        rows = []
        for event in self.window.events:
            state: Any = "—"
            if event.state_path is not None:
                state = tags.a(event.state_path, href=state_url(event.state_path))
            found = facts(event)
            detail: Any = (tags.ul([tags.li(fact) for fact in found], class_="facts")
                           if found else "—")
            rows.append(tags.tr(
                labelled(tags.td(str(event.seq), class_="num"), "Seq"),
                labelled(tags.td(tags.time(format.when(event.at),
                                           datetime=event.at.isoformat())), "When"),
                labelled(tags.td(event.kind), "Kind"), labelled(tags.td(state), "State"),
                labelled(tags.td(format.identity(event), class_="who"), "By"),
                labelled(tags.td(format.client(event)), "Client"),
                labelled(tags.td(detail, class_="detail"), "Detail")))
        return tag(rows)

    @renderer
    def pager(self, request: Request, tag: Tag) -> Tag:
        parts: list[Any] = []
        if self.window.newer is not None:
            parts.append(tags.a("Newest events", href=with_query(AUDIT_PATH, self.filters)))
            parts.append(tags.a("Newer events", rel="prev", href=with_query(
                AUDIT_PATH, {**self.filters, "after": self.window.newer})))
        if self.window.older is not None:
            parts.append(tags.a("Older events", rel="next", href=with_query(
                AUDIT_PATH, {**self.filters, "before": self.window.older})))
        return tag(parts)


class AuditPage(UiResource):
    """C{GET /ui/audit}: the audit trail, C{?before=SEQ} or C{?after=SEQ}
    paging it; C{/ui/audit/verify} below."""

    route = AUDIT_PATH
    section = AUDIT_PATH

    def __init__(self, dashboard: Any) -> None:
        super().__init__(dashboard)
        self.putChild(b"verify", AuditVerifyPage(dashboard))

    async def show(self, request: Request, viewer: Viewer) -> Response:
        filters = {name: text(request, name) for name in ("kind", "state", "by")}
        before = number(request, "before", 0, MAX_SEQ) or None
        after = number(request, "after", 0, MAX_SEQ) or None
        if before is not None and after is not None:
            raise BadRequest("give before or after, not both")
        head = await self.lane.store.chain_head(viewer.principal.tenant)
        window = await event_window(self.lane.store, viewer.principal, filters, before, after)
        return await render_page(request, self.dashboard, viewer, "Audit trail",
                                 AuditView(window, filters, head), section=self.section)


class AuditVerifyPage(UiResource):
    """C{GET /ui/audit/verify}: every event of the tenant checked, link by
    link, against the head the store recorded."""

    route = VERIFY_PATH
    section = AUDIT_PATH

    async def show(self, request: Request, viewer: Viewer) -> Response:
        check = await check_tenant_chain(self.lane.store, viewer.principal.tenant, None)
        broken = check.broken
        if broken is None:
            result = tags.p(tags.strong("Chain verified: "),
                            f"all {len(check.events)} events of the tenant link up and match"
                            f" their hashes, up to the recorded head (seq {check.head.seq}).",
                            class_="chain ok", role="status")
        else:
            result = tags.p(tags.strong("Chain broken: "),
                            f"the first broken link is event seq {broken.seq}:"
                            f" {broken.reason()}.", class_="chain broken", role="alert")
        content = tags.div(result, tags.p(tags.a("Back to the audit trail", href=AUDIT_PATH)))
        return await render_page(request, self.dashboard, viewer, "Audit chain", content,
                                 section=self.section)
