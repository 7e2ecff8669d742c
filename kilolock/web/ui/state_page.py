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

from kilolock.core.conditions import state_conditions, state_ready
from kilolock.core.events import AuditEvent
from kilolock.core.model import Projection, ResourceRow, StateKey, StateSummary
from kilolock.web.resource import Response
from kilolock.web.ui import BASE_PATH, format
from kilolock.web.ui.backend_blocks import (
    base_url,
    cli_config_block,
    cloud_block,
    http_backend_block,
)
from kilolock.web.ui.base import Viewer, page_count, pager, render_page, template
from kilolock.web.ui.graph import build_graph, draw
from kilolock.web.ui.history_page import DiffPage, HistoryPage, VersionsFolder, last_writer
from kilolock.web.ui.params import number, state_url, text, with_query
from kilolock.web.ui.state_access import NotFoundPage, PagesBelow, StatePart
from kilolock.web.ui.states_page import options
from kilolock.web.ui.unlock import UnlockPage

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
        conditions = state_conditions(summary, self.now)
        items: list[tuple[str, Any]] = [
            ("Serial", "—" if current is None else str(current.serial)),
            ("Versions", str(summary.version_count)),
            ("Last write", "no version yet" if current is None else
             f"{format.when(current.created_at)} by "
             f"{format.identity(self.writer) if self.writer else current.principal}"
             f" from {format.client(self.writer)}"),
            ("Lineage", "—" if current is None else current.lineage),
            ("Size", format.size(None if current is None else current.size)),
            ("Terraform", self.terraform_version or "—"),
            ("Resources", str(summary.resource_count) if self.projection is not None else "—"),
            ("Ready", "yes" if state_ready(conditions) else "no"),
        ]
        items += [(f"Condition {condition.type}",
                   f"{condition.status} ({condition.reason}): {condition.message}")
                  for condition in conditions]
        if current is not None and not current.projected:
            items.append(("Encryption", tags.span("encrypted (OpenTofu)",
                                                  class_="badge encrypted")))
        return tag([[tags.dt(name), tags.dd(value)] for name, value in items])

    @renderer
    def lock(self, request: Request, tag: Tag) -> Tag:
        lock = self.state.lock
        if lock is None:
            return tag(tags.p("Not locked."), class_="lock")
        seconds = format.lock_age(lock, self.now)
        stale = format.is_stale(lock, self.now)
        held = tags.p("Locked by ", tags.strong(lock.info.who or lock.principal),
                      f" for {lock.info.operation or 'an operation'} since"
                      f" {format.when(lock.acquired_at)} ({format.age(seconds)}), lock ID ",
                      tags.code(lock.info.id), ".")
        if stale:
            held(" ", tags.strong("This lock looks stale.", class_="stale"))
        parts: list[Any] = [held]
        if self.can_unlock:
            parts.append(tags.p(tags.a("Force-unlock…", href=state_url(self.path, "unlock"),
                                       class_="button danger")))
        return tag(parts, class_="lock held stale" if stale else "lock held")

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
        return tag(options(self.wanted["provider"],
                           self._choices("provider", {row.provider for row in rows})))

    @renderer
    def resource_count(self, request: Request, tag: Tag) -> Tag:
        if self.projection is None:
            return tag("The current version is not readable by the server"
                       " (an OpenTofu encrypted state, or no version yet).")
        total = len(self.projection.resources)
        return tag(f"{len(self.found)} of {total} resource instances.")

    @renderer
    def resources(self, request: Request, tag: Tag) -> Tag:
        start = (self.current_page - 1) * RESOURCE_PAGE
        shown = self.found[start:start + RESOURCE_PAGE]
        if not shown:
            return tag(tags.tr(tags.td("No resources.", colspan="5")))
        # Attribute values are not shown: Terraform does not mark every path
        # that holds a sensitive value (terraform_data's output copies a
        # sensitive input unmarked); the search finds resources by them.
        return tag([tags.tr(tags.th(tags.code(row.address), scope="row"), tags.td(row.type),
                            tags.td(row.module or "(root)"), tags.td(row.provider),
                            tags.td("deposed " + row.deposed if row.deposed else "current"))
                    for row in shown])

    @renderer
    def resource_pager(self, request: Request, tag: Tag) -> Tag:
        return pager(tag, self.current_page, page_count(len(self.found), RESOURCE_PAGE),
                     "Previous resources", "Next resources",
                     lambda page: with_query(state_url(self.path), {**self.wanted, "page": page}))

    @renderer
    def outputs(self, request: Request, tag: Tag) -> Tag:
        outputs = self.projection.outputs if self.projection is not None else ()
        if not outputs:
            return tag(tags.tr(tags.td("No outputs.", colspan="3")))
        rows = []
        for output in outputs:
            # A sensitive output's value is never read here: the projection
            # holds none, and nothing else is sent.
            value: Any = (tags.span("(sensitive)", class_="masked") if output.sensitive
                          else tags.pre(format.json_text(output.value)))
            rows.append(tags.tr(tags.th(output.name, scope="row"),
                                tags.td(tags.code(format.json_text(output.type))),
                                tags.td(value)))
        return tag(rows)

    @renderer
    def graph(self, request: Request, tag: Tag) -> Tag:
        if self.projection is None or not self.projection.resources:
            return tag(tags.p("Nothing to draw."))
        graph = build_graph(self.projection.resources, self.projection.dependencies)
        if graph is None:
            return tag(tags.p("Too many modules to draw; see the list of dependencies."))
        note = ("" if graph.level == "resource" else
                "Drawn by module (too many resources to draw one by one). ")
        return tag(tags.p(note + "An arrow points from what is depended on to what"
                                 " depends on it."),
                   tags.div(draw(graph, f"Dependencies of {self.path}"), class_="scroll"))

    @renderer
    def dependencies(self, request: Request, tag: Tag) -> Tag:
        rows = self.projection.dependencies if self.projection is not None else ()
        if not rows:
            return tag(tags.tr(tags.td("No dependencies.", colspan="2")))
        shown = [tags.tr(tags.td(tags.code(row.address)), tags.td(tags.code(row.depends_on)))
                 for row in rows[:MAX_DEPENDENCY_ROWS]]
        if len(rows) > MAX_DEPENDENCY_ROWS:
            shown.append(tags.tr(tags.td(f"… and {len(rows) - MAX_DEPENDENCY_ROWS} more",
                                         colspan="2")))
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
        projection = await self.lane.store.get_projection(key)
        can_unlock = viewer.principal.can_write
        blocks = self.blocks(request, key, viewer)
        view = StateView(summary, projection, resource_filter(request),
                         number(request, "page", 1, 10**6), blocks, can_unlock,
                         self.dashboard.sessions.now(), await last_writer(self.lane.store, key))
        return await render_page(request, self.dashboard, viewer, f"State {key.path}", view,
                                 section=BASE_PATH + "/")

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
    "diff": DiffPage,
    "versions": VersionsFolder,
    "unlock": UnlockPage,
}
