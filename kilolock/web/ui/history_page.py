"""A state's history: its versions as a timeline (what each changed, who
wrote it, when), the diff of any two (L{kilolock.tfstate.diff}, redacted,
shown side by side), and the download of a version."""

from __future__ import annotations

import json
from typing import Any

from attrs import define
from twisted.web.resource import Resource
from twisted.web.server import Request
from twisted.web.template import Element, Tag, renderer, tags

from kilolock.core.errors import BadRequest, EncryptedState, VersionNotFound
from kilolock.core.events import AuditEvent
from kilolock.core.model import StateKey, StateVersion
from kilolock.store.interfaces.states import IStateStore
from kilolock.tfstate.diff import diff_states
from kilolock.web.body import in_thread_if_large
from kilolock.web.resource import Response
from kilolock.web.ui import BASE_PATH, format
from kilolock.web.ui.base import Viewer, page_count, pager, render_page, template
from kilolock.web.ui.headers import SECURITY_HEADERS
from kilolock.web.ui.params import number, state_url, with_query
from kilolock.web.ui.secrets import sensitive_values, shows_secret
from kilolock.web.ui.state_access import NotFoundPage, StatePart
from kilolock.web.ui.states_page import options

#: Versions per page of the timeline (each is compared with the one before).
HISTORY_PAGE = 20
#: Change counts kept per process (a bounded cache; see Dashboard.change_counts).
MAX_CACHED_COUNTS = 10000
#: Versions offered in the compare form (the latest ones).
MAX_CHOICES = 500
#: Changed resources a diff page shows side by side (the JSON diff of the
#: native API has them all).
MAX_CHANGED_SHOWN = 200


async def last_writer(store: IStateStore, key: StateKey) -> AuditEvent | None:
    """The event that wrote the state's current version, or None."""
    summary = await store.get_summary(key)
    if summary is None or summary.current is None:
        return None
    return writers(await store.list_events(key.tenant, state_path=key.path)).get(
        (summary.current.number, summary.current.sha256))


def writers(events: list[AuditEvent]) -> dict[tuple[int, str | None], AuditEvent]:
    """The event that wrote each version, by (number, SHA-256): the latest
    naming it (numbers start again after a delete)."""
    found: dict[tuple[int, str | None], AuditEvent] = {}
    for event in events:
        number_ = format.detail_of(event).get("version")
        if isinstance(number_, int) and event.sha256 is not None:
            found[(number_, event.sha256)] = event
    return found


def previous_stored(versions: list[StateVersion], number_: int) -> int | None:
    """The newest version before C{number_} whose bytes are stored (not a
    tombstone), or None."""
    return max((v.number for v in versions if v.number < number_ and not v.pruned),
               default=None)


def counts(diff: dict[str, Any]) -> tuple[int, int, int]:
    """(+added, ~changed, \u2212removed) resources of a diff."""
    resources = diff["resources"]
    return len(resources["added"]), len(resources["changed"]), len(resources["removed"])


def is_replacement(change: dict[str, Any]) -> bool:
    """A changed resource whose C{id} changed was replaced (destroyed and
    created again), not updated in place."""
    return any(item.get("path") == "id" for item in change["changes"])


@define(slots=False, eq=False)
class HistoryView(Element):
    loader = template("history")

    key: StateKey
    versions: list[StateVersion]
    current_page: int
    changes: dict[int, tuple[int, int, int] | None]
    by_version: dict[tuple[int, str | None], AuditEvent]

    @renderer
    def page(self, request: Request, tag: Tag) -> Tag:
        return tag.fillSlots(state_url=state_url(self.key.path),
                             diff_url=state_url(self.key.path, "diff"))

    @renderer
    def from_options(self, request: Request, tag: Tag) -> Tag:
        return self._choices(tag, max(1, self.versions[-1].number - 1) if self.versions else 1)

    @renderer
    def to_options(self, request: Request, tag: Tag) -> Tag:
        return self._choices(tag, self.versions[-1].number if self.versions else 1)

    def _choices(self, tag: Tag, selected: int) -> Tag:
        latest = [v for v in self.versions if not v.pruned][-MAX_CHOICES:][::-1]
        return tag(options(str(selected), {str(v.number): f"{v.number} (serial {v.serial},"
                                           f" {format.when(v.created_at)})" for v in latest}))

    @renderer
    def timeline(self, request: Request, tag: Tag) -> Tag:
        newest = self.versions[::-1]
        start = (self.current_page - 1) * HISTORY_PAGE
        items = []
        for version in newest[start:start + HISTORY_PAGE]:
            event = self.by_version.get((version.number, version.sha256))
            counted = self.changes.get(version.number)
            change: Any = "not readable (encrypted)" if counted is None else [
                tags.span(f"+{counted[0]} added", class_="added"), " ",
                tags.span(f"~{counted[1]} changed", class_="changed"), " ",
                tags.span(f"\u2212{counted[2]} removed", class_="removed")]
            links: list[Any] = [tags.a(f"Download version {version.number}",
                                       href=state_url(self.key.path,
                                                      f"versions/{version.number}"))]
            before = previous_stored(self.versions, version.number)
            if before is not None:
                links = [tags.a(f"Diff with version {before}", href=with_query(
                    state_url(self.key.path, "diff"),
                    {"from": before, "to": version.number})), " · ", *links]
            if version.pruned_at is not None:  # a tombstone: no bytes to show
                change = tags.span(f"Bytes pruned {format.when(version.pruned_at)}: "
                                   f"{version.prune_reason}", class_="masked tombstone")
                links = []
            items.append(tags.li(
                tags.h2(f"Version {version.number}", class_="version"),
                tags.p(f"serial {version.serial} · ", format.size(version.size), " · ",
                       tags.time(format.when(version.created_at),
                                 datetime=version.created_at.isoformat())),
                tags.p("by ", format.identity(event) if event is not None
                       else version.principal, " from ", format.client(event)),
                tags.p(change), tags.p(links), value=str(version.number)))
        return tag(items or [tags.li("No versions yet.")])

    @renderer
    def pager(self, request: Request, tag: Tag) -> Tag:
        url = state_url(self.key.path, "history")
        return pager(tag, self.current_page, page_count(len(self.versions), HISTORY_PAGE),
                     "Newer versions", "Older versions",
                     lambda page: with_query(url, {"page": page}))


