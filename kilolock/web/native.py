"""The KL-native lane: C{/v1/native}, what the C{kl} command talks to.

Same authentication, tenant rules and state path segments as the HTTP lane
(L{kilolock.web.states.StateLane}): a state is one segment (C{{name}}) or
three (C{{workspace_id}/{env_public_id}/{state_name}}), each validated by
L{kilolock.web.paths}; a token scoped to a workspace/environment maps a
one-segment name into its scope and gets 403 outside it.  What belongs to a
state follows the segment C{-} (GitLab's convention), so no state name ever
needs encoding and no route is ambiguous:

  GET   /v1/native                                   the lane (unauthenticated)
  GET   /v1/native/states                            the tenant's states
  GET   /v1/native/states/{state}                    one state's summary
  GET   /v1/native/states/{state}/-/versions         its version history
  GET   /v1/native/states/{state}/-/versions/{n}     version n, byte-for-byte
  GET   /v1/native/states/{state}/-/diff?from=&to=   resource-level diff
  GET   /v1/native/states/{state}/-/outputs[?version=n]
  GET   /v1/native/states/{state}/-/resources?type=&address=&module=&attribute=
  GET   /v1/native/states/{state}/-/lock             the lock, with its age
  GET   /v1/native/states/{state}/-/events           the state's audit events
  POST  /v1/native/states/{state}/-/rollback[?ID=]   restore a version ({"version": n})
  GET   /v1/native/resources?type=&address=&module=&attribute=&state=&limit=
  GET   /v1/native/events?state=&kind=&since=&until=&after=&limit=&last=
  GET   /v1/native/events/verify                     the tenant's hash chain, checked

Every answer is JSON except a version's bytes; every error is the JSON error
document, lock conflicts included (with the holder under C{"lock"}).  A state
of another tenant is simply a state this tenant does not have: 404, the same
bytes as for a name nobody uses (ADR 0018 rule 2).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from attrs import evolve
from twisted.internet.threads import deferToThreadPool
from twisted.web.resource import Resource
from twisted.web.server import Request

from kilolock.audit import verify_chain
from kilolock.conditions import state_conditions, state_ready
from kilolock.errors import (
    BadRequest,
    Forbidden,
    InvalidPath,
    LockConflict,
    NotFound,
    StateNotFound,
    VersionNotFound,
)
from kilolock.model import (
    LOCK_FORCE_RELEASE,
    LOCK_RELEASE,
    STATE_ROLLBACK,
    STATE_WRITE,
    AuditEvent,
    HeldLock,
    LockInfo,
    Principal,
    ResourceMatch,
    ResourceQuery,
    StateKey,
    StateSummary,
    StateVersion,
    rfc3339,
    utcnow,
)
from kilolock.statediff import diff_states, output_document, outputs_of, restore_body
from kilolock.tls import with_client_certificate
from kilolock.web._base import JSON, AsyncResource, Response, error_body
from kilolock.web.body import THREAD_THRESHOLD, prepare_upload, read_body
from kilolock.web.paths import (
    StateAddress,
    consume_segments,
    parse_state_segments,
    validate_segment,
)
from kilolock.web.query import plain_error, query_time, query_value, query_values
from kilolock.web.request import client_address, site_metrics
from kilolock.web.states import ErrorResource, StateLane

T = TypeVar("T")

#: The name and version of this lane in the discovery document.
LANE_NAME = "kilolock-native"
LANE_VERSION = "v1"
BASE_PATH = "/v1/native"
#: The segment between a state's address and what belongs to it.
MARKER = "-"
#: Events answered per page unless C{limit} says otherwise, and at most.
DEFAULT_EVENT_PAGE = 1000
MAX_EVENT_PAGE = 10000

_NO_STORE = {b"Cache-Control": b"no-store"}


def json_response(document: Any, status: int = 200) -> Response:
    body = json.dumps(document, indent=2, ensure_ascii=False).encode("utf-8") + b"\n"
    return Response(status, body, JSON, dict(_NO_STORE))


async def in_thread_if_large(reactor: Any, size: int, function: Callable[..., T],
                             *args: Any) -> T:
    """C{function(*args)}, in the reactor's thread pool when C{size} bytes are
    involved beyond the threshold (inline without a reactor: in-memory tests)."""
    if reactor is None or size < THREAD_THRESHOLD:
        return function(*args)
    result: T = await deferToThreadPool(reactor, reactor.getThreadPool(), function, *args)
    return result


# -- JSON documents --------------------------------------------------------------


def lock_document(lock: HeldLock, now: datetime) -> dict[str, Any]:
    try:
        info: Any = json.loads(lock.info.raw)
    except ValueError:
        info = None
    return {
        "id": lock.info.id,
        "operation": lock.info.operation,
        "who": lock.info.who,
        "version": lock.info.version,
        "created": None if lock.info.created is None else rfc3339(lock.info.created),
        "acquiredAt": rfc3339(lock.acquired_at),
        "ageSeconds": max(0, int((now - lock.acquired_at).total_seconds())),
        "principal": lock.principal,
        "info": info,
    }


def version_document(version: StateVersion, current: bool | None = None) -> dict[str, Any]:
    document: dict[str, Any] = {
        "number": version.number,
        "serial": version.serial,
        "lineage": version.lineage,
        "sha256": version.sha256,
        "size": version.size,
        "createdAt": rfc3339(version.created_at),
        "principal": version.principal,
        "projected": version.projected,
    }
    if current is not None:
        document["current"] = current
    return document


def summary_document(summary: StateSummary, now: datetime,
                     unlocked_since: datetime | None) -> dict[str, Any]:
    conditions = state_conditions(summary, now, unlocked_since)
    current = summary.current
    return {
        "name": summary.key.path,
        "segments": summary.key.path.split("/"),
        "serial": None if current is None else current.serial,
        "lineage": None if current is None else current.lineage,
        "size": None if current is None else current.size,
        "sha256": None if current is None else current.sha256,
        "currentVersion": None if current is None else current.number,
        "versionCount": summary.version_count,
        "resourceCount": summary.resource_count,
        "updatedAt": rfc3339(summary.updated_at),
        "lock": None if summary.lock is None else lock_document(summary.lock, now),
        "conditions": [condition.to_json() for condition in conditions],
        "ready": state_ready(conditions),
    }


def event_document(event: AuditEvent) -> dict[str, Any]:
    try:
        detail: Any = json.loads(event.detail)
    except ValueError:
        detail = None
    return {
        "seq": event.seq,
        "tenant": event.tenant,
        "kind": event.kind,
        "state": event.state_path,
        "principal": event.principal,
        "at": rfc3339(event.at),
        "lockId": event.lock_id,
        "serial": event.serial,
        "sha256": event.sha256,
        "detail": detail,
        # The exact text that was hashed, so a client can check the chain.
        "detailText": event.detail,
        "prevHash": event.prev_hash,
        "hash": event.hash,
    }


def match_document(match: ResourceMatch) -> dict[str, Any]:
    row = match.resource
    return {
        "state": match.state_path,
        "version": match.version,
        "address": row.address,
        "module": row.module,
        "mode": row.mode,
        "type": row.type,
        "name": row.name,
        "provider": row.provider,
        "indexKey": None if row.index_key is None else json.loads(row.index_key),
        "deposed": row.deposed,
        "attributes": json.loads(row.attributes),
    }


def locked_response(error: LockConflict, request: Request) -> Response:
    """A lock conflict as this lane answers it: the JSON error with the holder."""
    metrics = site_metrics(request)
    if metrics is not None:
        metrics.lock_conflicts.inc()
    try:
        holder = LockInfo.from_bytes(error.holder)
        lock: Any = json.loads(error.holder)
        who = holder.who or "another client"
        message = f"the state is locked by {who} ({holder.operation or 'an operation'}," \
                  f" lock ID {holder.id})"
    except (ValueError, BadRequest):
        lock, message = None, "the state is locked by another client"
    document = json.loads(error_body("locked", message))
    document["error"]["lock"] = lock
    return json_response(document, error.status)


# -- query parameters ------------------------------------------------------------


def _arg(request: Request, name: str) -> str | None:
    return query_value(request, name, plain_error)


def _number_arg(request: Request, name: str, minimum: int = 1,
                maximum: int | None = None) -> int | None:
    text = _arg(request, name)
    if text is None or text == "":
        return None
    if not text.isdigit() or int(text) < minimum or (maximum is not None
                                                     and int(text) > maximum):
        bound = f" and {maximum}" if maximum is not None else ""
        raise BadRequest(f"{name} must be a whole number, at least {minimum}{bound}")
    return int(text)


def _time_arg(request: Request, name: str) -> datetime | None:
    return query_time(request, name, plain_error)


def _resource_query(request: Request, **scope: Any) -> ResourceQuery:
    attribute = None
    text = _arg(request, "attribute")
    if text is not None:
        path, separator, value = text.partition("=")
        if not separator or not path:
            raise BadRequest("attribute is PATH=VALUE, e.g. attribute=tags.Name=web")
        attribute = (path, value)
    limit = _number_arg(request, "limit", maximum=10000)
    return ResourceQuery(type=_arg(request, "type") or None, address=_arg(request, "address"),
                         module=_arg(request, "module"), attribute=attribute,
                         limit=limit or 1000, **scope)


def scope_prefix(principal: Principal) -> str | None:
    """The state path prefix a workspace/environment-scoped token is confined to."""
    if principal.workspace_id is None:
        return None
    return f"{principal.workspace_id}/{principal.env_public_id}/"


# -- resources ---------------------------------------------------------------------


class NativeResource(AsyncResource):
    """Authentication and tenant rules shared by every native route."""

    def __init__(self, lane: StateLane) -> None:
        super().__init__()
        self.lane = lane

    async def principal(self, request: Request, write: bool = False) -> Principal:
        principal = await self.lane.principal(request)
        request.tenant = principal.tenant  # type: ignore[attr-defined]
        if (principal.workspace_id is not None and principal.basic_username is not None
                and principal.basic_username != principal.workspace_id):
            # The rule of StateLane.key_for, for the routes that name no state too.
            raise Forbidden("the Basic username must be the token's workspace_id")
        if write and not principal.can_write:
            raise Forbidden("this token is read-only")
        return with_client_certificate(
            evolve(principal, address=client_address(request)), request)

    def key_of_text(self, principal: Principal, text: str) -> StateKey:
        """A state named in a query parameter (C{name} or C{ws/env/name})."""
        try:
            parsed = parse_state_segments([part.encode() for part in text.split("/")],
                                          allow_lock_suffix=False)
        except InvalidPath as error:
            raise BadRequest(f"state: {error.message}") from None
        if parsed is None:
            raise BadRequest("state is NAME or WORKSPACE_ID/ENV_PUBLIC_ID/NAME")
        return self.lane.key_for(principal, parsed[0])

    async def unlocked_since(self, tenant: str, path: str | None) -> dict[str | None, datetime]:
        """When each state's lock was last released (one query)."""
        events = await self.lane.store.list_events(tenant, state_path=path,
                                                    kinds=[LOCK_RELEASE, LOCK_FORCE_RELEASE])
        return {event.state_path: event.at for event in events}

    async def events(self, request: Request, principal: Principal,
                     state_path: str | None) -> Response:
        kinds = query_values(request, "kind") or None
        found = await self.lane.store.list_events(
            principal.tenant, state_path=state_path, kinds=kinds,
            since=_time_arg(request, "since"), until=_time_arg(request, "until"))
        prefix = scope_prefix(principal)
        if prefix is not None:
            found = [e for e in found if e.state_path and e.state_path.startswith(prefix)]
        after = _number_arg(request, "after", minimum=0)
        if after is not None:
            found = [event for event in found if event.seq > after]
        last = _number_arg(request, "last", maximum=MAX_EVENT_PAGE)
        limit = _number_arg(request, "limit", maximum=MAX_EVENT_PAGE) or DEFAULT_EVENT_PAGE
        if last is not None:
            page, more = found[-last:], False
        else:
            page, more = found[:limit], len(found) > limit
        return json_response({
            "events": [event_document(event) for event in page],
            "more": more,
            "next": page[-1].seq if more else None,
            "scoped": prefix is not None,
        })


