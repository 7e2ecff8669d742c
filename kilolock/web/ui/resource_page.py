"""A resource's page (C{/ui/states/{state}/-/resource?address=A[&version=N]}):
one resource instance of the current version (or of version N) -- its
attributes, masked where sensitive, what it depends on and what depends on
it, and its history over the latest versions (when it last changed, and by
whom).  An address naming a resource of several instances lists them."""

from __future__ import annotations

import json
from datetime import datetime
from itertools import pairwise
from typing import Any

from attrs import frozen
from twisted.web.server import Request
from twisted.web.template import Tag, tags

from kilolock.core.errors import BadRequest, StateNotFound, VersionNotFound
from kilolock.core.events import AuditEvent
from kilolock.core.model import ResourceRow, StateKey, StateVersion
from kilolock.retention.policy import pruned_error
from kilolock.tfstate.address import MAX_ADDRESS_LENGTH
from kilolock.web.resource import Response
from kilolock.web.ui import BASE_PATH, format
from kilolock.web.ui.base import Viewer, render_page
from kilolock.web.ui.graph import config_address, resource_of
from kilolock.web.ui.history_page import WRITING_KINDS, made_by, writers
from kilolock.web.ui.params import number, resource_url, state_url, text, with_query
from kilolock.web.ui.state_access import StatePart
from kilolock.web.ui.values import attribute_rows
from kilolock.web.ui.version_reads import (
    FingerprintKey,
    VersionRead,
    fingerprints,
    read_version,
)

#: Stored versions a resource's history looks back over.
HISTORY_VERSIONS = 10
#: Dependents and dependencies listed at most.
MAX_LISTED = 200



@frozen
class Change:
    """What a version did to an instance object."""

    version: StateVersion
    what: str  # "created", "changed", "removed"
    event: AuditEvent | None


def chosen_version(versions: list[StateVersion], wanted: int | None) -> StateVersion:
    """Version C{wanted} (the current one when None) of a state's versions.

    @raise VersionNotFound: no such version.
    @raise VersionPruned: only its tombstone is left (410)."""
    if not versions:
        raise VersionNotFound("the state has no version yet")
    found = versions[-1] if wanted is None else next(
        (version for version in versions if version.number == wanted), None)
    if found is None:
        raise VersionNotFound(f"the state has no version {wanted}")
    if found.pruned:
        raise pruned_error(found.number, found.pruned_at, found.prune_reason)
    return found


def history(versions: list[StateVersion], shown: StateVersion,
            prints: dict[int, dict[FingerprintKey, int]], key: FingerprintKey,
            by_version: dict[tuple[int, str | None], AuditEvent]) -> list[Change]:
    """The versions among C{prints} (newest first, up to C{shown}) that
    created, changed or removed the object C{key}, newest first."""
    numbers = sorted(number for number in prints if number <= shown.number)
    meta = {version.number: version for version in versions}
    changes: list[Change] = []
    if numbers and key in prints[numbers[0]] and numbers[0] == min(meta):
        first = meta[numbers[0]]
        changes.append(Change(first, "created", by_version.get((first.number, first.sha256))))
    for before, after in pairwise(numbers):
        old, new = prints[before].get(key), prints[after].get(key)
        if old == new:
            continue
        what = "created" if old is None else "removed" if new is None else "changed"
        version = meta[after]
        changes.append(Change(version, what, by_version.get((version.number, version.sha256))))
    return changes[::-1]


