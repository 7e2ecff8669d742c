"""Values carried out of kilolock.store.memory.store.store."""

from __future__ import annotations

from datetime import datetime

from attrs import define, field

from kilolock.core.model import (
    HeldLock,
    Projection,
    StateVersion,
)


@define
class StoredVersion:
    """One version: its metadata, its bytes (None once only its tombstone
    is left) and, while it is current, its projection."""

    meta: StateVersion
    raw: bytes | None
    projection: Projection | None


@define
class StoredState:
    """One state: its versions, its lock."""

    created_at: datetime
    updated_at: datetime
    versions: list[StoredVersion] = field(factory=list)
    lock: HeldLock | None = None
    #: (serial, sha256) of every version: how an identical replay is found.
    written: dict[tuple[int, str], StateVersion] = field(factory=dict)

    @property
    def current(self) -> StoredVersion | None:
        return self.versions[-1] if self.versions else None