class NativeIndexResource(AsyncResource):
    """C{GET /v1/native}: which lane this is (no credentials needed, no tenant data)."""

    route = BASE_PATH

    async def do_GET(self, request: Request) -> Response:
        return Response(200, json.dumps({"lane": LANE_NAME, "version": LANE_VERSION,
                                         "basePath": BASE_PATH}).encode(), JSON)


class StateListResource(NativeResource):
    route = BASE_PATH + "/states"

    async def do_GET(self, request: Request) -> Response:
        principal = await self.principal(request)
        summaries = await self.lane.store.list_states(principal.tenant)
        prefix = scope_prefix(principal)
        if prefix is not None:
            summaries = [s for s in summaries if s.key.path.startswith(prefix)]
        released = await self.unlocked_since(principal.tenant, None) if summaries else {}
        now = utcnow()
        return json_response({"states": [summary_document(s, now, released.get(s.key.path))
                                         for s in summaries]})


class StateSubresource(NativeResource):
    """A route under one state: its address is already validated."""

    def __init__(self, lane: StateLane, address: StateAddress) -> None:
        super().__init__(lane)
        self.address = address

    async def key(self, request: Request, write: bool = False) -> tuple[Principal, StateKey]:
        principal = await self.principal(request, write)
        return principal, self.lane.key_for(principal, self.address)

    async def summary(self, key: StateKey) -> StateSummary:
        summary = await self.lane.store.get_summary(key)
        if summary is None:
            raise StateNotFound("no such state")
        return summary

    async def versions(self, key: StateKey) -> list[StateVersion]:
        versions = await self.lane.store.list_versions(key)
        if not versions and await self.lane.store.get_summary(key) is None:
            raise StateNotFound("no such state")
        return versions

    async def version_bytes(self, key: StateKey, number: int) -> bytes:
        raw = await self.lane.store.read_version(key, number)
        if raw is None:
            await self.summary(key)  # a missing state is "no such state"
            raise VersionNotFound(f"the state has no version {number}")
        return raw


