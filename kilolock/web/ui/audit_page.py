"""The audit trail (C{/ui/audit}): the events the viewer may see, filtered
and paged, and the verification of the tenant's hash chain
(L{kilolock.audit.verify_chain}) naming the first broken link."""

from __future__ import annotations

from typing import Any

from attrs import define
from twisted.web.server import Request
from twisted.web.template import Element, Tag, renderer, tags

from kilolock.audit import ChainBreak, verify_chain
from kilolock.model import (
    LOCK_ACQUIRE,
    LOCK_FORCE_RELEASE,
    LOCK_RELEASE,
    STATE_DELETE,
    STATE_OPERATION,
    STATE_ROLLBACK,
    STATE_WRITE,
    AuditEvent,
    Principal,
)
from kilolock.scope import in_scope
from kilolock.web._base import Response
from kilolock.web.ui import BASE_PATH, format
from kilolock.web.ui.base import UiResource, Viewer, page_count, pager, render_page, template
from kilolock.web.ui.params import number, state_url, text, with_query
from kilolock.web.ui.states_page import options

EVENT_PAGE = 100
STATE_KINDS = (STATE_WRITE, STATE_ROLLBACK, STATE_OPERATION, STATE_DELETE, LOCK_ACQUIRE,
               LOCK_RELEASE, LOCK_FORCE_RELEASE)


def what(event: AuditEvent) -> str:
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
    return ", ".join(parts) or "—"


@define(slots=False, eq=False)
class AuditView(Element):
    loader = template("audit")

    shown: list[AuditEvent]
    total: int
    current_page: int
    filters: dict[str, str]
    broken: ChainBreak | None
    chain_length: int
    principal: Principal

    @renderer
    def page(self, request: Request, tag: Tag) -> Tag:
        return tag.fillSlots(state=self.filters["state"], by=self.filters["by"],
                             count=f"{self.total} events.")

    @renderer
    def chain(self, request: Request, tag: Tag) -> Tag:
        if self.broken is None:
            return tag(tags.p(tags.strong("Chain verified: "),
                              f"all {self.chain_length} events of the tenant link up and match"
                              " their hashes."), class_="chain ok", role="status")
        return tag(tags.p(tags.strong("Chain broken: "),
                          f"the first broken link is event seq {self.broken.seq}:"
                          f" {self.broken.reason()}."), class_="chain broken", role="alert")

    @renderer
    def kind_options(self, request: Request, tag: Tag) -> Tag:
        kinds = {"": "any", **{kind: kind for kind in STATE_KINDS}}
        if self.filters["kind"] and self.filters["kind"] not in kinds:
            kinds[self.filters["kind"]] = self.filters["kind"]
        return tag(options(self.filters["kind"], kinds))

    @renderer
    def events(self, request: Request, tag: Tag) -> Tag:
        if not self.shown:
            return tag(tags.tr(tags.td("No events.", colspan="7")))
        rows = []
        for event in self.shown:
            state: Any = "—"
            if event.state_path is not None:
                state = tags.a(event.state_path, href=state_url(event.state_path))
            rows.append(tags.tr(tags.td(str(event.seq), class_="num"),
                                tags.td(format.when(event.at)), tags.td(event.kind),
                                tags.td(state), tags.td(format.identity(event)),
                                tags.td(format.client(event)), tags.td(what(event))))
        return tag(rows)

    @renderer
    def pager(self, request: Request, tag: Tag) -> Tag:
        return pager(tag, self.current_page, page_count(self.total, EVENT_PAGE),
                     "Newer events", "Older events",
                     lambda page: with_query(BASE_PATH + "/audit",
                                             {**self.filters, "page": page}))


class AuditPage(UiResource):
    """C{GET /ui/audit}: the audit trail."""

    route = BASE_PATH + "/audit"
    section = BASE_PATH + "/audit"

    async def show(self, request: Request, viewer: Viewer) -> Response:
        filters = {name: text(request, name) for name in ("kind", "state", "by")}
        page = number(request, "page", 1, 10**6)
        # The head first: an event appended meanwhile only extends the chain.
        head = await self.lane.store.chain_head(viewer.principal.tenant)
        chain = await self.lane.store.list_events(viewer.principal.tenant)
        broken = verify_chain(chain, heads=[head])
        shown = [event for event in chain
                 if in_scope(viewer.principal, event.state_path)
                 and (not filters["kind"] or event.kind == filters["kind"])
                 and (not filters["state"] or event.state_path == filters["state"])
                 and (not filters["by"] or filters["by"] in format.identity(event))][::-1]
        view = AuditView(shown[(page - 1) * EVENT_PAGE:page * EVENT_PAGE], len(shown), page,
                         filters, broken, len(chain), viewer.principal)
        return await render_page(request, self.dashboard, viewer, "Audit trail", view,
                                 section=self.section)
