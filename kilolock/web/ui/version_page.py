"""One stored version of a state, below C{/ui/states/{state}/-/versions/{n}}:

  .../versions/{n}            the version's page: who wrote it and when, what
                              it changed, its outputs, its resources (each a
                              link to its page in that version)
  .../versions/{n}/json       the version as JSON, sensitive values masked
  .../versions/{n}/download   its exact bytes, as a file
"""

from __future__ import annotations

import json
import re
from typing import Any

import msgspec
from twisted.web.resource import Resource
from twisted.web.server import Request
from twisted.web.template import Tag, tags

from kilolock.core.errors import (
    BadRequest,
    EncryptedState,
    InvalidText,
    VersionNotFound,
    VersionTooDeep,
)
from kilolock.core.model import StateKey, StateVersion
from kilolock.core.text import clean_json_text
from kilolock.tfstate.diff import load_document
from kilolock.tfstate.redaction import REDACTED, redact, redact_flat, sensitive_paths
from kilolock.web.body import in_thread_if_large
from kilolock.web.resource import Response
from kilolock.web.ui import BASE_PATH, format
from kilolock.web.ui.base import Viewer, page_count, pager, render_page
from kilolock.web.ui.headers import SECURITY_HEADERS
from kilolock.web.ui.history_page import WRITING_KINDS, made_by, previous_stored, writers
from kilolock.web.ui.params import number, state_url, text, with_query
from kilolock.web.ui.resource_page import chosen_version
from kilolock.web.ui.resource_table import output_rows, resource_rows
from kilolock.web.ui.secrets import sensitive_values_of
from kilolock.web.ui.state_access import NotFoundPage, StatePart
from kilolock.web.ui.values import visible
from kilolock.web.ui.version_reads import read_version

#: Resources per page of a version's page.
RESOURCE_PAGE = 100
#: The largest version shown as JSON on a page (larger: download it).
MAX_JSON_BYTES = 16 * 1024 * 1024


class VersionsFolder(StatePart):
    """C{/ui/states/{state}/-/versions}: the versions by number."""

    def child(self, segment: str) -> Resource:
        if not segment.isascii() or not segment.isdigit() or not 1 <= int(segment) < 2**31:
            return NotFoundPage(self.dashboard)
        return VersionPage(self.dashboard, self.segments, int(segment))

    async def show(self, request: Request, viewer: Viewer) -> Response:
        raise VersionNotFound("name a version")


class _OfVersion(StatePart):
    def __init__(self, dashboard: Any, segments: tuple[str, ...], number_: int) -> None:
        super().__init__(dashboard, segments)
        self.number = number_

    async def version(self, key: StateKey) -> tuple[StateVersion, list[StateVersion]]:
        await self.summary(key)
        versions = await self.lane.store.list_versions(key)
        return chosen_version(versions, self.number), versions


