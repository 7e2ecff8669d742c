"""The diff of two versions (C{/ui/states/{state}/-/diff?from=A&to=B}): the
redacted diff of L{kilolock.tfstate.diff}, side by side -- what was added
(with its values), removed, changed or replaced, and the outputs; every
value masked where it is sensitive."""

from __future__ import annotations

from typing import Any

from attrs import define, frozen
from twisted.web.server import Request
from twisted.web.template import Element, Tag, renderer, tags

from kilolock.core.errors import BadRequest, EncryptedState, InvalidText, VersionNotFound
from kilolock.core.errors import VersionTooDeep as TooDeep
from kilolock.core.model import StateKey
from kilolock.tfstate.diff import diff_documents, load_document
from kilolock.tfstate.projection import instance_address
from kilolock.tfstate.redaction import REDACTED, redact, sensitive_paths
from kilolock.web.body import in_thread_if_large
from kilolock.web.resource import Response
from kilolock.web.ui import BASE_PATH, format
from kilolock.web.ui.base import Viewer, page_count, pager, render_page, template
from kilolock.web.ui.history_page import Changes, previous_stored
from kilolock.web.ui.params import number, resource_url, state_url, with_query
from kilolock.web.ui.secrets import sensitive_values_of
from kilolock.web.ui.state_access import StatePart
from kilolock.web.ui.values import attribute_rows, masked, value_tag

#: Changed resources a page of the diff shows side by side (the pager
#: leads to the others; the JSON diff of the native API has them all).
CHANGED_PER_PAGE = 50
#: Added resources shown with their values.
ADDED_WITH_VALUES = 50
#: Added or removed resources listed at most.
MAX_LISTED = 1000


def is_replacement(change: dict[str, Any]) -> bool:
    """A changed resource whose C{id} changed was replaced (destroyed and
    created again), not updated in place."""
    return change.get("action") == "replace" or any(
        item.get("path") == "id" for item in change["changes"])


@frozen
class PageDiff:
    """A diff as its page shows it: the diff, the values the versions mark
    sensitive, the (redacted) attributes of the added resources shown, and
    the outputs' values on either side (None: sensitive)."""

    diff: dict[str, Any]
    secrets: frozenset[str]
    added: dict[str, Any]
    outputs_before: dict[str, Any]
    outputs_after: dict[str, Any]


def _outputs(doc: dict[str, Any]) -> dict[str, Any]:
    found = {}
    for name, output in (doc.get("outputs") or {}).items():
        if isinstance(output, dict):
            found[name] = REDACTED if output.get("sensitive") else output.get("value")
    return found


def page_diff(old: bytes, new: bytes) -> PageDiff:
    """What the diff page shows of versions C{old} and C{new} (pure: run in
    a thread for large versions).

    @raise EncryptedState: either is an encrypted envelope."""
    try:
        old_doc, new_doc = load_document(old), load_document(new)
        diff = diff_documents(old_doc, new_doc)
    except (RecursionError, InvalidText):
        raise TooDeep("a version nests too deeply for the server to read") from None
    wanted = {item["address"] for item in diff["resources"]["added"][:ADDED_WITH_VALUES]
              if not item.get("deposed")}
    added: dict[str, Any] = {}
    for resource in new_doc.get("resources") or []:
        for instance in (resource.get("instances") or []) if isinstance(resource, dict) else []:
            if not wanted or not isinstance(instance, dict) or instance.get("deposed"):
                continue
            try:
                address = instance_address(resource, instance)
            except ValueError:
                continue
            if address in wanted:
                wanted.discard(address)
                attributes = instance.get("attributes") or instance.get("attributes_flat") or {}
                paths = sensitive_paths(instance.get("sensitive_attributes"))
                added[address] = redact(attributes, paths) if paths and isinstance(
                    attributes, dict) else attributes
    return PageDiff(diff, sensitive_values_of(old_doc) | sensitive_values_of(new_doc), added,
                    _outputs(old_doc), _outputs(new_doc))