class StateSummaryResource(StateSubresource):
    route = BASE_PATH + "/states/{state}"

    async def do_GET(self, request: Request) -> Response:
        _, key = await self.key(request)
        summary = await self.summary(key)
        released = await self.unlocked_since(key.tenant, key.path)
        return json_response(summary_document(summary, utcnow(), released.get(key.path)))


class VersionListResource(StateSubresource):
    route = BASE_PATH + "/states/{state}/-/versions"

    async def do_GET(self, request: Request) -> Response:
        _, key = await self.key(request)
        versions = await self.versions(key)
        writes = await self.lane.store.list_events(key.tenant, state_path=key.path,
                                                   kinds=[STATE_WRITE, STATE_ROLLBACK])
        # The event that wrote each version (the latest one naming it: numbers
        # start again after a delete).
        by_version: dict[tuple[int, str | None], AuditEvent] = {}
        for event in writes:
            number = _detail(event).get("version")
            if isinstance(number, int):
                by_version[(number, event.sha256)] = event
        documents = []
        for version in versions:
            document = version_document(version, current=version is versions[-1])
            writer = by_version.get((version.number, version.sha256))
            document["kind"] = writer.kind if writer is not None else STATE_WRITE
            restored = _detail(writer).get("restored_version") if writer is not None else None
            document["restoredFrom"] = restored if isinstance(restored, int) else None
            documents.append(document)
        return json_response({"state": key.path, "versions": documents})