class VersionPage(_OfVersion):
    """C{GET /ui/states/{state}/-/versions/{n}}: the version, browsable."""

    route = BASE_PATH + "/states/{state}/-/versions/{n}"

    def child(self, segment: str) -> Resource:
        kind = {"json": VersionJson, "download": VersionDownload}.get(segment)
        if kind is None:
            return NotFoundPage(self.dashboard)
        return kind(self.dashboard, self.segments, self.number)

    async def show(self, request: Request, viewer: Viewer) -> Response:
        key = self.key(request, viewer)
        version, versions = await self.version(key)
        address = text(request, "address")
        read = await read_version(self.lane, self.dashboard.parsed_versions, key, version)
        events = writers(await self.lane.store.list_events(key.tenant, state_path=key.path,
                                                           kinds=WRITING_KINDS))
        event = events.get((version.number, version.sha256))
        now = self.dashboard.sessions.now()
        path = key.path
        current = version is versions[-1]
        before = previous_stored(versions, version.number)
        links: list[Any] = [tags.a(f"State {path}", href=state_url(path)), " · ",
                            tags.a("History", href=state_url(path, "history"))]
        if before is not None:
            links += [" · ", tags.a(f"Diff with version {before}", href=with_query(
                state_url(path, "diff"), {"from": before, "to": version.number}))]
        links += [" · ", tags.a("JSON", href=state_url(path, f"versions/{version.number}/json")),
                  " · ", tags.a("Download", href=state_url(
                      path, f"versions/{version.number}/download"))]
        heading: list[Any] = [f"Version {version.number}"]
        if current:
            heading += [" ", tags.span("current", class_="badge current")]
        kind = made_by(event)
        if kind:
            heading += [" ", kind]
        who = format.identity(event) if event is not None else version.principal
        summary = tags.dl([[tags.dt(name), tags.dd(value)] for name, value in (
            ("Written", [tags.time(format.when(version.created_at),
                                   datetime=version.created_at.isoformat()),
                         f" ({format.ago(version.created_at, now)})"]),
            ("By", [who, " from ", format.client(event)]),
            ("Serial", str(version.serial)),
            ("Lineage", version.lineage),
            ("Size", format.size(version.size)),
        )], class_="summary")
        body: list[Any] = [tags.p(links, class_="links"),
                           tags.section(tags.h2(heading, id="version-heading"), summary,
                                        **{"aria-labelledby": "version-heading"})]
        if read.projection is None:
            body.append(tags.p("This version is an OpenTofu encrypted state: the server"
                               " cannot read its resources.", class_="warning"))
        else:
            rows = [row for row in read.projection.resources if address in row.address]
            page = number(request, "page", 1, page_count(len(rows), RESOURCE_PAGE))
            shown = rows[(page - 1) * RESOURCE_PAGE:page * RESOURCE_PAGE]
            number_ = None if current else version.number
            here = state_url(path, f"versions/{version.number}")
            body += [
                tags.section(
                    tags.h2("Outputs", id="outputs-heading"),
                    tags.div(tags.table(
                        tags.thead(tags.tr(tags.th("Name", scope="col"),
                                           tags.th("Type", scope="col"),
                                           tags.th("Value", scope="col"))),
                        tags.tbody(output_rows(read.projection.outputs, read.secrets)),
                        class_="outputs", **{"aria-labelledby": "outputs-heading"}),
                        class_="scroll"),
                    **{"aria-labelledby": "outputs-heading"}),
                tags.section(
                    tags.h2("Resources", id="resources-heading"),
                    tags.form(tags.p(tags.label("Address contains", for_="address"),
                                     tags.input(id="address", name="address", type="search",
                                                value=address)),
                              tags.p(tags.button("Filter", type="submit")),
                              class_="filters", method="get", action=here,
                              **{"aria-label": "Filter resources"}),
                    tags.p(f"{len(rows):,} of "
                           f"{format.plural(len(read.projection.resources), 'resource instance')}.",
                           class_="count", role="status"),
                    tags.div(tags.table(
                        tags.thead(tags.tr(*[tags.th(name, scope="col") for name in (
                            "Address", "Type", "Module", "Provider", "Object")])),
                        tags.tbody(resource_rows(path, shown, number_)),
                        class_="resources cards",
                        **{"aria-labelledby": "resources-heading"}),
                        class_="scroll"),
                    pager(tags.nav(class_="pager", **{"aria-label": "Resource pages"}), page,
                          page_count(len(rows), RESOURCE_PAGE), "Previous resources",
                          "Next resources",
                          lambda n: with_query(here, {"address": address, "page": n})),
                    **{"aria-labelledby": "resources-heading"})]
        return await render_page(request, self.dashboard, viewer,
                                 f"Version {version.number} of {path}", tags.div(body),
                                 section=BASE_PATH + "/",
                                 heading=f"{path}: version {version.number}")


def indented(doc: Any) -> str:
    """C{doc} as JSON indented by two spaces (msgspec's C encoder: the
    standard library's indents in Python, several times slower); a document
    holding text UTF-8 cannot (an unpaired surrogate) through the standard
    library."""
    try:
        return msgspec.json.format(msgspec.json.encode(doc), indent=2).decode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(doc, indent=2, ensure_ascii=False)


