"""The states page (C{/ui/}): every state the viewer may see, one page at a
time, filtered (by name, tag, lock, last change) and sorted, from the
store's paged listing.  Calm by default: a lock held is work going on,
said in the lock column; a stale one stands out."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from attrs import define
from twisted.web.server import Request
from twisted.web.template import Element, Tag, renderer, tags

from kilolock.core.errors import BadRequest
from kilolock.rules.listing import (
    LOCK_FILTERS,
    MAX_PAGE,
    STATE_SORTS,
    StateListing,
    StateListQuery,
    StatePage,
)
from kilolock.rules.scope import scope_prefix
from kilolock.rules.stale import stale_before
from kilolock.tfe.names import MAX_TAG_LENGTH
from kilolock.web.resource import Response
from kilolock.web.ui import BASE_PATH, format
from kilolock.web.ui.base import UiResource, Viewer, page_count, pager, render_page, template
from kilolock.web.ui.params import choice, number, state_url, text, with_query

SORT_LABELS = {"name": "Name", "updated": "Last change", "serial": "Serial",
               "resources": "Resources", "size": "Size", "locked": "Lock age"}
PAGE_SIZES = ("50", "25", "100", "200")
LOCK_LABELS = {"": "any", "locked": "locked", "unlocked": "not locked",
               "stale": "stale lock"}
#: The "not changed for" filter: its values (days) and labels.
UNCHANGED_LABELS = {"": "any time", "1": "a day", "7": "a week", "30": "30 days",
                    "90": "90 days", "365": "a year"}


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
    filters: dict[str, str]
    per: int
    names: dict[str, str]
    hosted: bool
    now: datetime

    def link(self, **changes: Any) -> str:
        parameters = {**self.filters, "sort": self.query.sort,
                      "dir": "desc" if self.query.descending else "asc", "per": self.per,
                      "page": self.query.offset // self.query.limit + 1}
        parameters.update(changes)
        return with_query(BASE_PATH + "/", parameters)

    @renderer
    def page(self, request: Request, tag: Tag) -> Tag:
        return tag.fillSlots(q=self.filters["q"], tag=self.filters["tag"])

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
    def lock_options(self, request: Request, tag: Tag) -> Tag:
        return tag(options(self.filters["lock"], LOCK_LABELS))

    @renderer
    def unchanged_options(self, request: Request, tag: Tag) -> Tag:
        return tag(options(self.filters["unchanged"], UNCHANGED_LABELS))

    @renderer
    def count(self, request: Request, tag: Tag) -> Tag:
        total = self.listing.total
        first = self.query.offset + 1 if self.listing.listings else 0
        last = self.query.offset + len(self.listing.listings)
        what = []
        if self.filters["q"]:
            what.append(f"named like “{self.filters['q']}”")
        if self.filters["tag"]:
            what.append(f"tagged {self.filters['tag']}")
        if self.filters["lock"]:
            what.append(LOCK_LABELS[self.filters["lock"]])
        if self.filters["unchanged"]:
            what.append(f"not changed for {UNCHANGED_LABELS[self.filters['unchanged']]}")
        matching = f" ({', '.join(what)})" if what else ""
        shown = f"; showing {first}\u2013{last}" if total > len(self.listing.listings) else ""
        return tag(f"{format.plural(total, 'state')}{matching}{shown}.")

    @renderer
    def head(self, request: Request, tag: Tag) -> Tag:
        columns = ["Workspace", "Environment"] if self.hosted else []
        columns += ["State", "Tags", "Serial", "Last write", "Lock", "Resources", "Terraform",
                    "Size"]
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
            cells += [labelled(tags.td(self.names.get(segments[0], segments[0])), "Workspace"),
                      labelled(tags.td(self.names.get(segments[1], segments[1])),
                               "Environment")]
            name = segments[2]
        elif self.hosted:
            cells += [labelled(tags.td("—"), "Workspace"), labelled(tags.td("—"), "Environment")]
            name = path
        else:
            name = path
        state: list[Any] = [tags.a(name, href=state_url(path), class_="state-name")]
        if current is not None and not current.projected:
            state += [" ", tags.span("encrypted (OpenTofu)", class_="badge encrypted")]
        if current is None:
            state += [tags.br(), tags.span("no version yet", class_="quiet")]
        cells.append(labelled(tags.th(state, scope="row"), "State"))
        cells.append(labelled(tags.td(tag_chips(listing.tags)), "Tags"))
        cells.append(labelled(tags.td("—" if current is None else str(current.serial),
                                      class_="num"), "Serial"))
        cells.append(labelled(tags.td(self.last_write(listing)), "Last write"))
        cells.append(labelled(tags.td(self.lock(listing)), "Lock"))
        cells.append(labelled(tags.td(f"{summary.resource_count:,}" if current is not None
                                      and current.projected else "—", class_="num"),
                              "Resources"))
        version = format.detail_of(listing.last_write).get("terraform_version")
        cells.append(labelled(tags.td(version if isinstance(version, str) else "—"),
                              "Terraform"))
        cells.append(labelled(tags.td(format.size(None if current is None else current.size),
                                      class_="num"), "Size"))
        return tags.tr(cells, class_="stale" if summary.lock is not None
                       and format.is_stale(summary.lock, self.now) else "")

    def last_write(self, listing: StateListing) -> Any:
        current = listing.summary.current
        if current is None:
            return "—"
        event = listing.last_write
        who = format.identity(event) if event is not None else current.principal
        return [tags.time(format.ago(current.created_at, self.now),
                          datetime=current.created_at.isoformat(),
                          title=format.when(current.created_at)),
                tags.br(), tags.span(format.when(current.created_at), class_="quiet"),
                tags.br(), "by ", tags.span(who, class_="who"),
                tags.span(f" from {format.client(event)}", class_="quiet")]

    def lock(self, listing: StateListing) -> Any:
        lock = listing.summary.lock
        if lock is None:
            return tags.span("not locked", class_="quiet")
        age = format.age(format.lock_age(lock, self.now))
        holder = lock.info.who or lock.principal
        operation = lock.info.operation or "locked"
        if format.is_stale(lock, self.now):
            return [tags.span(f"stale lock · {age}", class_="badge stale"), tags.br(),
                    tags.span(holder, class_="who"), tags.br(),
                    tags.span(operation, class_="quiet")]
        return [tags.span(f"locked · {age}", class_="badge locked"), tags.br(),
                tags.span(holder, class_="who"), tags.br(), tags.span(operation, class_="quiet")]

    @renderer
    def pager(self, request: Request, tag: Tag) -> Tag:
        return pager(tag, self.query.offset // self.query.limit + 1,
                     page_count(self.listing.total, self.query.limit),
                     "Previous page", "Next page", lambda page: self.link(page=page))


def labelled(cell: Tag, label: str) -> Tag:
    """A table cell named for the narrow layout, where each row is a card
    and each cell says what it is (the column headings are out of sight)."""
    return cell(**{"data-label": label})


def tag_chips(found: tuple[tuple[str, str], ...]) -> Any:
    """A workspace's tags as chips (C{key}, C{key=value}), each a link to the
    states with that tag; a dash without tags."""
    if not found:
        return tags.span("—", class_="quiet")
    return tags.ul([tags.li(tags.a(text, href=with_query(BASE_PATH + "/", {"tag": text})),
                            class_="chip")
                    for text in (key + (f"={value}" if value else "") for key, value in found)],
                   class_="chips")


class StatesPage(UiResource):
    """C{GET /ui/}: the states."""

    route = BASE_PATH + "/"
    section = BASE_PATH + "/"

    async def show(self, request: Request, viewer: Viewer) -> Response:
        filters = {name: text(request, name) for name in ("q", "tag")}
        filters["lock"] = choice(request, "lock", ("", *LOCK_FILTERS))
        filters["unchanged"] = choice(request, "unchanged", tuple(UNCHANGED_LABELS))
        if len(filters["tag"]) > MAX_TAG_LENGTH * 2 + 1 or filters["tag"].startswith("="):
            raise BadRequest("tag must be KEY or KEY=VALUE (a workspace tag)")
        if len(filters["q"]) > 1024:
            raise BadRequest("q is longer than 1024 characters")
        per = int(choice(request, "per", PAGE_SIZES))
        page = number(request, "page", 1, 10**6)
        now = self.dashboard.sessions.now()
        unchanged = filters["unchanged"]
        query = StateListQuery(
            name_contains=filters["q"] or None, path_prefix=scope_prefix(viewer.principal),
            sort=choice(request, "sort", STATE_SORTS),
            descending=choice(request, "dir", ("asc", "desc")) == "desc",
            offset=(page - 1) * per, limit=min(per, MAX_PAGE), tag=filters["tag"] or None,
            lock=filters["lock"] or None, stale_before=stale_before(now),
            unchanged_before=now - timedelta(days=int(unchanged)) if unchanged else None)
        listing = await self.lane.store.list_states_page(viewer.principal.tenant, query)
        names = await place_names(self, viewer.principal.tenant)
        view = StatesView(listing, query, filters, per, names,
                          self.dashboard.auth_mode == "database", now)
        return await render_page(request, self.dashboard, viewer, "States", view,
                                 section=self.section)