class HistoryPage(StatePart):
    """C{GET /ui/states/{state}/-/history}: the timeline."""

    route = BASE_PATH + "/states/{state}/-/history"

    async def show(self, request: Request, viewer: Viewer) -> Response:
        key = self.key(request, viewer)
        await self.summary(key)
        versions = await self.lane.store.list_versions(key)
        page = number(request, "page", 1, page_count(len(versions), HISTORY_PAGE))
        newest = versions[::-1][(page - 1) * HISTORY_PAGE:page * HISTORY_PAGE]
        by_number = {version.number: version for version in versions}
        changes: dict[int, tuple[int, int, int] | None] = {}
        for version in newest:
            if version.pruned:
                continue
            number_before = previous_stored(versions, version.number)
            before = None if number_before is None else by_number[number_before]
            cache_key = (key.tenant, key.path, version.number, version.sha256,
                         "" if before is None else before.sha256)
            cache = self.dashboard.change_counts
            if cache_key not in cache:
                if len(cache) >= MAX_CACHED_COUNTS:
                    cache.clear()
                cache[cache_key] = await self.changed(key, version.number, number_before)
            changes[version.number] = cache[cache_key]
        events = await self.lane.store.list_events(key.tenant, state_path=key.path)
        view = HistoryView(key, versions, page, changes, writers(events))
        return await render_page(request, self.dashboard, viewer, f"History of {key.path}", view,
                                 section=BASE_PATH + "/")

    async def changed(self, key: StateKey, number_: int,
                      before: int | None) -> tuple[int, int, int] | None:
        """What version C{number_} changed against version C{before} (the
        stored one before it; None: the first, which added everything it
        holds).  None: unreadable."""
        new = await self.lane.store.read_version(key, number_)
        if new is None:
            return None
        old = None if before is None else await self.lane.store.read_version(key, before)
        try:
            diff = await in_thread_if_large(self.lane.reactor, len(new) + len(old or b""),
                                            diff_states, old or _EMPTY, new)
        except EncryptedState:
            return None
        return counts(diff)


_EMPTY = b'{"version": 4, "serial": 0, "lineage": "", "resources": [], "outputs": {}}'


