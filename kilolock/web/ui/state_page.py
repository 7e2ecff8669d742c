"""One state's page (C{/ui/states/{state}}): its summary and lock, its
resources (filtered, paged), outputs (sensitive values never sent), the
dependency graph, and the blocks to use it from Terraform."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from attrs import define, field
from twisted.web.resource import Resource
from twisted.web.server import Request
from twisted.web.template import Element, Tag, renderer, tags

from kilolock.core.events import AuditEvent
from kilolock.core.model import Projection, ResourceRow, StateKey, StateSummary
from kilolock.store.interfaces.tfe import ITFEStore
from kilolock.tfe.model import Tag as WorkspaceTag
from kilolock.web.resource import Response
from kilolock.web.ui import BASE_PATH, format
from kilolock.web.ui.backend_blocks import (
    base_url,
    cli_config_block,
    cloud_block,
    http_backend_block,
)
from kilolock.web.ui.base import Viewer, page_count, pager, render_page, template
from kilolock.web.ui.diff_page import DiffPage
from kilolock.web.ui.graph import build_graph
from kilolock.web.ui.graph_view import graph_section
from kilolock.web.ui.history_page import HistoryPage, last_writer
from kilolock.web.ui.params import number, state_url, text, with_query
from kilolock.web.ui.resource_page import ResourcePage
from kilolock.web.ui.resource_table import output_rows, resource_rows
from kilolock.web.ui.state_access import NotFoundPage, PagesBelow, StatePart
from kilolock.web.ui.states_page import options
from kilolock.web.ui.unlock import UnlockPage
from kilolock.web.ui.version_page import VersionsFolder
from kilolock.web.ui.version_reads import read_version

#: Resources shown per page.
RESOURCE_PAGE = 100
#: Dependency rows listed at most.
MAX_DEPENDENCY_ROWS = 500
#: The marker segment below a state: C{/ui/states/app/-/history}.
MARKER = "-"


def resource_filter(request: Request) -> dict[str, str]:
    return {name: text(request, name) for name in ("address", "type", "module", "provider")}


def matching(rows: tuple[ResourceRow, ...], wanted: dict[str, str]) -> list[ResourceRow]:
    """The rows whose address contains C{address} and whose type, module and
    provider are the ones chosen (each criterion only when set)."""
    return [row for row in rows
            if wanted["address"] in row.address
            and (not wanted["type"] or row.type == wanted["type"])
            and (not wanted["module"] or row.module == wanted["module"]
                 or (wanted["module"] == "(root)" and row.module == ""))
            and (not wanted["provider"] or row.provider == wanted["provider"])]


@define(slots=False, eq=False)
class StateView(Element):
    """The sections of a state's page."""

    loader = template("state")

    state: StateSummary
    projection: Projection | None
    wanted: dict[str, str]
    current_page: int
    blocks_: list[tuple[str, str]]
    can_unlock: bool
    now: datetime
    writer: AuditEvent | None
    secrets: frozenset[str] = frozenset()
    tags_: tuple[WorkspaceTag, ...] = ()
    #: The Terraform version that wrote the state, when its event says.
    terraform_version: str | None = field(init=False)
    #: The resources the filter in C{wanted} lets through.
    found: list[ResourceRow] = field(init=False)

    def __attrs_post_init__(self) -> None:
        version = format.detail_of(self.writer).get("terraform_version")
        self.terraform_version = version if isinstance(version, str) else None
        rows = self.projection.resources if self.projection is not None else ()
        self.found = matching(rows, self.wanted)

    @property
    def path(self) -> str:
        return self.state.key.path

    @renderer
    def links(self, request: Request, tag: Tag) -> Tag:
        return tag(tags.a("History and diffs", href=state_url(self.path, "history")), " · ",
                   tags.a("Audit events", href=with_query(BASE_PATH + "/audit",
                                                          {"state": self.path})))

    @renderer
    def summary(self, request: Request, tag: Tag) -> Tag:
        summary = self.state
        current = summary.current
        written: Any = "no version yet"
        if current is not None:
            written = [tags.time(format.when(current.created_at),
                                 datetime=current.created_at.isoformat()),
                       f" ({format.ago(current.created_at, self.now)}) by ",
                       format.identity(self.writer) if self.writer else current.principal,
                       " from ", format.client(self.writer)]
        items: list[tuple[str, Any]] = [
            ("Serial", "—" if current is None else str(current.serial)),
            ("Versions", str(summary.version_count)),
            ("Last write", written),
            ("Lineage", "—" if current is None else current.lineage),
            ("Size", format.size(None if current is None else current.size)),
            ("Terraform", self.terraform_version or "—"),
            ("Resources", f"{summary.resource_count:,}" if self.projection is not None
             else "—"),
        ]
        if self.tags_:
            items.append(("Tags", tag_list(self.tags_)))
        if current is not None and not current.projected:
            items.append(("Encryption", tags.span("encrypted (OpenTofu)",
                                                  class_="badge encrypted")))
        return tag([[tags.dt(name), tags.dd(value)] for name, value in items])

    @renderer
    def lock(self, request: Request, tag: Tag) -> Tag:
        lock = self.state.lock
        if lock is None:
            return tag(tags.p("Not locked."), class_="lock free")
        seconds = format.lock_age(lock, self.now)
        stale = format.is_stale(lock, self.now)
        who = tags.strong(lock.info.who or lock.principal)
        operation = lock.info.operation or "an operation"
        if stale:
            held = tags.p(tags.strong("Stale lock: "), "held for ", format.age(seconds),
                          " by ", who, f" for {operation} (since {format.when(lock.acquired_at)}),"
                          " lock ID ", tags.code(lock.info.id),
                          ". A run that left it behind (a crashed CI job) keeps every"
                          " other run out.")
        else:
            held = tags.p("Locked by ", who, f" for {operation} since"
                          f" {format.when(lock.acquired_at)} ({format.age(seconds)}), lock ID ",
                          tags.code(lock.info.id), ": a run is working on it.")
        parts: list[Any] = [held]
        if self.can_unlock:
            parts.append(tags.p(tags.a("Force-unlock…", href=state_url(self.path, "unlock"),
                                       class_="button danger" if stale else "button")))
        return tag(parts, class_="lock held stale" if stale else "lock held",
                   role="alert" if stale else "status")

    @renderer
    def resource_filters(self, request: Request, tag: Tag) -> Tag:
        return tag.fillSlots(address=self.wanted["address"])(action=state_url(self.path))

    def _choices(self, name: str, values: set[str]) -> dict[str, str]:
        found = {"": "any"}
        found.update((value, value) for value in sorted(values))
        return found

    @renderer
    def type_options(self, request: Request, tag: Tag) -> Tag:
        rows = self.projection.resources if self.projection is not None else ()
        return tag(options(self.wanted["type"], self._choices("type", {r.type for r in rows})))

    @renderer
    def module_options(self, request: Request, tag: Tag) -> Tag:
        rows = self.projection.resources if self.projection is not None else ()
        modules = {row.module or "(root)" for row in rows}
        return tag(options(self.wanted["module"], self._choices("module", modules)))

    @renderer
    def provider_options(self, request: Request, tag: Tag) -> Tag:
        rows = self.projection.resources if self.projection is not None else ()
        choices = self._choices("provider", {row.provider for row in rows})
        return tag(options(self.wanted["provider"],
                           {value: format.provider(label) if value else label
                            for value, label in choices.items()}))

    @renderer
    def resource_count(self, request: Request, tag: Tag) -> Tag:
        if self.projection is None:
            return tag("The current version is not readable by the server"
                       " (an OpenTofu encrypted state, or no version yet).")
        total = len(self.projection.resources)
        return tag(f"{len(self.found):,} of {format.plural(total, 'resource instance')}.")

    @renderer
    def resources(self, request: Request, tag: Tag) -> Tag:
        start = (self.current_page - 1) * RESOURCE_PAGE
        return tag(resource_rows(self.path, self.found[start:start + RESOURCE_PAGE], None))

    @renderer
    def resource_pager(self, request: Request, tag: Tag) -> Tag:
        return pager(tag, self.current_page, page_count(len(self.found), RESOURCE_PAGE),
                     "Previous resources", "Next resources",
                     lambda page: with_query(state_url(self.path), {**self.wanted, "page": page}))

    @renderer
    def outputs(self, request: Request, tag: Tag) -> Tag:
        outputs = self.projection.outputs if self.projection is not None else ()
        return tag(output_rows(outputs, self.secrets))

    @renderer
    def graph(self, request: Request, tag: Tag) -> Tag:
        if self.projection is None or not self.projection.resources:
            return tag(tags.p("Nothing to draw."))
        graph = build_graph(self.projection.resources, self.projection.dependencies)
        if graph is None:
            return tag(tags.p("Too many modules to draw; see the list of dependencies."))
        return tag(graph_section(graph, self.path))

    @renderer
    def dependencies(self, request: Request, tag: Tag) -> Tag:
        rows = self.projection.dependencies if self.projection is not None else ()
        if not rows:
            return tag(tags.li("No dependencies."))
        # One element a row: up to 500 of them, on every state page.
        shown = [tags.li(f"{row.address} depends on {row.depends_on}")
                 for row in rows[:MAX_DEPENDENCY_ROWS]]
        if len(rows) > MAX_DEPENDENCY_ROWS:
            shown.append(tags.li(f"… and {len(rows) - MAX_DEPENDENCY_ROWS:,} more"))
        return tag(shown)

    @renderer
    def blocks(self, request: Request, tag: Tag) -> Tag:
        parts = []
        for index, (label, block) in enumerate(self.blocks_):
            block_id = f"block-{index}"
            parts += [tags.h3(label),
                      tags.pre(tags.code(block), id=block_id, class_="block"),
                      tags.p(tags.button("Copy", type="button", class_="copy hidden",
                                         **{"data-copy": block_id}))]
        return tag(parts)


