"""Pairing the resources of the state a view was sent with the current
version's.  Pure: no Twisted, no I/O.

Terraform sorts a state's resources (module, mode, type, name:
C{sortResourcesV4} in statefile/version4.go), so the view's state and the
current version list them in one order and, apart from the few a merge is
about, with the same text.  L{pair} walks both lists side by side comparing
texts in blocks (C{bytes.startswith} at each resource's place in the
current version, which L{MainText} knows from its index: no step of Python
per resource, no copy of the version), and reads a resource's address only
where texts differ.  States whose resources are not in that order are
paired by address instead.
"""

from __future__ import annotations

import operator

from attrs import define, field

from kilolock.core.errors import InvalidState
from kilolock.reservations.index import StateIndex, index_state
from kilolock.reservations.model import ResourceId
from kilolock.reservations.resources import Piece, ResourceReader
from kilolock.reservations.text import SplitState, split_state

__all__ = ["MainText", "Pairing", "pair"]

#: How many resources' texts are compared at once.
_BLOCK = 256


class MainText:
    """Main's bytes with its index: the one given when it is of these bytes
    (their length, their SHA-256 when both are known, and resource texts
    where it places them), else one made from the bytes and C{base}'s
    digests."""

    def __init__(self, raw: bytes, index: StateIndex | None, base: StateIndex,
                 sha256: str | None = None) -> None:
        if (index is None or index.size != len(raw)
                or (sha256 is not None and index.sha256 not in (None, sha256))
                or not _starts_agree(raw, index)):
            index = index_state(raw, base, sha256)
        self.raw = raw
        self.index = index
        self._view = memoryview(raw)
        self._pieces: list[Piece] | None = None
        if index.offsets is None:
            self._pieces = split_state(raw).pieces

    def piece(self, position: int) -> Piece:
        if self._pieces is not None:
            return self._pieces[position]
        assert self.index.offsets is not None
        start = self.index.offsets[position]
        return self._view[start:start + self.index.lengths[position]]

    def equal_run(self, position: int, texts: list[Piece]) -> int:
        """How many of C{texts} are, from the first, the texts of main's
        resources from C{position} on.  (A text that starts where main's
        resource starts is that resource: no JSON object's text begins
        with another's.)"""
        if self._pieces is not None:
            same = list(map(operator.eq, texts, self._pieces[position:position + len(texts)]))
        else:
            assert self.index.offsets is not None
            same = list(map(self.raw.startswith, map(bytes, texts),
                            self.index.offsets[position:position + len(texts)]))
        try:
            return same.index(False)
        except ValueError:
            return len(same)

    def run(self, start: int, stop: int) -> list[Piece]:
        """The text of resources C{start} to C{stop} (excluded), with what
        separates them in main: one slice when main's offsets are known."""
        if self._pieces is not None:
            return list(self._pieces[start:stop])
        offsets, lengths = self.index.offsets, self.index.lengths
        assert offsets is not None
        return [self._view[offsets[start]:offsets[stop - 1] + lengths[stop - 1]]]


def _starts_agree(raw: bytes, index: StateIndex) -> bool:
    """A cheap check that an index given is of these bytes (the store
    keeps an index with its version): resource texts it places start and
    end as an object does (every 64th, the first and the last)."""
    if index.offsets is None:
        return True
    count = len(index.offsets)
    sample = {*range(0, count, 64), count - 1} if count else set()
    return all(raw[index.offsets[at]] == 0x7B
               and raw[index.offsets[at] + index.lengths[at] - 1] == 0x7D for at in sample)


@define
class Pairing:
    """How the view's resources pair with main's.

    @ivar equal: for each of the view's resources, the position of main's
        resource with the same text (-1: none).
    @ivar touched: each resource whose texts differ or that one side lacks:
        its position in the view's state and in main's (None: not there).
    @ivar theirs_ordered: whether the view's resources are in Terraform's
        order, each once.
    """

    equal: list[int]
    touched: dict[ResourceId, tuple[int | None, int | None]] = field(factory=dict)
    theirs_ordered: bool = False


def pair(split: SplitState, main: MainText, reader: ResourceReader) -> Pairing:
    """Pair each of the view's resources (C{split}) with main's (see the
    module's docstring).

    @raise InvalidState: the view's state lists a resource twice, or one is
        not a resource.
    """
    pieces = split.pieces
    ids = main.index.resources
    pairing = Pairing([-1] * len(pieces))
    equal, touched = pairing.equal, pairing.touched
    headers: dict[int, ResourceId] = {}
    i = j = 0
    while i < len(pieces) and j < len(ids):
        same = main.equal_run(j, pieces[i:i + _BLOCK])
        equal[i:i + same] = range(j, j + same)
        i, j = i + same, j + same
        if same == _BLOCK or i == len(pieces) or j == len(ids):
            continue
        resource = headers[i] = reader.header(pieces[i], i)
        if resource == ids[j]:
            touched[resource] = (i, j)
            i, j = i + 1, j + 1
        elif resource < ids[j]:
            touched[resource] = (i, None)
            i += 1
        else:
            touched[ids[j]] = (None, j)
            j += 1
    for rest in range(i, len(pieces)):
        resource = headers[rest] = reader.header(pieces[rest], rest)
        touched[resource] = (rest, None)
    for rest in range(j, len(ids)):
        touched[ids[rest]] = (None, rest)
    if main.index.ordered and _ordered(equal, ids, headers):
        pairing.theirs_ordered = True
        return pairing
    return _pair_by_address(split, main, reader)


def _ordered(equal: list[int], ids: list[ResourceId], headers: dict[int, ResourceId]) -> bool:
    """Whether the view's resources are in Terraform's order, each once
    (those equal to main's follow main's order: only the others are
    looked at, with their neighbours)."""

    def at(position: int) -> ResourceId:
        j = equal[position]
        return ids[j] if j >= 0 else headers[position]

    last = len(equal) - 1
    for position in headers:
        if position > 0 and not at(position - 1) < at(position):
            return False
        if position < last and not at(position) < at(position + 1):
            return False
    return True


def _pair_by_address(split: SplitState, main: MainText, reader: ResourceReader) -> Pairing:
    """Pairing for states whose resources are not in Terraform's order."""
    pairing = Pairing([-1] * len(split.pieces))
    main_positions = {resource: position for position, resource in enumerate(main.index.resources)}
    seen: set[ResourceId] = set()
    for i, piece in enumerate(split.pieces):
        resource = reader.header(piece, i)
        if resource in seen:
            raise InvalidState(f"resources[{i}] repeats a resource listed before it")
        seen.add(resource)
        j = main_positions.get(resource)
        if j is not None and main.equal_run(j, [piece]):
            pairing.equal[i] = j
        else:
            pairing.touched[resource] = (i, j)
    for resource, j in main_positions.items():
        if resource not in seen:
            pairing.touched[resource] = (None, j)
    return pairing
