"""The states page (C{/ui/}): every state the viewer may see, one page at a
time, filtered by name and sorted, from the store's paged listing."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from attrs import define
from twisted.web.server import Request
from twisted.web.template import Element, Tag, renderer, tags

from kilolock.core.conditions import state_conditions, state_ready
from kilolock.rules.listing import MAX_PAGE, STATE_SORTS, StateListing, StateListQuery, StatePage
from kilolock.rules.scope import scope_prefix
from kilolock.web.resource import Response
from kilolock.web.ui import BASE_PATH, format
from kilolock.web.ui.base import UiResource, Viewer, page_count, pager, render_page, template
from kilolock.web.ui.params import choice, number, state_url, text, with_query

SORT_LABELS = {"name": "Name", "updated": "Last change", "serial": "Serial",
               "resources": "Resources", "size": "Size", "locked": "Lock age"}
PAGE_SIZES = ("50", "25", "100", "200")


async def place_names(page: UiResource, tenant: str) -> dict[str, str]:
    """Workspace and environment names by id, in hosted mode (empty otherwise)."""
    tenants = page.dashboard.tenants
    if tenants is None or page.dashboard.auth_mode != "database":
        return {}
    names = {workspace.id: workspace.name for workspace in await tenants.list_workspaces(tenant)}
    names.update((environment.id, environment.name)
                 for environment in await tenants.list_environments(tenant))
    return names


def options(selected: str, values: dict[str, str]) -> list[Tag]:
    found = []
    for value, label in values.items():
        option = tags.option(label, value=value)
        if value == selected:
            option(selected="selected")
        found.append(option)
    return found


@define(slots=False, eq=False)
class StatesView(Element):
    """The filter form, the table and the pager of one listing page."""

    loader = template("states")

    listing: StatePage
    query: StateListQuery
    q: str
    per: int
    names: dict[str, str]
    hosted: bool
    now: datetime

    def link(self, **changes: Any) -> str:
        parameters = {"q": self.q, "sort": self.query.sort,
                      "dir": "desc" if self.query.descending else "asc", "per": self.per,
                      "page": self.query.offset // self.query.limit + 1}
        parameters.update(changes)
        return with_query(BASE_PATH + "/", parameters)

    @renderer
    def page(self, request: Request, tag: Tag) -> Tag:
        return tag.fillSlots(q=self.q)

    @renderer
    def sort_options(self, request: Request, tag: Tag) -> Tag:
        return tag(options(self.query.sort, SORT_LABELS))

    @renderer
    def direction_options(self, request: Request, tag: Tag) -> Tag:
        return tag(options("desc" if self.query.descending else "asc",
                           {"asc": "Ascending", "desc": "Descending"}))

    @renderer
    def page_size_options(self, request: Request, tag: Tag) -> Tag:
        return tag(options(str(self.per), {size: size for size in PAGE_SIZES}))

    @renderer
    def count(self, request: Request, tag: Tag) -> Tag:
        total = self.listing.total
        first = self.query.offset + 1 if self.listing.listings else 0
        last = self.query.offset + len(self.listing.listings)
        what = f" matching “{self.q}”" if self.q else ""
        return tag(f"{total} states{what}; showing {first}\u2013{last}.")

    @renderer
    def head(self, request: Request, tag: Tag) -> Tag:
        columns = ["Workspace", "Environment"] if self.hosted else []
        columns += ["State", "Serial", "Last write", "Lock", "Resources", "Terraform", "Size",
                    "Status"]
        sorted_column = {"name": "State", "serial": "Serial", "updated": "Last write",
                         "locked": "Lock", "resources": "Resources", "size": "Size"}
        heads = []
        for column in columns:
            head = tags.th(column, scope="col")
            if sorted_column.get(self.query.sort) == column:
                head(**{"aria-sort": "descending" if self.query.descending else "ascending"})
            heads.append(head)
        return tag(heads)

    @renderer
    def rows(self, request: Request, tag: Tag) -> Tag:
        if not self.listing.listings:
            span = 10 if self.hosted else 8
            return tag(tags.tr(tags.td("No states.", colspan=str(span))))
        return tag([self.row(listing) for listing in self.listing.listings])

    def row(self, listing: StateListing) -> Tag:
        summary = listing.summary
        current = summary.current
        path = summary.key.path
        segments = path.split("/")
        cells: list[Tag] = []
        if self.hosted and len(segments) == 3:
            cells += [tags.td(self.names.get(segments[0], segments[0])),
                      tags.td(self.names.get(segments[1], segments[1]))]
            name = segments[2]
        elif self.hosted:
            cells += [tags.td("—"), tags.td("—")]
            name = path
        else:
            name = path
        cells.append(tags.th(tags.a(name, href=state_url(path)), scope="row"))
        cells.append(tags.td("—" if current is None else str(current.serial), class_="num"))
        cells.append(tags.td(self.last_write(listing)))
        cells.append(tags.td(self.lock(listing)))
        cells.append(tags.td(str(summary.resource_count) if current is not None
                             and current.projected else "—", class_="num"))
        version = format.detail_of(listing.last_write).get("terraform_version")
        cells.append(tags.td(version if isinstance(version, str) else "—"))
        cells.append(tags.td(format.size(None if current is None else current.size),
                             class_="num"))
        cells.append(tags.td(self.status(listing)))
        return tags.tr(cells)

    def last_write(self, listing: StateListing) -> Any:
        current = listing.summary.current
        if current is None:
            return "no version yet"
        event = listing.last_write
        who = format.identity(event) if event is not None else current.principal
        return [tags.time(format.when(current.created_at),
                          datetime=current.created_at.isoformat()),
                tags.br(), "by ", who, tags.br(), "from ", format.client(event)]

    def lock(self, listing: StateListing) -> Any:
        lock = listing.summary.lock
        if lock is None:
            return "unlocked"
        held = [lock.info.who or lock.principal, tags.br(),
                f"{lock.info.operation or 'locked'}, {format.age(format.lock_age(lock, self.now))}"]
        if format.is_stale(lock, self.now):
            held += [" ", tags.strong("stale", class_="stale")]
        return held

    def status(self, listing: StateListing) -> Any:
        summary = listing.summary
        conditions = state_conditions(summary, self.now)
        badges: list[Any] = []
        if summary.current is not None and not summary.current.projected:
            badges.append(tags.span("encrypted (OpenTofu)", class_="badge encrypted"))
        ready = state_ready(conditions)
        badges.append(tags.span("ready" if ready else "not ready",
                                class_="badge " + ("ready" if ready else "waiting")))
        badges.append(tags.ul([tags.li(f"{condition.type}: {condition.status}",
                                       title=condition.message)
                               for condition in conditions], class_="conditions"))
        return badges

    @renderer
    def pager(self, request: Request, tag: Tag) -> Tag:
        return pager(tag, self.query.offset // self.query.limit + 1,
                     page_count(self.listing.total, self.query.limit),
                     "Previous page", "Next page", lambda page: self.link(page=page))


class StatesPage(UiResource):
    """C{GET /ui/}: the states."""

    route = BASE_PATH + "/"
    section = BASE_PATH + "/"

    async def show(self, request: Request, viewer: Viewer) -> Response:
        q = text(request, "q")
        per = int(choice(request, "per", PAGE_SIZES))
        page = number(request, "page", 1, 10**6)
        query = StateListQuery(
            name_contains=q or None, path_prefix=scope_prefix(viewer.principal),
            sort=choice(request, "sort", STATE_SORTS),
            descending=choice(request, "dir", ("asc", "desc")) == "desc",
            offset=(page - 1) * per, limit=min(per, MAX_PAGE))
        listing = await self.lane.store.list_states_page(viewer.principal.tenant, query)
        names = await place_names(self, viewer.principal.tenant)
        view = StatesView(listing, query, q, per, names,
                          self.dashboard.auth_mode == "database",
                          self.dashboard.sessions.now())
        return await render_page(request, self.dashboard, viewer, "States", view,
                                 section=self.section)