class StatePage(StatePart):
    """C{GET /ui/states/{state}}: one state."""

    route = BASE_PATH + "/states/{state}"

    def child(self, segment: str) -> Resource:
        if segment == MARKER:
            return PagesBelow(self.dashboard, self.part)
        if len(self.segments) != 1:
            return NotFoundPage(self.dashboard)
        first = self.segments[0]
        return PagesBelow(self.dashboard, lambda name: StatePage(
            self.dashboard, (first, segment, name)))

    def part(self, name: str) -> Resource:
        kind = PARTS.get(name)
        if kind is None:
            return NotFoundPage(self.dashboard)
        return kind(self.dashboard, self.segments)

    async def show(self, request: Request, viewer: Viewer) -> Response:
        key = self.key(request, viewer)
        summary = await self.summary(key)
        # The current version as parsed once per process (versions never
        # change): its projection without reading every row again, and
        # the values it marks sensitive.
        projection: Projection | None = None
        secrets = frozenset[str]()
        if summary.current is not None:
            read = await read_version(self.lane, self.dashboard.parsed_versions, key,
                                      summary.current)
            projection, secrets = read.projection, read.secrets
        can_unlock = viewer.principal.can_write
        blocks = self.blocks(request, key, viewer)
        tfe = ITFEStore(self.lane.store, None)
        workspace = None if tfe is None else await tfe.tfe_find_workspace(key, adopt=False)
        view = StateView(summary, projection, resource_filter(request),
                         number(request, "page", 1, 10**6), blocks, can_unlock,
                         self.dashboard.sessions.now(), await last_writer(self.lane.store, key),
                         secrets, () if workspace is None else workspace.tags)
        return await render_page(request, self.dashboard, viewer, f"State {key.path}", view,
                                 section=BASE_PATH + "/", heading=key.path)

    def blocks(self, request: Request, key: StateKey, viewer: Viewer) -> list[tuple[str, str]]:
        base = base_url(request)
        found = [("Terraform http backend", http_backend_block(
            base, key, viewer.principal, self.dashboard.auth_mode))]
        cloud = cloud_block(base, key, viewer.principal, self.dashboard.auth_mode)
        if cloud is not None:
            found.append(("Terraform cloud block", cloud))
            found.append(("Terraform CLI configuration for the cloud block",
                          cli_config_block(base, self.dashboard.auth_mode)))
        return found


#: What follows C{{state}/-/}.
PARTS: dict[str, type[StatePart]] = {
    "history": HistoryPage,
    "resource": ResourcePage,
    "diff": DiffPage,
    "versions": VersionsFolder,
    "unlock": UnlockPage,
}


def tag_list(found: tuple[WorkspaceTag, ...]) -> Tag:
    """Workspace tags as chips: C{key}, or C{key=value}."""
    return tags.ul([tags.li(tag.key + (f"={tag.value}" if tag.value else ""), class_="chip")
                    for tag in found], class_="chips", **{"aria-label": "Tags"})
