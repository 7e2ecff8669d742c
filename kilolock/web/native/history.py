"""A state's history on the native API: its versions (each byte for byte),
the resource-level diff of two, the outputs of one, and the rollback that
restores one as a new version."""

from __future__ import annotations

from typing import Any

from twisted.web.resource import Resource
from twisted.web.server import Request

from kilolock.core.errors import BadRequest, LockConflict, NotFound, VersionNotFound
from kilolock.core.events import STATE_OPERATION, STATE_ROLLBACK, STATE_WRITE, AuditEvent
from kilolock.core.model import StateUpload
from kilolock.core.text import MAX_WHOLE_NUMBER, NotJSON, load_json, whole_number
from kilolock.tfstate.diff import diff_states, output_document, outputs_of, restore_body
from kilolock.web.body import in_thread_if_large, prepare_upload, read_body
from kilolock.web.documents import NO_STORE, json_response
from kilolock.web.lane import StateLane
from kilolock.web.native import BASE_PATH
from kilolock.web.native.documents import event_detail, locked_response, version_document
from kilolock.web.native.parameters import number_arg
from kilolock.web.native.resource import StateSubresource, no_route
from kilolock.web.native.retention import PurgeResource
from kilolock.web.query import query_id
from kilolock.web.resource import JSON, Branch, Response, render_async


class VersionListResource(StateSubresource):
    """C{GET .../-/versions}: every version, with the kind of write that made it."""

    route = BASE_PATH + "/states/{state}/-/versions"

    def child(self, segment: str) -> Resource:
        number = whole_number(segment)
        if number is None or number < 1:
            return Branch(NotFound("version numbers are whole numbers from 1"),
                          child=lambda _: no_route())
        return VersionResource(self.lane, self.segments, number)

    @render_async
    async def render_GET(self, request: Request) -> Response:
        _, key = await self.key(request)
        versions = await self.versions(key)
        writes = await self.lane.store.list_events(key.tenant, state_path=key.path,
                                                   kinds=[STATE_WRITE, STATE_ROLLBACK,
                                                          STATE_OPERATION])
        # The event that wrote each version (the latest one naming it: numbers
        # start again after a delete).
        by_version: dict[tuple[int, str | None], AuditEvent] = {}
        for event in writes:
            number = event_detail(event).get("version")
            if isinstance(number, int):
                by_version[(number, event.sha256)] = event
        documents = []
        for version in versions:
            document = version_document(version, current=version is versions[-1])
            writer = by_version.get((version.number, version.sha256))
            document["kind"] = writer.kind if writer is not None else STATE_WRITE
            restored = event_detail(writer).get("restored_version")
            document["restoredFrom"] = restored if isinstance(restored, int) else None
            documents.append(document)
        return json_response({"state": key.path, "versions": documents})


class VersionResource(StateSubresource):
    """C{GET .../-/versions/{n}}: one version's exact bytes."""

    route = BASE_PATH + "/states/{state}/-/versions/{n}"

    def __init__(self, lane: StateLane, segments: tuple[str, ...], number: int) -> None:
        super().__init__(lane, segments)
        self.number = number

    def child(self, segment: str) -> Resource:
        if segment == "purge":
            return PurgeResource(self.lane, self.segments, self.number)
        return no_route()

    @render_async
    async def render_GET(self, request: Request) -> Response:
        _, key = await self.key(request)
        raw = await self.version_bytes(key, self.number)
        return Response(200, raw, JSON, {**NO_STORE,
                                         b"X-Kilolock-Version": str(self.number).encode()})