def value_text(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


@define(slots=False, eq=False)
class DiffView(Element):
    loader = template("diff")

    key: StateKey
    diff: dict[str, Any]
    since: int
    to: int
    summary: str
    secrets: frozenset[str] = frozenset()

    @renderer
    def page(self, request: Request, tag: Tag) -> Tag:
        return tag.fillSlots(history_url=state_url(self.key.path, "history"),
                             summary=self.summary)

    @renderer
    def changes(self, request: Request, tag: Tag) -> list[Any]:
        resources = self.diff["resources"]
        parts: list[Any] = []
        if self.diff["lineageChanged"]:
            parts.append(tags.p("The lineage changed: these are different states.",
                                class_="warning"))
        for title, kind, items in (("Added", "added", resources["added"]),
                                   ("Removed", "removed", resources["removed"])):
            if items:
                sign = "+" if kind == "added" else "\u2212"
                parts += [tags.h2(f"{title} resources"),
                          tags.ul([tags.li(f"{sign} ", tags.code(item["address"]),
                                           class_=kind) for item in items])]
        changed = resources["changed"]
        if len(changed) > MAX_CHANGED_SHOWN:
            parts.append(tags.p(
                f"{len(changed)} resources changed; the first {MAX_CHANGED_SHOWN} are shown."
                " The whole diff: ", tags.code(f"GET /v1/native/states/{self.key.path}/-/diff"
                                               f"?from={self.since}&to={self.to}"),
                " or ", tags.code(f"kl state diff {self.key.path} {self.since} {self.to}"), ".",
                class_="warning"))
        for change in changed[:MAX_CHANGED_SHOWN]:
            replaced = is_replacement(change)
            label = "replaced" if replaced else "changed"
            parts.append(tags.section(
                tags.h2(tags.code(change["address"]), " ",
                        tags.span("\u2212/+ replaced" if replaced else "~ changed",
                                  class_=f"badge {label}")),
                self.table(change["changes"], f"Attributes of {change['address']}"),
                class_=f"resource-diff {label}"))
        outputs = self.diff["outputs"]
        rows = ([{"path": name, "after": "(added)"} for name in outputs["added"]]
                + [{"path": name, "before": "(removed)"} for name in outputs["removed"]]
                + [{**item, "path": item["name"]} for item in outputs["changed"]])
        if rows:
            parts += [tags.h2("Outputs"), self.table(rows, "Outputs")]
        return parts or [tags.p("No resource or output changed.")]

    def table(self, changes: list[dict[str, Any]], caption: str) -> Tag:
        rows = []
        for item in changes:
            if item.get("sensitive"):
                before: Any = tags.span("(sensitive)", class_="masked")
                after: Any = tags.span("(sensitive value changed)", class_="masked")
            else:
                before, after = self.shown(item, "before"), self.shown(item, "after")
            rows.append(tags.tr(tags.th(tags.code(item["path"]), scope="row"),
                                tags.td(before, class_="before"),
                                tags.td(after, class_="after")))
        return tags.table(tags.caption(caption),
                          tags.thead(tags.tr(tags.th("Attribute", scope="col"),
                                             tags.th(f"Version {self.since}", scope="col"),
                                             tags.th(f"Version {self.to}", scope="col"))),
                          tags.tbody(rows), class_="diff")


    def shown(self, item: dict[str, Any], side: str) -> Any:
        """One side of a change: its value, unless it holds a sensitive one."""
        if side not in item:
            return "\u2014"
        text = value_text(item[side])
        if shows_secret(text, self.secrets):
            return tags.span("(sensitive)", class_="masked")
        return tags.pre(text)


def diff_and_secrets(old: bytes, new: bytes) -> tuple[dict[str, Any], frozenset[str]]:
    """The redacted diff of two versions, and the values they mark sensitive."""
    return diff_states(old, new), sensitive_values(old) | sensitive_values(new)


class DiffPage(StatePart):
    """C{GET /ui/states/{state}/-/diff?from=&to=}: two versions side by side."""

    route = BASE_PATH + "/states/{state}/-/diff"

    async def show(self, request: Request, viewer: Viewer) -> Response:
        key = self.key(request, viewer)
        summary = await self.summary(key)
        if summary.current is None:
            raise VersionNotFound("the state has no version yet")
        latest = summary.current.number
        to = number(request, "to", latest, 2**31)
        before = previous_stored(await self.lane.store.list_versions(key), to)
        since = number(request, "from", before or max(1, to - 1), 2**31)
        old = await self.lane.store.read_version(key, since)
        new = await self.lane.store.read_version(key, to)
        if old is None or new is None:
            raise BadRequest(f"the state has versions 1 to {latest}")
        try:
            diff, secrets = await in_thread_if_large(self.lane.reactor, len(old) + len(new),
                                                     diff_and_secrets, old, new)
        except EncryptedState:
            raise BadRequest("one of these versions is an OpenTofu encrypted state: the"
                             " server cannot read it") from None
        added, changed, removed = counts(diff)
        view = DiffView(key, diff, since, to,
                        f"+{added} added, ~{changed} changed, \u2212{removed} removed", secrets)
        return await render_page(request, self.dashboard, viewer,
                                 f"{key.path}: version {since} → {to}", view,
                                 section=BASE_PATH + "/")


class VersionDownload(StatePart):
    """C{GET /ui/states/{state}/-/versions/{n}}: the version's exact bytes, as
    a file (for a principal that may read the state)."""

    route = BASE_PATH + "/states/{state}/-/versions/{n}"

    def __init__(self, dashboard: Any, segments: tuple[str, ...], number_: int) -> None:
        super().__init__(dashboard, segments)
        self.number = number_

    async def show(self, request: Request, viewer: Viewer) -> Response:
        key = self.key(request, viewer)
        await self.summary(key)
        raw = await self.lane.store.read_version(key, self.number)
        if raw is None:
            raise VersionNotFound(f"the state has no version {self.number}")
        name = key.path.rsplit("/", 1)[-1]
        filename = "".join(c if c.isalnum() or c in "-_." else "_" for c in name)
        return Response(200, raw, b"application/json", {
            **SECURITY_HEADERS, b"Cache-Control": b"no-store",
            b"Content-Disposition": f'attachment; filename="{filename}-v{self.number}'
                                    f'.tfstate"'.encode()})


class VersionsFolder(StatePart):
    """C{/ui/states/{state}/-/versions}: the versions by number."""

    def child(self, segment: str) -> Resource:
        if not segment.isdigit() or not 1 <= int(segment) < 2**31:
            return NotFoundPage(self.dashboard)
        return VersionDownload(self.dashboard, self.segments, int(segment))

    async def show(self, request: Request, viewer: Viewer) -> Response:
        raise VersionNotFound("name a version")
