"""What every part of L{kilolock.store.memory.store.MemoryStateStore} shares: the
rule that what a part keeps itself is in the tables (dicts) it makes itself,
its C{init=False} fields, and that forgetting empties exactly those."""

from __future__ import annotations

from typing import Any, cast

from attrs import fields

__all__ = ["MemoryPart"]


class MemoryPart:
    """A base for the memory store's attrs parts."""

    __slots__ = ()

    def forget(self) -> None:
        """Empty every table this part made itself (its C{init=False}
        fields); what it was given (the store's states) it leaves."""
        for attribute in fields(cast(Any, type(self))):
            if not attribute.init:
                getattr(self, attribute.name).clear()