def masked_document(raw: bytes) -> str:
    """Version C{raw} as indented JSON, every sensitive value -- at a path
    the state marks sensitive, a sensitive output -- replaced by
    C{"(sensitive)"}, and wherever a value marked sensitive turns up in
    other text, that text too; text a page cannot hold (NUL, unpaired
    surrogates) as U+FFFD.

    @raise EncryptedState: an encrypted envelope.
    @raise VersionTooDeep: nesting too deep to read."""
    try:
        doc = load_document(raw)
        secrets = sensitive_values_of(doc)
        for output in (doc.get("outputs") or {}).values():
            if isinstance(output, dict) and output.get("sensitive"):
                output["value"] = REDACTED
        for resource in doc.get("resources") or []:
            for instance in (resource.get("instances") or []) if isinstance(resource,
                                                                           dict) else []:
                if not isinstance(instance, dict) or not instance.get("sensitive_attributes"):
                    continue
                paths = sensitive_paths(instance.get("sensitive_attributes"))
                if isinstance(instance.get("attributes"), dict):
                    instance["attributes"] = redact(instance["attributes"], paths)
                if isinstance(instance.get("attributes_flat"), dict):
                    instance["attributes_flat"] = redact_flat(instance["attributes_flat"], paths)
        text = clean_json_text(indented(doc))
    except (RecursionError, InvalidText):
        raise VersionTooDeep("this version nests too deeply for the server to read") from None
    # A value marked sensitive that turns up elsewhere (an output copying
    # it, a string embedding it): each occurrence of its JSON text.
    if secrets:
        pattern = "|".join(re.escape(json.dumps(secret, ensure_ascii=False)[1:-1])
                           for secret in sorted(secrets, key=len, reverse=True))
        text = re.sub(pattern, REDACTED, text)
    return visible(text)


class VersionJson(_OfVersion):
    """C{GET /ui/states/{state}/-/versions/{n}/json}: the version's JSON,
    masked."""

    route = BASE_PATH + "/states/{state}/-/versions/{n}/json"

    async def show(self, request: Request, viewer: Viewer) -> Response:
        key = self.key(request, viewer)
        version, _ = await self.version(key)
        if version.size > MAX_JSON_BYTES:
            raise BadRequest(f"version {version.number} is {format.size(version.size)}: larger"
                             f" than a page shows ({format.size(MAX_JSON_BYTES)}); download it,"
                             f" or `kl state pull {key.path} --version {version.number}`")
        raw = await self.lane.store.read_version(key, version.number)
        if raw is None:
            raise VersionNotFound(f"the state has no version {version.number}")
        try:
            document = await in_thread_if_large(self.lane.reactor, len(raw), masked_document,
                                                raw)
        except EncryptedState:
            raise BadRequest(f"version {version.number} is an OpenTofu encrypted state: the"
                             " server cannot read it") from None
        path = key.path
        content: list[Tag] = [
            tags.p(tags.a(f"Version {version.number}",
                          href=state_url(path, f"versions/{version.number}")), " · ",
                   tags.a("Download (exact bytes, secrets included)",
                          href=state_url(path, f"versions/{version.number}/download")),
                   class_="links"),
            tags.p("Sensitive values, and any value holding one, are shown as"
                   f" \"{REDACTED}\".", class_="note"),
            tags.pre(document, class_="json", tabindex="0",
                     **{"aria-label": f"Version {version.number} of {path} as JSON"})]
        return await render_page(request, self.dashboard, viewer,
                                 f"Version {version.number} of {path} as JSON", tags.div(content),
                                 section=BASE_PATH + "/",
                                 heading=f"{path}: version {version.number} as JSON")


class VersionDownload(_OfVersion):
    """C{GET /ui/states/{state}/-/versions/{n}/download}: the version's exact
    bytes, as a file (for a principal that may read the state)."""

    route = BASE_PATH + "/states/{state}/-/versions/{n}/download"

    async def show(self, request: Request, viewer: Viewer) -> Response:
        key = self.key(request, viewer)
        await self.summary(key)
        raw = await self.lane.store.read_version(key, self.number)
        if raw is None:
            raise VersionNotFound(f"the state has no version {self.number}")
        name = key.path.rsplit("/", 1)[-1]
        filename = "".join(c if c.isascii() and (c.isalnum() or c in "-_.") else "_"
                           for c in name)
        return Response(200, raw, b"application/json", {
            **SECURITY_HEADERS, b"Cache-Control": b"no-store",
            b"Content-Disposition": f'attachment; filename="{filename}-v{self.number}'
                                    f'.tfstate"'.encode()})
