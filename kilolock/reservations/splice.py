"""The merged version's text: main's, with the resources the merge changed
spliced in.  Pure: no Twisted, no I/O.

Main's resources that the merge leaves alone are copied as runs of its text
(one slice each, separators and all); the changed ones replace main's, and
the ones main lacks go to their place in Terraform's order (module, mode,
type, name).  The result is split again before it is returned, and must
give the resources it was built from, or L{MergeFailed} is raised: bytes
that do not read back are never stored.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kilolock.core.errors import EncryptedState, InvalidState
from kilolock.reservations.index import StateIndex
from kilolock.reservations.model import ResourceId
from kilolock.reservations.outcome import MergeFailed
from kilolock.reservations.pairing import MainText
from kilolock.reservations.render import FIRST_RESOURCE, NEXT_RESOURCE, state_head, state_tail
from kilolock.reservations.resources import ResourceEntry
from kilolock.reservations.text import read_top, split_state

__all__ = ["splice"]

#: Where a resource of the merged version comes from: a run of main's
#: resources (from, to), or a text with its index entry.
_Run = tuple[int, int]
_Item = _Run | tuple[bytes, ResourceEntry]


def _known(new: tuple[bytes, ResourceEntry] | None) -> tuple[bytes, ResourceEntry]:
    assert new is not None
    return new


def splice(main: MainText, replaced: Mapping[ResourceId, tuple[bytes, ResourceEntry] | None],
           terraform_version: str | None, serial: int, lineage: str, outputs: bytes,
           check_results: bytes) -> tuple[bytes, StateIndex]:
    """The merged version's bytes, and their index: main's resources in
    main's order with those in C{replaced} replaced by their text (None:
    dropped), the ones main lacks added at their place in Terraform's
    order; the other members as given.

    @raise MergeFailed: the text does not split into those resources.
    """
    ids = main.index.resources
    added = sorted(resource for resource, new in replaced.items()
                   if new is not None and main.index.position(resource) is None)
    in_order = main.index.ordered
    items: list[tuple[ResourceId, _Item]] = []
    start: int | None = None

    def close_run(stop: int) -> None:
        nonlocal start
        if start is not None:
            items.append((ids[start], (start, stop)))
            start = None

    waiting = list(reversed(added)) if in_order else []
    for j, resource in enumerate(ids):
        while waiting and waiting[-1] < resource:
            close_run(j)
            new_resource = waiting.pop()
            items.append((new_resource, _known(replaced[new_resource])))
        if resource in replaced:
            close_run(j)
            new = replaced[resource]
            if new is not None:
                items.append((resource, new))
        elif start is None:
            start = j
    close_run(len(ids))
    for resource in reversed(waiting) if in_order else added:
        items.append((resource, _known(replaced[resource])))
    if not in_order:
        items = _sorted_items(ids, items)
    raw, index = _write(main, items, terraform_version, serial, lineage, outputs, check_results)
    _verify(raw, index)
    return raw, index


def _sorted_items(ids: list[ResourceId], items: list[tuple[ResourceId, _Item]]
                  ) -> list[tuple[ResourceId, _Item]]:
    """Every resource on its own, in Terraform's order (main's were not)."""
    single: list[tuple[ResourceId, _Item]] = []
    for resource, item in items:
        if isinstance(item[0], int):
            start, stop = item
            single.extend((ids[j], (j, j + 1)) for j in range(start, stop))
        else:
            single.append((resource, item))
    return sorted(single, key=lambda pair: pair[0])


def _write(main: MainText, items: list[tuple[ResourceId, _Item]],
           terraform_version: str | None, serial: int, lineage: str, outputs: bytes,
           check_results: bytes) -> tuple[bytes, StateIndex]:
    """The state's text from its items, and its index."""
    main_index = main.index
    head = state_head(terraform_version, serial, lineage, outputs)
    chunks: list[Any] = [head]
    position = len(head)
    resources: list[ResourceId] = []
    entries: list[ResourceEntry] = []
    offsets: list[int] = []
    lengths: list[int] = []
    for resource, item in items:
        separator = NEXT_RESOURCE if resources else FIRST_RESOURCE
        chunks.append(separator)
        position += len(separator)
        if isinstance(item[0], int):
            start, stop = item
            main_offsets = main_index.offsets
            run = main.run(start, stop)
            if main_offsets is not None:
                shift = position - main_offsets[start]
                offsets.extend(map(shift.__add__, main_offsets[start:stop]))
                chunks.append(run[0])
                position += len(run[0])
            else:
                for count, piece in enumerate(run):
                    if count:
                        chunks.append(NEXT_RESOURCE)
                        position += len(NEXT_RESOURCE)
                    offsets.append(position)
                    chunks.append(piece)
                    position += len(piece)
            resources.extend(main_index.resources[start:stop])
            entries.extend(main_index.entries[start:stop])
            lengths.extend(main_index.lengths[start:stop])
        else:
            text, entry = item
            offsets.append(position)
            chunks.append(text)
            position += len(text)
            resources.append(resource)
            entries.append(entry)
            lengths.append(len(text))
    chunks.append(state_tail(check_results, len(resources)))
    raw = b"".join(chunks)
    index = StateIndex(lineage, serial, terraform_version, resources, entries, offsets,
                       lengths, len(raw), outputs, check_results, ordered=True)
    return raw, index


def _verify(raw: bytes, index: StateIndex) -> None:
    """Check the merged text splits into the resources it was built from."""
    try:
        split = split_state(raw)
        read_top(split)
    except (InvalidState, EncryptedState) as error:
        raise MergeFailed(f"the merged state does not read back: {error.message}") from None
    lengths = [len(piece) for piece in split.pieces]
    if lengths != index.lengths:
        raise MergeFailed("the merged state does not split into the resources it was built from")