class DiffResource(StateSubresource):
    """C{GET .../-/diff?from=&to=}: what changed, resource by resource (from
    the version before C{to}, to the current one, unless given)."""

    route = BASE_PATH + "/states/{state}/-/diff"

    @render_async
    async def render_GET(self, request: Request) -> Response:
        _, key = await self.key(request)
        versions = await self.versions(key)
        if not versions:
            raise VersionNotFound("the state has no version yet")
        by_number = {version.number: version for version in versions}
        to = number_arg(request, "to") or versions[-1].number
        since = number_arg(request, "from")
        if since is None:  # the version before, tombstones skipped
            since = max((n for n, version in by_number.items()
                         if n < to and not version.pruned), default=to)
        for number in (since, to):
            if number not in by_number:
                raise VersionNotFound(f"the state has no version {number}")
        old = await self.version_bytes(key, since)
        new = await self.version_bytes(key, to)
        diff = await in_thread_if_large(self.lane.reactor, len(old) + len(new), diff_states,
                                        old, new)
        return json_response({"state": key.path, "from": version_document(by_number[since]),
                              "to": version_document(by_number[to]), **diff})


class OutputsResource(StateSubresource):
    """C{GET .../-/outputs[?version=n]}: the outputs, sensitive values hidden
    (of the current version from the projection while it is current)."""

    route = BASE_PATH + "/states/{state}/-/outputs"

    @render_async
    async def render_GET(self, request: Request) -> Response:
        # What a CI token's outputs-only grant allows.
        _, key = await self.lane.authorize_state(request, self.segments, outputs=True)
        number = number_arg(request, "version")
        if number is None:
            number = await self.current_number(key)
            projection = await self.lane.store.get_projection(key)
            after = await self.lane.store.get_summary(key)
            unchanged = (after is not None and after.current is not None
                         and after.current.number == number)
            if projection is not None and unchanged:
                outputs = [output_document(row.name, row.type, row.value, row.sensitive)
                           for row in projection.outputs]
                return json_response({"state": key.path, "version": number,
                                      "outputs": outputs})
        raw = await self.version_bytes(key, number)
        outputs = await in_thread_if_large(self.lane.reactor, len(raw), outputs_of, raw)
        return json_response({"state": key.path, "version": number, "outputs": outputs})


class RollbackResource(StateSubresource):
    """C{POST .../-/rollback[?ID=]} with C{{"version": n}}: restore version n
    as a new current version (its content with the current lineage and the
    current serial + 1), audited as C{state_rollback}."""

    route = BASE_PATH + "/states/{state}/-/rollback"

    @render_async
    async def render_POST(self, request: Request) -> Response:
        principal, key = await self.key(request, write=True)
        body = await read_body(request, self.lane.reactor)
        number = rollback_version(body)
        summary = await self.summary(key)
        current = summary.current
        if current is None:
            raise VersionNotFound(f"the state has no version {number}")
        raw = await self.version_bytes(key, number)
        lock_id = query_id(request)

        def prepare() -> StateUpload:
            return prepare_upload(restore_body(raw, current.serial + 1, current.lineage))

        upload = await in_thread_if_large(self.lane.reactor, len(raw), prepare)
        try:
            outcome = await self.lane.store.write_state(
                key, upload, lock_id, principal, event_kind=STATE_ROLLBACK,
                event_detail={"restored_version": number})
        except LockConflict as error:
            return locked_response(error, self.metrics, await self.lane.store.get_lock(key))
        self.lane.count_write(outcome)
        return json_response({"state": key.path, "restoredFrom": number,
                              "version": version_document(outcome.version, current=True)})


def rollback_version(body: bytes) -> int:
    """The version number a rollback body names.

    @raise BadRequest: unless the body is C{{"version": n}} with n >= 1.
    @raise InvalidText: the body breaks a text rule (L{kilolock.core.text}).
    """
    document: Any
    try:
        document = load_json(body, "the rollback body")
    except NotJSON:
        document = None
    number = document.get("version") if isinstance(document, dict) else None
    if not isinstance(number, int) or isinstance(number, bool) or number < 1:
        raise BadRequest('the body must be {"version": N}: the number of the version to'
                         " restore (see /-/versions)")
    if number > MAX_WHOLE_NUMBER:
        raise VersionNotFound(f"the state has no version above {MAX_WHOLE_NUMBER}")
    return number