def _detail(event: AuditEvent | None) -> dict[str, Any]:
    if event is None:
        return {}
    try:
        detail = json.loads(event.detail)
    except ValueError:
        return {}
    return detail if isinstance(detail, dict) else {}


class VersionResource(StateSubresource):
    """One version's exact bytes."""

    route = BASE_PATH + "/states/{state}/-/versions/{n}"

    def __init__(self, lane: StateLane, address: StateAddress, number: int) -> None:
        super().__init__(lane, address)
        self.number = number

    async def do_GET(self, request: Request) -> Response:
        _, key = await self.key(request)
        raw = await self.version_bytes(key, self.number)
        return Response(200, raw, JSON, {**_NO_STORE,
                                         b"X-Kilolock-Version": str(self.number).encode()})


class DiffResource(StateSubresource):
    route = BASE_PATH + "/states/{state}/-/diff"

    async def do_GET(self, request: Request) -> Response:
        _, key = await self.key(request)
        versions = await self.versions(key)
        if not versions:
            raise VersionNotFound("the state has no version yet")
        by_number = {version.number: version for version in versions}
        to = _number_arg(request, "to") or versions[-1].number
        since = _number_arg(request, "from")
        if since is None:
            since = max((n for n in by_number if n < to), default=to)
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
    route = BASE_PATH + "/states/{state}/-/outputs"

    async def do_GET(self, request: Request) -> Response:
        _, key = await self.key(request)
        number = _number_arg(request, "version")
        if number is None:
            summary = await self.summary(key)
            if summary.current is None:
                raise VersionNotFound("the state has no version yet")
            number = summary.current.number
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


