"""The values of retention: what pruning one state did."""

from __future__ import annotations

from attrs import frozen

from kilolock.core.model import StateKey


@frozen
class PruneOutcome:
    """What pruning one state did: the numbers of the versions that are now
    tombstones, oldest first, and the stored bytes that went with them (the
    payloads as stored: compressed, and encrypted on PostgreSQL; raw bytes
    in memory)."""

    key: StateKey
    pruned: tuple[int, ...] = ()
    bytes_freed: int = 0
