"""What Kilolock learns about one request while answering it.

A twisted.web request is a L{Componentized}: it keeps one component per
interface for as long as it lives (twisted.web's sessions are kept the same
way).  Kilolock keeps one L{RequestContext} there: the route that answered,
who is calling and which state they address.  Resources fill it in; the
access log and the metrics of L{kilolock.web.request} read it when the
request is done.
"""

from __future__ import annotations

from attrs import define
from twisted.web.server import Request
from zope.interface import Interface, implementer

from kilolock.model import Principal, StateKey

#: The route of a request no resource answered (an unknown path, a bad segment).
UNMATCHED = "unmatched"


class IRequestContext(Interface):
    """The per-request record of a Kilolock request (see L{RequestContext})."""


@implementer(IRequestContext)
@define
class RequestContext:
    """The route, the caller and the state of one request, as far as known."""

    #: The route template metrics and access logs name the request by, e.g.
    #: C{/v1/states/{state}} (never the concrete path: names are tenant data).
    route: str = UNMATCHED
    #: Who is calling, once authenticated.
    principal: Principal | None = None
    #: The state the request addresses, once the scope rule allowed it.
    key: StateKey | None = None

    @property
    def tenant(self) -> str | None:
        return None if self.principal is None else self.principal.tenant


def context_of(request: Request) -> RequestContext:
    """The request's context, created empty on first use."""
    found = request.getComponent(IRequestContext)
    if isinstance(found, RequestContext):
        return found
    context = RequestContext()
    request.setComponent(IRequestContext, context)
    return context