class StateResourcesResource(StateSubresource):
    route = BASE_PATH + "/states/{state}/-/resources"

    async def do_GET(self, request: Request) -> Response:
        _, key = await self.key(request)
        summary = await self.summary(key)
        query = _resource_query(request, state_path=key.path)
        matches = await self.lane.store.query_resources(key.tenant, query)
        return json_response({"state": key.path,
                              "version": None if summary.current is None
                              else summary.current.number,
                              "projected": summary.current is not None
                              and summary.current.projected,
                              "resources": [match_document(m) for m in matches],
                              "truncated": len(matches) >= query.limit})


class LockStatusResource(StateSubresource):
    route = BASE_PATH + "/states/{state}/-/lock"

    async def do_GET(self, request: Request) -> Response:
        _, key = await self.key(request)
        summary = await self.summary(key)
        lock = summary.lock
        return json_response({"state": key.path, "locked": lock is not None,
                              "lock": None if lock is None else lock_document(lock, utcnow())})


class StateEventsResource(StateSubresource):
    route = BASE_PATH + "/states/{state}/-/events"

    async def do_GET(self, request: Request) -> Response:
        principal, key = await self.key(request)
        return await self.events(request, principal, key.path)


class RollbackResource(StateSubresource):
    """Restore version N as a new current version: its content with the
    current lineage and the current serial + 1, audited as C{state_rollback}."""

    route = BASE_PATH + "/states/{state}/-/rollback"

    async def do_POST(self, request: Request) -> Response:
        principal, key = await self.key(request, write=True)
        body = await read_body(request, self.lane.reactor)
        number = _rollback_version(body)
        summary = await self.summary(key)
        current = summary.current
        if current is None:
            raise VersionNotFound(f"the state has no version {number}")
        raw = await self.version_bytes(key, number)
        lock_id = _arg(request, "ID") or None

        def prepare() -> Any:
            return prepare_upload(restore_body(raw, current.serial + 1, current.lineage))

        upload = await in_thread_if_large(self.lane.reactor, len(raw), prepare)
        try:
            outcome = await self.lane.store.write_state(
                key, upload, lock_id, principal, event_kind=STATE_ROLLBACK,
                event_detail={"restored_version": number})
        except LockConflict as error:
            return locked_response(error, request)
        metrics = site_metrics(request)
        if outcome.created and metrics is not None:
            metrics.writes.inc()
            metrics.bytes_stored.inc(outcome.version.size)
        return json_response({"state": key.path, "restoredFrom": number,
                              "version": version_document(outcome.version, current=True)})


def _rollback_version(body: bytes) -> int:
    try:
        document = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        document = None
    number = document.get("version") if isinstance(document, dict) else None
    if not isinstance(number, int) or isinstance(number, bool) or number < 1:
        raise BadRequest('the body must be {"version": N}: the number of the version to'
                         " restore (see /-/versions)")
    return number


class ResourceSearchResource(NativeResource):
    """Resources across the tenant's states, answered from the projection."""

    route = BASE_PATH + "/resources"

    async def do_GET(self, request: Request) -> Response:
        principal = await self.principal(request)
        state = _arg(request, "state")
        state_path = self.key_of_text(principal, state).path if state else None
        query = _resource_query(request, state_path=state_path,
                                path_prefix=scope_prefix(principal))
        matches = await self.lane.store.query_resources(principal.tenant, query)
        return json_response({"resources": [match_document(m) for m in matches],
                              "truncated": len(matches) >= query.limit})