class ResourcePage(StatePart):
    """C{GET /ui/states/{state}/-/resource?address=A[&version=N]}."""

    route = BASE_PATH + "/states/{state}/-/resource"

    async def show(self, request: Request, viewer: Viewer) -> Response:
        key = self.key(request, viewer)
        summary = await self.summary(key)
        address = text(request, "address")
        if not address:
            raise BadRequest("address is required: the resource (instance) to show")
        if len(address) > MAX_ADDRESS_LENGTH:
            raise BadRequest(f"address is longer than {MAX_ADDRESS_LENGTH} characters")
        wanted = number(request, "version", 0, 2**31 - 1) or None
        versions = await self.lane.store.list_versions(key)
        version = chosen_version(versions, wanted)
        read = await read_version(self.lane, self.dashboard.parsed_versions, key, version)
        if read.projection is None:
            raise BadRequest(f"version {version.number} is an OpenTofu encrypted state: the"
                             " server cannot read its resources")
        rows = read.projection.resources
        exact = [row for row in rows if row.address == address]
        instances = [row for row in rows if address in (resource_of(row.address),
                                                         config_address(row.address))]
        if not exact and not instances:
            raise StateNotFound(f"no resource {address} in version {version.number}")
        current = summary.current is not None and summary.current.number == version.number
        now = self.dashboard.sessions.now()
        events = writers(await self.lane.store.list_events(key.tenant, state_path=key.path,
                                                           kinds=WRITING_KINDS))
        if exact:
            stored = [v for v in versions if not v.pruned and v.number <= version.number]
            prints: dict[int, dict[FingerprintKey, int]] = {}
            for stored_version in stored[-HISTORY_VERSIONS:]:
                found = await fingerprints(self.lane, self.dashboard.fingerprints, key,
                                           stored_version)
                if found is not None:
                    prints[stored_version.number] = found
            body: list[Any] = [self._instance(key, read, exact[0], exact[1:], current,
                                              history(versions, version, prints,
                                                      ("resource", exact[0].address,
                                                       exact[0].deposed), events),
                                              len(stored) > HISTORY_VERSIONS, now)]
        else:
            body = [self._instances(key, read, address, instances, current)]
        title = f"{address} · {key.path}"
        return await render_page(request, self.dashboard, viewer, title,
                                 tags.div(self._links(key, version, current), *body),
                                 section=BASE_PATH + "/", heading=address)

    def _links(self, key: StateKey, version: StateVersion, current: bool) -> Tag:
        parts: list[Any] = [tags.a(f"State {key.path}", href=state_url(key.path)), " · ",
                            tags.a("History", href=state_url(key.path, "history"))]
        if not current:
            parts += [" · ", tags.a(f"Version {version.number}",
                                    href=state_url(key.path, f"versions/{version.number}"))]
        note = (tags.p(f"Version {version.number} of {key.path}: not the current one.",
                       class_="warning") if not current else "")
        return tags.div(tags.p(parts, class_="links"), note)

    def _summary(self, row: ResourceRow, version: StateVersion, current: bool,
                 others: list[ResourceRow]) -> Tag:
        items: list[tuple[str, Any]] = [
            ("Type", tags.code(row.type)),
            ("Name", tags.code(row.name)),
            ("Module", tags.code(row.module) if row.module else "(root module)"),
            ("Mode", "data source" if row.mode == "data" else "managed"),
            ("Provider", tags.span(format.provider(row.provider), title=row.provider)),
            ("Instance key", "—" if row.index_key is None else tags.code(row.index_key)),
            ("Object", f"deposed ({row.deposed})" if row.deposed else "current"),
            ("Version", f"{version.number}{' (current)' if current else ''},"
                        f" serial {version.serial}"),
        ]
        if others:
            items.append(("Also", f"{format.plural(len(others), 'deposed object')} at this"
                                  " address"))
        return tags.dl([[tags.dt(name), tags.dd(value)] for name, value in items],
                       class_="summary")

    def _instance(self, key: StateKey, read: VersionRead, row: ResourceRow,
                  others: list[ResourceRow], current: bool, changes: list[Change],
                  more_history: bool, now: datetime) -> Tag:
        version = read.version
        projection = read.projection
        assert projection is not None
        number_ = None if current else version.number
        resource = config_address(row.address)
        depends_on = sorted({dep.depends_on for dep in projection.dependencies
                             if dep.address == row.address})
        dependents = sorted({dep.address for dep in projection.dependencies
                             if dep.depends_on == resource and dep.address != row.address})

        def listing(addresses: list[str], nothing: str) -> Tag:
            if not addresses:
                return tags.p(nothing)
            items = [tags.li(tags.a(tags.code(address),
                                    href=resource_url(key.path, address, number_)))
                     for address in addresses[:MAX_LISTED]]
            if len(addresses) > MAX_LISTED:
                items.append(tags.li(f"… and {len(addresses) - MAX_LISTED} more"))
            return tags.ul(items, class_="addresses")

        attributes = json.loads(row.attributes)
        return tags.div(
            tags.section(tags.h2("Summary", id="summary-heading"),
                         self._summary(row, version, current, others),
                         **{"aria-labelledby": "summary-heading"}),
            tags.section(
                tags.h2("Attributes", id="attributes-heading"),
                tags.p("Sensitive values, and any value holding one, are masked;"
                       " they are never sent.", class_="note"),
                tags.div(tags.table(
                    tags.thead(tags.tr(tags.th("Attribute", scope="col"),
                                       tags.th("Value", scope="col"))),
                    tags.tbody(attribute_rows(attributes, read.secrets)),
                    class_="attributes", **{"aria-labelledby": "attributes-heading"}),
                    class_="scroll"),
                **{"aria-labelledby": "attributes-heading"}),
            tags.section(
                tags.h2("Dependencies", id="dependencies-heading"),
                tags.h3("Depends on"),
                listing(depends_on, "Nothing (as the state records it)."),
                tags.h3("Depended on by"),
                listing(dependents, "Nothing in this state."),
                **{"aria-labelledby": "dependencies-heading"}),
            tags.section(
                tags.h2("History", id="history-heading"),
                self._history(key, changes, more_history, now),
                **{"aria-labelledby": "history-heading"}))

    def _history(self, key: StateKey, changes: list[Change], more: bool,
                 now: datetime) -> list[Any]:
        scope = (f"the latest {HISTORY_VERSIONS} stored versions" if more
                 else "every stored version")
        if not changes:
            return [tags.p(f"Not created, changed or removed in {scope}.")]
        last = changes[0]
        label = {"created": "Created", "changed": "Last changed", "removed": "Removed"}
        parts: list[Any] = [tags.p(
            tags.strong(f"{label[last.what]}: "), f"version {last.version.number}, ",
            tags.time(format.ago(last.version.created_at, now),
                      datetime=last.version.created_at.isoformat(),
                      title=format.when(last.version.created_at)),
            " by ", self._who(last), f" (looking back over {scope}).")]
        rows = [tags.tr(tags.td(tags.a(f"Version {change.version.number}",
                                       href=state_url(key.path,
                                                      f"versions/{change.version.number}"))),
                        tags.td(change.what, " ", made_by(change.event)),
                        tags.td(tags.time(format.when(change.version.created_at),
                                          datetime=change.version.created_at.isoformat()),
                                tags.br(), tags.span(format.ago(change.version.created_at, now),
                                                     class_="ago")),
                        tags.td(self._who(change)))
                for change in changes]
        parts.append(tags.div(tags.table(
            tags.caption("Versions that created, changed or removed it, newest first"),
            tags.thead(tags.tr(tags.th("Version", scope="col"), tags.th("What", scope="col"),
                               tags.th("When", scope="col"), tags.th("By", scope="col"))),
            tags.tbody(rows), class_="changes"), class_="scroll"))
        return parts

    @staticmethod
    def _who(change: Change) -> str:
        return (format.identity(change.event) if change.event is not None
                else change.version.principal)

    def _instances(self, key: StateKey, read: VersionRead, address: str,
                   instances: list[ResourceRow], current: bool) -> Tag:
        number_ = None if current else read.version.number
        rows = [tags.tr(tags.th(tags.a(tags.code(row.address),
                                       href=with_query(resource_url(key.path, row.address,
                                                                    number_), {})),
                                scope="row"),
                        tags.td("—" if row.index_key is None else tags.code(row.index_key)),
                        tags.td(f"deposed ({row.deposed})" if row.deposed else "current"))
                for row in instances]
        first = instances[0]
        return tags.section(
            tags.h2("Instances", id="instances-heading"),
            tags.p(f"{format.plural(len(instances), 'instance')} of the resource",
                   f" {address} ({first.type}, provider {format.provider(first.provider)}).",
                   class_="count"),
            tags.div(tags.table(
                tags.thead(tags.tr(tags.th("Address", scope="col"), tags.th("Key", scope="col"),
                                   tags.th("Object", scope="col"))),
                tags.tbody(rows), class_="resources"), class_="scroll"),
            **{"aria-labelledby": "instances-heading"})