@define(slots=False, eq=False)
class DiffView(Element):
    loader = template("diff")

    key: StateKey
    shown: PageDiff
    since: int
    to: int
    current_page: int = 1

    @property
    def diff(self) -> dict[str, Any]:
        return self.shown.diff

    @renderer
    def page(self, request: Request, tag: Tag) -> Tag:
        changes = Changes.of(self.diff)
        return tag.fillSlots(history_url=state_url(self.key.path, "history"),
                             summary=changes.describe())

    def _value(self, value: Any) -> Any:
        return value_tag(value, self.shown.secrets)

    @renderer
    def changes(self, request: Request, tag: Tag) -> list[Any]:
        resources = self.diff["resources"]
        parts: list[Any] = []
        if self.diff["lineageChanged"]:
            parts.append(tags.p("The lineage changed: these are different states.",
                                class_="warning"))
        added, removed, changed = (resources["added"], resources["removed"],
                                   resources["changed"])
        first = self.current_page == 1
        if added and first:
            parts += [tags.h2(f"Added: {format.plural(len(added), 'resource instance')}",
                              class_="added-heading"), self._added(added)]
        if removed and first:
            listed = [tags.li("\u2212 ", tags.a(
                tags.code(item["address"]),
                href=resource_url(self.key.path, item["address"], self.since)),
                class_="removed") for item in removed[:MAX_LISTED]]
            if len(removed) > MAX_LISTED:
                listed.append(tags.li(f"… and {len(removed) - MAX_LISTED:,} more"))
            parts += [tags.h2(f"Removed: {format.plural(len(removed), 'resource instance')}"),
                      tags.ul(listed, class_="addresses")]
        start = (self.current_page - 1) * CHANGED_PER_PAGE
        shown = changed[start:start + CHANGED_PER_PAGE]
        if changed:
            where = (f" ({start + 1}\u2013{start + len(shown)} on this page)"
                     if len(changed) > CHANGED_PER_PAGE else "")
            parts.append(tags.h2(f"Changed: {format.plural(len(changed), 'resource instance')}"
                                 f"{where}"))
        for index, change in enumerate(shown):
            replaced = is_replacement(change)
            label = "replaced" if replaced else "changed"
            heading = f"change-{index}"
            parts.append(tags.section(
                tags.h3(tags.a(tags.code(change["address"]),
                               href=resource_url(self.key.path, change["address"], self.to)),
                        " ", tags.span("\u2212/+ replaced" if replaced else "~ changed",
                                       class_=f"badge {label}"), id=heading),
                self.table(change["changes"], heading),
                class_=f"resource-diff {label}"))
        if len(changed) > CHANGED_PER_PAGE:
            parts.append(tags.p(
                "The whole diff as JSON: ",
                tags.code(f"GET /v1/native/states/{self.key.path}/-/diff"
                          f"?from={self.since}&to={self.to}"),
                ", or ", tags.code(f"kl state diff {self.key.path} {self.since} {self.to}"),
                ".", class_="note"))
            url = state_url(self.key.path, "diff")
            parts.append(pager(tags.nav(class_="pager", **{"aria-label": "Pages of changes"}),
                               self.current_page, page_count(len(changed), CHANGED_PER_PAGE),
                               "Previous changes", "Next changes",
                               lambda page: with_query(url, {"from": self.since, "to": self.to,
                                                             "page": page})))
        if not first:
            return parts
        outputs = self.diff["outputs"]
        rows = ([{"path": name, "after": self.shown.outputs_after.get(name), "added": True}
                 for name in outputs["added"]]
                + [{"path": name, "before": self.shown.outputs_before.get(name),
                    "removed": True} for name in outputs["removed"]]
                + [{**item, "path": item["name"]} for item in outputs["changed"]])
        if rows:
            parts += [tags.h2("Outputs", id="outputs-heading"),
                      self.table(rows, "outputs-heading", "Output")]
        return parts or [tags.p("No resource or output changed.")]

    def _added(self, added: list[dict[str, Any]]) -> Tag:
        items = []
        for index, item in enumerate(added[:MAX_LISTED]):
            address = item["address"]
            link = tags.a(tags.code(address), href=resource_url(self.key.path, address, self.to))
            if index >= ADDED_WITH_VALUES or item.get("deposed") or address not in self.shown.added:
                items.append(tags.li("+ ", link, class_="added"))
                continue
            items.append(tags.li(tags.details(
                tags.summary("+ ", tags.code(address), " ",
                             tags.span("values", class_="quiet")),
                tags.p(tags.a("Its page", href=resource_url(self.key.path, address, self.to))),
                tags.table(tags.thead(tags.tr(tags.th("Attribute", scope="col"),
                                              tags.th(f"Version {self.to}", scope="col"))),
                           tags.tbody(attribute_rows(self.shown.added[address],
                                                     self.shown.secrets)),
                           class_="attributes", **{"aria-label": f"Attributes of {address}"})),
                class_="added"))
        if len(added) > MAX_LISTED:
            items.append(tags.li(f"… and {len(added) - MAX_LISTED:,} more"))
        return tags.ul(items, class_="added-list")

    def table(self, changes: list[dict[str, Any]], labelled_by: str,
              first: str = "Attribute") -> Tag:
        rows = []
        for item in changes:
            if item.get("sensitive"):
                before: Any = masked()
                after: Any = masked("(sensitive value changed)")
            else:
                before = (masked("(absent: added)") if item.get("added")
                          else self._value(item["before"]) if "before" in item
                          else masked("(absent)"))
                after = (masked("(absent: removed)") if item.get("removed")
                         else self._value(item["after"]) if "after" in item
                         else masked("(absent)"))
            rows.append(tags.tr(tags.th(tags.code(item["path"]), scope="row"),
                                tags.td(before, class_="before"),
                                tags.td(after, class_="after")))
        return tags.div(tags.table(
            tags.thead(tags.tr(tags.th(first, scope="col"),
                               tags.th(f"Version {self.since}", scope="col"),
                               tags.th(f"Version {self.to}", scope="col"))),
            tags.tbody(rows), class_="diff", **{"aria-labelledby": labelled_by}),
            class_="scroll")


class DiffPage(StatePart):
    """C{GET /ui/states/{state}/-/diff?from=&to=}: two versions side by side."""

    route = BASE_PATH + "/states/{state}/-/diff"

    async def show(self, request: Request, viewer: Viewer) -> Response:
        key = self.key(request, viewer)
        summary = await self.summary(key)
        if summary.current is None:
            raise VersionNotFound("the state has no version yet")
        latest = summary.current.number
        to = number(request, "to", latest, 2**31 - 1)
        before = previous_stored(await self.lane.store.list_versions(key), to)
        since = number(request, "from", before or max(1, to - 1), 2**31 - 1)
        old = await self.lane.store.read_version(key, since)
        new = await self.lane.store.read_version(key, to)
        if old is None or new is None:
            raise VersionNotFound(f"the state has versions 1 to {latest}")
        try:
            shown = await in_thread_if_large(self.lane.reactor, len(old) + len(new),
                                             page_diff, old, new)
        except EncryptedState:
            raise BadRequest("one of these versions is an OpenTofu encrypted state: the"
                             " server cannot read it") from None
        changed = len(shown.diff["resources"]["changed"])
        page = number(request, "page", 1, page_count(changed, CHANGED_PER_PAGE))
        return await render_page(request, self.dashboard, viewer,
                                 f"{key.path}: version {since} → {to}",
                                 DiffView(key, shown, since, to, page), section=BASE_PATH + "/")
