"""Checking a tenant's audit chain on the server, for the native API
(C{/v1/native/events/verify}) and the control API
(C{/v1/api/tenants/{tenant}/events/verify}): every event, every link, the
head the store recorded, and a head the caller pinned (C{?head=SEQ:HASH}).
"""

from __future__ import annotations

from attrs import frozen
from twisted.web.server import Request

from kilolock.core.audit import TRUNCATED, ChainBreak, ChainHead, verify_chain
from kilolock.core.errors import InvalidField
from kilolock.core.events import AuditEvent
from kilolock.store.interfaces.states import IStateStore
from kilolock.web.query import field_error, query_value

#: The query parameter that pins a head.
PINNED_HEAD = "head"


@frozen
class ChainCheck:
    """What checking a tenant's chain found."""

    events: list[AuditEvent]
    #: The head the store recorded.
    head: ChainHead
    #: The head the caller pinned, if any.
    pinned: ChainHead | None
    broken: ChainBreak | None

    @property
    def last_seq(self) -> int:
        return self.events[-1].seq if self.events else 0

    @property
    def truncated(self) -> bool:
        """The chain ends before a head it must reach (its newest events are gone)."""
        return self.broken is not None and self.broken.problem == TRUNCATED

    @property
    def broken_head(self) -> str | None:
        """Which head broke the chain: C{"recorded"}, C{"pinned"}, or None."""
        if self.broken is None or self.broken.head is None:
            return None
        return "recorded" if self.broken.head == self.head else "pinned"


def pinned_head(request: Request) -> ChainHead | None:
    """The head C{?head=SEQ:HASH} pins, or None.

    @raise InvalidField: it is not C{SEQ:HASH}.
    """
    text = query_value(request, PINNED_HEAD, field_error)
    if not text:
        return None
    try:
        return ChainHead.parse(text)
    except ValueError as error:
        raise InvalidField(PINNED_HEAD, str(error)) from None


async def check_tenant_chain(store: IStateStore, tenant: str,
                             pinned: ChainHead | None) -> ChainCheck:
    """Check the tenant's whole chain against its recorded head (and
    C{pinned}) with L{verify_chain}.

    The head is read before the events: an event appended in between only
    extends the chain past it, which is fine.

    @return: (awaited) the L{ChainCheck}.
    """
    head = await store.chain_head(tenant)
    events = await store.list_events(tenant)
    heads = [head] if pinned is None else [head, pinned]
    return ChainCheck(events, head, pinned, verify_chain(events, heads=heads))
