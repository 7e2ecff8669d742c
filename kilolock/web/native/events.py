"""The audit trail on the native API: C{/v1/native/events} (paged and
filtered, a scoped token seeing only its own states' events) and
C{/v1/native/events/verify} (the tenant's hash chain, checked against its
recorded head and a pinned one) and C{/v1/native/events/head} (the head)."""

from __future__ import annotations

from twisted.web.server import Request

from kilolock.core.model import Principal
from kilolock.rules.event_pages import EventPageQuery
from kilolock.rules.scope import in_scope, scope_prefix
from kilolock.web.chain import check_tenant_chain, pinned_head
from kilolock.web.documents import event_document, json_response
from kilolock.web.lane import StateLane
from kilolock.web.native import BASE_PATH
from kilolock.web.native.parameters import number_arg, state_arg, time_arg
from kilolock.web.native.resource import Collection, NativeResource
from kilolock.web.query import query_values
from kilolock.web.resource import Response, render_async

#: Events answered per page unless C{limit} says otherwise, and at most.
DEFAULT_EVENT_PAGE = 1000
MAX_EVENT_PAGE = 10000


async def events_response(lane: StateLane, request: Request, principal: Principal,
                          state_path: str | None) -> Response:
    """The principal's events (of one state, or of all it may see), filtered by
    C{?kind=&since=&until=&after=} and paged by C{?limit=} or C{?last=}.

    A page the store can choose on its own (no time range, at most one kind,
    a scope it can say as a path prefix: every principal but a CI identity)
    is read as a window of the chain (L{IStateStore.list_events_page}), so
    it costs what the page holds; any other is filtered from the whole list.

    @return: (awaited) the JSON answer: C{events}, C{more}, C{next}, C{scoped}.
    """
    kinds = query_values(request, "kind") or None
    since, until = time_arg(request, "since"), time_arg(request, "until")
    after = number_arg(request, "after", minimum=0)
    last = number_arg(request, "last", maximum=MAX_EVENT_PAGE)
    limit = number_arg(request, "limit", maximum=MAX_EVENT_PAGE) or DEFAULT_EVENT_PAGE
    if since is None and until is None and principal.oidc is None and (
            kinds is None or len(kinds) == 1):
        window = EventPageQuery(
            limit=last if last is not None else limit + 1,
            after=None if last is not None else (after or 0),
            kind=None if kinds is None else kinds[0], state_path=state_path,
            path_prefix=scope_prefix(principal))
        found = await lane.store.list_events_page(principal.tenant, window)
        if last is not None:
            found = [event for event in reversed(found) if after is None or event.seq > after]
    else:
        found = await lane.store.list_events(principal.tenant, state_path=state_path,
                                             kinds=kinds, since=since, until=until)
        found = [event for event in found if in_scope(principal, event.state_path)]
        if after is not None:
            found = [event for event in found if event.seq > after]
    if last is not None:
        page, more = found[-last:], False
    else:
        page, more = found[:limit], len(found) > limit
    return json_response({
        "events": [event_document(event) for event in page],
        "more": more,
        "next": page[-1].seq if more else None,
        "scoped": scope_prefix(principal) is not None,
    })


class EventListResource(Collection):
    """C{GET /v1/native/events}: the tenant's events, or one state's (C{?state=})."""

    route = BASE_PATH + "/events"

    def __init__(self, lane: StateLane) -> None:
        super().__init__(lane)
        self.putChild(b"verify", EventVerifyResource(lane))
        self.putChild(b"head", EventHeadResource(lane))

    @render_async
    async def render_GET(self, request: Request) -> Response:
        principal = await self.lane.authorize(request)
        key = state_arg(request, principal)
        return await events_response(self.lane, request, principal,
                                     None if key is None else key.path)


class EventVerifyResource(NativeResource):
    """The tenant's whole chain, checked link by link on the server against
    the head the store recorded and a head pinned with C{?head=SEQ:HASH}."""

    route = BASE_PATH + "/events/verify"

    @render_async
    async def render_GET(self, request: Request) -> Response:
        principal = await self.lane.authorize(request)
        check = await check_tenant_chain(self.lane.store, principal.tenant,
                                         pinned_head(request))
        broken = check.broken
        return json_response({
            "verified": broken is None,
            "events": len(check.events),
            "headSeq": check.head.seq,
            "headHash": check.head.hash if check.head.seq else None,
            "lastSeq": check.last_seq,
            "truncated": check.truncated,
            "pinnedHead": None if check.pinned is None else str(check.pinned),
            "firstBrokenSeq": None if broken is None else broken.seq,
            "problem": None if broken is None else broken.problem,
            "brokenHead": check.broken_head,
            "reason": None if broken is None else broken.reason(),
        })


class EventHeadResource(NativeResource):
    """C{GET /v1/native/events/head}: the tenant's chain head as the store
    recorded it, to pin outside Kilolock (C{kl events head})."""

    route = BASE_PATH + "/events/head"

    @render_async
    async def render_GET(self, request: Request) -> Response:
        principal = await self.lane.authorize(request)
        head = await self.lane.store.chain_head(principal.tenant)
        return json_response({"tenant": principal.tenant, "seq": head.seq, "hash": head.hash,
                              "head": str(head)})
