"""A slice of a state on the native API (L{kilolock.tfstate.slice}):

  GET /v1/native/states/{state}/-/slice?module=&type=&address=&outputs=true
        [&version=N][&format=state|projection]

C{module}, C{type} and C{address} may be repeated (alternatives); kinds
combine.  C{format=state} (the default) answers a v4 state document holding
exactly the selected resources as stored (and the outputs with
C{outputs=true}); C{format=projection} the projected rows, sensitive values
redacted -- the only slice an outputs-only token may read, and only of the
outputs.  Read from the stored bytes one resource at a time, in a thread
for large states.
"""

from __future__ import annotations

from twisted.web.server import Request

from kilolock.core.errors import InvalidField
from kilolock.tfstate.address import InvalidAddress, Target, parse_address
from kilolock.tfstate.slice import Selector, slice_document, slice_projection
from kilolock.web.body import in_thread_if_large
from kilolock.web.documents import NO_STORE, json_response
from kilolock.web.native import BASE_PATH
from kilolock.web.native.parameters import number_arg, text_arg
from kilolock.web.native.resource import StateSubresource
from kilolock.web.query import query_each
from kilolock.web.resource import JSON, Response, render_async

#: At most this many criteria in one slice.
MAX_CRITERIA = 100
FORMATS = ("state", "projection")


def _targets(request: Request, name: str) -> tuple[Target, ...]:
    found = []
    for value in query_each(request, name, MAX_CRITERIA):
        try:
            found.append(parse_address(value))
        except InvalidAddress as error:
            raise InvalidField(name, f"{name}: {error.message}") from None
    return tuple(found)


def selector_of(request: Request) -> Selector:
    """The L{Selector} a request's query names.

    @raise InvalidField: a parameter's value is not one it takes (naming it).
    @raise InvalidText: a value breaks a text rule (naming the parameter).
    @raise kilolock.core.errors.BadRequest: nothing is selected."""
    outputs = text_arg(request, "outputs")
    if outputs not in (None, "", "true", "false"):
        raise InvalidField("outputs", "outputs is true or false")
    return Selector(modules=_targets(request, "module"),
                    types=tuple(dict.fromkeys(query_each(request, "type", MAX_CRITERIA))),
                    addresses=_targets(request, "address"), outputs=outputs == "true")


class SliceResource(StateSubresource):
    """C{GET .../-/slice}: part of a version of the state."""

    route = BASE_PATH + "/states/{state}/-/slice"

    @render_async
    async def render_GET(self, request: Request) -> Response:
        selector = selector_of(request)
        form = text_arg(request, "format") or "state"
        if form not in FORMATS:
            raise InvalidField("format", "format is state or projection")
        outputs_only = form == "projection" and not selector.selects_resources
        _, key = await self.lane.authorize_state(request, self.segments, outputs=outputs_only)
        number = number_arg(request, "version") or await self.current_number(key)
        raw = await self.version_bytes(key, number)
        version = str(number).encode()
        if form == "state":
            body = await in_thread_if_large(self.lane.reactor, len(raw), slice_document, raw,
                                            selector)
            return Response(200, body, JSON, {**NO_STORE, b"X-Kilolock-Version": version})
        document = await in_thread_if_large(self.lane.reactor, len(raw), slice_projection,
                                            raw, selector)
        return json_response({"state": key.path, "version": number, **document})


