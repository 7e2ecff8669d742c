"""A state's history (C{/ui/states/{state}/-/history}): its versions as a
timeline, newest first -- which is current, which was a rollback (and to
what) or a state operation, who wrote each and when (with how long ago),
what each changed (resources, or only outputs, or nothing) -- and the form
comparing any two (L{kilolock.web.ui.diff_page})."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from attrs import define, frozen
from twisted.web.server import Request
from twisted.web.template import Element, Tag, renderer, tags

from kilolock.core.events import STATE_OPERATION, STATE_ROLLBACK, STATE_WRITE, AuditEvent
from kilolock.core.model import StateKey, StateVersion
from kilolock.store.interfaces.states import IStateStore
from kilolock.web.resource import Response
from kilolock.web.ui import BASE_PATH, format
from kilolock.web.ui.base import Viewer, page_count, pager, render_page, template
from kilolock.web.ui.params import number, state_url, with_query
from kilolock.web.ui.state_access import StatePart
from kilolock.web.ui.states_page import options
from kilolock.web.ui.version_reads import FingerprintKey, fingerprints

#: Versions per page of the timeline (each is compared with the one before).
HISTORY_PAGE = 20
#: Change counts kept per process (a bounded cache; see Dashboard.change_counts).
MAX_CACHED_COUNTS = 10000
#: Versions offered in the compare form (the latest ones).
MAX_CHOICES = 500
#: The kinds of event that write a version.
WRITING_KINDS = [STATE_WRITE, STATE_ROLLBACK, STATE_OPERATION]


async def last_writer(store: IStateStore, key: StateKey) -> AuditEvent | None:
    """The event that wrote the state's current version, or None."""
    summary = await store.get_summary(key)
    if summary is None or summary.current is None:
        return None
    return writers(await store.list_events(key.tenant, state_path=key.path,
                                           kinds=WRITING_KINDS)).get(
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


@frozen
class Changes:
    """What a version changed against the stored one before it: resource
    instances and outputs added, changed, removed."""

    added: int = 0
    changed: int = 0
    removed: int = 0
    outputs_added: int = 0
    outputs_changed: int = 0
    outputs_removed: int = 0

    @classmethod
    def of(cls, diff: dict[str, Any]) -> Changes:
        resources, outputs = diff["resources"], diff["outputs"]
        return cls(len(resources["added"]), len(resources["changed"]),
                   len(resources["removed"]), len(outputs["added"]), len(outputs["changed"]),
                   len(outputs["removed"]))

    @classmethod
    def between(cls, old: dict[FingerprintKey, int], new: dict[FingerprintKey, int]) -> Changes:
        """The changes from one version's fingerprints to another's."""
        counts = {"resource": [0, 0, 0], "output": [0, 0, 0]}
        for key, digest in new.items():
            before = old.get(key)
            if before is None:
                counts[key[0]][0] += 1
            elif before != digest:
                counts[key[0]][1] += 1
        for key in old.keys() - new.keys():
            counts[key[0]][2] += 1
        return cls(*counts["resource"], *counts["output"])

    @property
    def resources(self) -> int:
        return self.added + self.changed + self.removed

    @property
    def outputs(self) -> int:
        return self.outputs_added + self.outputs_changed + self.outputs_removed

    def describe(self) -> list[Any]:
        """The counts that are not zero, of resource instances then of
        outputs (C{+300 added resource instances; ~1 changed output}); a
        version that changed outputs only says so; one that changed neither
        (a refresh, a serial bump) says that."""
        if not self.resources and not self.outputs:
            return [tags.span("No resource or output changed", class_="quiet")]
        parts: list[Any] = []
        if not self.resources:
            parts += [tags.span("Outputs only", class_="badge outputs"), " "]
        for group, (total, noun, counts) in enumerate((
                (self.resources, "resource instance", (self.added, self.changed, self.removed)),
                (self.outputs, "output", (self.outputs_added, self.outputs_changed,
                                          self.outputs_removed)))):
            if not total:
                continue
            if group and self.resources:
                parts.append("; ")
            for count, sign, word, kind in zip(counts, ("+", "~", "\u2212"),
                                               ("added", "changed", "removed"),
                                               ("added", "changed", "removed"), strict=True):
                if count:
                    parts += [tags.span(f"{sign}{count:,} {word}", class_=kind), " "]
            parts.append(format.noun(total, noun))
        return parts


def made_by(event: AuditEvent | None) -> Tag | str:
    """What kind of write made a version: a rollback (to which version), a
    state operation (which), or nothing said for an ordinary write."""
    if event is None:
        return ""
    detail = format.detail_of(event)
    if event.kind == STATE_ROLLBACK:
        restored = detail.get("restored_version")
        return tags.span(f"rollback to version {restored}" if isinstance(restored, int)
                         else "rollback", class_="badge rollback")
    if event.kind == STATE_OPERATION:
        kind = detail.get("operation_kind")
        return tags.span(f"kl state {kind}" if isinstance(kind, str) else "state operation",
                         class_="badge operation")
    return ""


@define(slots=False, eq=False)
class HistoryView(Element):
    loader = template("history")

    key: StateKey
    versions: list[StateVersion]
    current_page: int
    changes: dict[int, Changes | None]
    by_version: dict[tuple[int, str | None], AuditEvent]
    now: datetime

    @renderer
    def page(self, request: Request, tag: Tag) -> Tag:
        count = format.plural(len(self.versions), "version")
        return tag.fillSlots(state_url=state_url(self.key.path),
                             diff_url=state_url(self.key.path, "diff"), count=count)

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
        current = self.versions[-1].number if self.versions else None
        return tag([self.item(version, version.number == current)
                    for version in newest[start:start + HISTORY_PAGE]]
                   or [tags.li("No versions yet.")])

    def item(self, version: StateVersion, current: bool) -> Tag:
        path = self.key.path
        event = self.by_version.get((version.number, version.sha256))
        heading: list[Any] = [f"Version {version.number}"]
        if current:
            heading += [" ", tags.span("current", class_="badge current")]
        kind = made_by(event)
        if kind:
            heading += [" ", kind]
        counted = self.changes.get(version.number)
        change: Any = ("Not readable by the server (an OpenTofu encrypted state)."
                       if counted is None else counted.describe())
        links: list[Any] = []
        before = previous_stored(self.versions, version.number)
        if version.pruned_at is not None:  # a tombstone: no bytes to show
            change = tags.span(f"Bytes pruned {format.when(version.pruned_at)}: "
                               f"{version.prune_reason}", class_="masked tombstone")
        else:
            links.append(tags.a(f"Resources of version {version.number}",
                                href=state_url(path, f"versions/{version.number}")))
            if before is not None:
                links.append(tags.a(f"Diff with version {before}", href=with_query(
                    state_url(path, "diff"), {"from": before, "to": version.number})))
            links += [tags.a("JSON", href=state_url(path, f"versions/{version.number}/json"),
                             **{"aria-label": f"JSON of version {version.number}"}),
                      tags.a("Download", href=state_url(
                          path, f"versions/{version.number}/download"),
                          **{"aria-label": f"Download version {version.number}"})]
        who = format.identity(event) if event is not None else version.principal
        return tags.li(
            tags.h2(heading, class_="version"),
            tags.p(tags.time(format.when(version.created_at),
                             datetime=version.created_at.isoformat()),
                   " ", tags.span(f"({format.ago(version.created_at, self.now)})",
                                  class_="ago"),
                   f" · serial {version.serial} · ", format.size(version.size)),
            tags.p("by ", tags.strong(who), " from ", format.client(event)),
            tags.p(change, class_="changes"),
            tags.p([[" · " if index else "", link] for index, link in enumerate(links)],
                   class_="links") if links else "",
            value=str(version.number), class_="current" if current else "")

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
        changes: dict[int, Changes | None] = {}
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
                cache[cache_key] = await self.changed(key, version, before)
            changes[version.number] = cache[cache_key]
        events = await self.lane.store.list_events(key.tenant, state_path=key.path,
                                                   kinds=WRITING_KINDS)
        view = HistoryView(key, versions, page, changes, writers(events),
                           self.dashboard.sessions.now())
        return await render_page(request, self.dashboard, viewer, f"History of {key.path}", view,
                                 section=BASE_PATH + "/")

    async def changed(self, key: StateKey, version: StateVersion,
                      before: StateVersion | None) -> Changes | None:
        """What C{version} changed against C{before} (the stored one before
        it; None: the first, which added everything it holds), from their
        fingerprints (L{kilolock.web.ui.version_reads}).  None: unreadable."""
        new = await fingerprints(self.lane, self.dashboard.fingerprints, key, version)
        if new is None:
            return None
        old = {} if before is None else await fingerprints(
            self.lane, self.dashboard.fingerprints, key, before)
        return Changes.between(old or {}, new)