class EventListResource(NativeResource):
    route = BASE_PATH + "/events"

    async def do_GET(self, request: Request) -> Response:
        principal = await self.principal(request)
        state = _arg(request, "state")
        state_path = self.key_of_text(principal, state).path if state else None
        return await self.events(request, principal, state_path)


class EventVerifyResource(NativeResource):
    """The tenant's whole chain, checked link by link on the server."""

    route = BASE_PATH + "/events/verify"

    async def do_GET(self, request: Request) -> Response:
        principal = await self.principal(request)
        events = await self.lane.store.list_events(principal.tenant)
        broken = verify_chain(events)
        return json_response({
            "verified": broken is None,
            "events": len(events),
            "headSeq": events[-1].seq if events else 0,
            "headHash": events[-1].hash if events else None,
            "firstBrokenSeq": None if broken is None else broken.seq,
        })


# -- routing -----------------------------------------------------------------------


_STATE_ROUTES: dict[str, type[StateSubresource]] = {
    "versions": VersionListResource,
    "diff": DiffResource,
    "outputs": OutputsResource,
    "resources": StateResourcesResource,
    "lock": LockStatusResource,
    "events": StateEventsResource,
    "rollback": RollbackResource,
}

_NO_ROUTE = ("no such route: a state is /v1/native/states/{name} or"
             " /v1/native/states/{workspace_id}/{env_public_id}/{state_name}, followed by"
             " /-/versions, /-/versions/{n}, /-/diff, /-/outputs, /-/resources, /-/lock,"
             " /-/events or /-/rollback")


def route_state(lane: StateLane, raw_segments: list[bytes]) -> Resource:
    """The resource for the segments after C{/v1/native/states/}."""
    try:
        segments = [validate_segment(raw) for raw in raw_segments]
    except InvalidPath as error:
        return ErrorResource(error)
    split = next((i for i in (1, 3) if len(segments) > i and segments[i] == MARKER), None)
    address_segments = segments if split is None else segments[:split]
    parsed = parse_state_segments([s.encode() for s in address_segments],
                                  allow_lock_suffix=False)
    if parsed is None:
        return ErrorResource(NotFound(_NO_ROUTE))
    address = parsed[0]
    if split is None:
        return StateSummaryResource(lane, address)
    rest = segments[split + 1:]
    if len(rest) == 1 and rest[0] in _STATE_ROUTES:
        return _STATE_ROUTES[rest[0]](lane, address)
    if len(rest) == 2 and rest[0] == "versions":
        if not rest[1].isdigit() or int(rest[1]) < 1:
            return ErrorResource(NotFound("version numbers are whole numbers from 1"))
        return VersionResource(lane, address, int(rest[1]))
    return ErrorResource(NotFound(_NO_ROUTE))


class _Consumer(Resource):
    """Hands every remaining segment to C{route} (or C{leaf} when there are none)."""

    def __init__(self, leaf: Callable[[], Resource],
                 route: Callable[[list[bytes]], Resource]) -> None:
        super().__init__()
        self.leaf = leaf
        self.route = route

    def getChild(self, path: bytes, request: Request) -> Resource:
        raw_segments = consume_segments(path, request)
        if raw_segments == [b""]:
            return self.leaf()
        return self.route(raw_segments)

    def render(self, request: Request) -> Any:
        return self.leaf().render(request)


def _not_found(_: list[bytes]) -> Resource:
    return ErrorResource(NotFound("no such route"))


class NativeRoot(Resource):
    """C{/v1/native}: the lane document and its collections."""

    def __init__(self, lane: StateLane) -> None:
        super().__init__()
        self.putChild(b"states", _Consumer(lambda: StateListResource(lane),
                                           lambda segments: route_state(lane, segments)))
        self.putChild(b"resources", _Consumer(lambda: ResourceSearchResource(lane), _not_found))
        self.putChild(b"events", _Consumer(
            lambda: EventListResource(lane),
            lambda segments: (EventVerifyResource(lane) if segments == [b"verify"]
                              else _not_found(segments))))

    def getChild(self, path: bytes, request: Request) -> Resource:
        if path == b"" and not request.postpath:
            return NativeIndexResource()
        return ErrorResource(NotFound("no such route"))

    def render(self, request: Request) -> Any:
        return NativeIndexResource().render(request)

