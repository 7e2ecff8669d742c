"""What Kilolock learns about one request while answering it.

A twisted.web request is a L{Componentized}: it keeps one component per
interface for as long as it lives (twisted.web's sessions are kept the same
way).  Kilolock keeps one L{RequestContext} there: the route that answered,
who is calling and which state they address.  Resources fill it in; the
access log and the metrics of L{kilolock.web.request} read it when the
request is done.
"""

from __future__ import annotations

from attrs import define, field
from twisted.logger import Logger
from twisted.web.server import Request
from zope.interface import Interface, implementer

from kilolock.core.errors import Denied
from kilolock.core.model import Principal, StateKey

log = Logger(namespace="kilolock.auth.portal")

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
    #: Why the caller was refused (401/403), for the access log: a reason
    #: code (C{unknown_token}, C{read_only}, C{oidc_no_rule_matched}, ...).
    denied: str | None = None
    #: What else the log may say about the refusal (an OIDC token's issuer,
    #: identity and rules evaluated; never a secret).
    denied_fields: dict[str, str] = field(factory=dict)

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


def note_denial(request: Request, error: Denied) -> None:
    """Record why the request was refused (the access log names it), and
    log a refused CI token's details: its reason, the issuer, the rules
    evaluated and, once verified, who it is (never the token)."""
    context = context_of(request)
    context.denied = error.reason
    context.denied_fields = dict(error.log_fields)
    if error.log_fields:
        log.warn("refused a CI token ({status}): {oidc_refusal}", status=error.status,
                 oidc_refusal="; ".join(f"{key.removeprefix('oidc_')}={value}"
                                        for key, value in error.log_fields.items()),
                 request_id=getattr(request, "request_id", None), **error.log_fields)
