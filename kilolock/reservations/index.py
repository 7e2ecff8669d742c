"""A state's resources as digests: what a merge compares instead of whole
states.  Pure: no Twisted, no I/O; a large state is indexed in a thread.

L{index_state} reads a v4 state's bytes once (L{kilolock.reservations.text})
and keeps, per resource, in the state's order (L{ResourceEntry}):

  - the digest of its JSON text exactly as stored (two resources with the
    same text are the same resource, unchanged: nothing more is read);
  - the digest of its metadata (C{provider}, the legacy C{each});
  - per instance object (the current one and each deposed one, by index
    key and deposed key), the digest of the object's canonical form
    (L{kilolock.reservations.canonical}: a state written by another
    Terraform version, or with other whitespace, indexes its unchanged
    objects to the same digests);
  - where its text starts in the bytes indexed (so a merge can splice the
    state without reading it again);

and the state's lineage, serial, Terraform version, and its C{outputs} and
C{check_results} as JSON text.  An index is a few percent of its state
(about 116 bytes a resource); L{StateIndex.to_bytes} and
L{StateIndex.from_bytes} store it.  With C{previous} (the index of a
related version), resources whose text is unchanged take their digests from
it, and only the others are decoded.

What a reservation claims is checked against an index: that it names what
the state has (L{check_claims_exist}), and whether the state changed under
it since the reservation's snapshot (L{changed_claims}).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import msgspec

from kilolock.core.errors import Conflict, InvalidState
from kilolock.reservations.canonical import raw_digest
from kilolock.reservations.model import (
    AddressSet,
    Claim,
    ReservationSets,
    ResourceId,
    UnitId,
)
from kilolock.reservations.resources import ResourceEntry, ResourceReader, objects_by_unit
from kilolock.reservations.text import read_top, resource_offsets, split_state
from kilolock.tfstate.address import Key, format_module, parse_module_path

__all__ = ["ClaimNotInState", "StateIndex", "changed_claims", "check_claims_exist",
           "index_state"]


class _Stored(msgspec.Struct, array_like=True, gc=False):
    lineage: str
    serial: int
    terraform_version: str | None
    size: int
    outputs: bytes
    check_results: bytes
    resources: list[tuple[str, str, str, str]]
    entries: list[ResourceEntry]
    offsets: list[int] | None
    lengths: list[int]
    sha256: str | None = None


_STORED_ENCODER = msgspec.msgpack.Encoder()
_STORED_DECODER = msgspec.msgpack.Decoder(_Stored)


class StateIndex:
    """The index of one version's bytes (see the module's docstring).

    @ivar resources: each resource, in the state's order.
    @ivar entries: what is kept of each (in the same order).
    @ivar offsets: where each one's text starts in the bytes indexed, or
        None when unknown.
    @ivar lengths: the length of each one's text.
    @ivar size: the length of the bytes indexed.
    @ivar outputs: the C{outputs} member's JSON text (C{b"{}"} if none).
    @ivar check_results: the C{check_results} member's JSON text
        (C{b"null"} if none).
    @ivar sha256: the SHA-256 (hex) of the bytes indexed, when known.
    """

    def __init__(self, lineage: str, serial: int, terraform_version: str | None,
                 resources: list[ResourceId], entries: list[ResourceEntry],
                 offsets: list[int] | None, lengths: list[int], size: int,
                 outputs: bytes, check_results: bytes, ordered: bool | None = None,
                 sha256: str | None = None) -> None:
        self.lineage = lineage
        self.serial = serial
        self.terraform_version = terraform_version
        self.resources = resources
        self.entries = entries
        self.offsets = offsets
        self.lengths = lengths
        self.size = size
        self.outputs = outputs
        self.check_results = check_results
        self.sha256 = sha256
        self._positions: dict[ResourceId, int] | None = None
        self._by_raw: dict[bytes, int] | None = None
        self._ordered = ordered

    @property
    def ordered(self) -> bool:
        """Whether the resources are in Terraform's order (module, mode,
        type, name: C{sortResourcesV4}), each once."""
        if self._ordered is None:
            self._ordered = all(a < b for a, b in itertools.pairwise(self.resources))
        return self._ordered

    def __repr__(self) -> str:
        return (f"<StateIndex lineage={self.lineage} serial={self.serial}"
                f" resources={len(self.resources)}>")

    def position(self, resource: ResourceId) -> int | None:
        """Where C{resource} is in the state's order (None: not there)."""
        if self._positions is None:
            self._positions = {found: index for index, found in enumerate(self.resources)}
        return self._positions.get(resource)

    def entry(self, resource: ResourceId) -> ResourceEntry | None:
        position = self.position(resource)
        return None if position is None else self.entries[position]

    def by_raw(self, digest: bytes) -> int | None:
        """The position of the resource whose text has C{digest}."""
        if self._by_raw is None:
            self._by_raw = {entry.raw: index for index, entry in enumerate(self.entries)}
        return self._by_raw.get(digest)

    def instances(self) -> Iterator[tuple[ResourceId, Key, str]]:
        """Every object: (resource, index key, deposed key or C{""})."""
        for resource, entry in zip(self.resources, self.entries, strict=True):
            for key, deposed, _ in entry.objects:
                yield resource, key, deposed

    def to_bytes(self) -> bytes:
        """The index as bytes (msgpack), for L{from_bytes}."""
        return _STORED_ENCODER.encode(_Stored(
            self.lineage, self.serial, self.terraform_version, self.size, self.outputs,
            self.check_results, list(self.resources), self.entries, self.offsets,
            self.lengths, self.sha256))

    @classmethod
    def from_bytes(cls, data: bytes) -> StateIndex:
        stored = _STORED_DECODER.decode(data)
        return cls(stored.lineage, stored.serial, stored.terraform_version,
                   stored.resources, stored.entries, stored.offsets, stored.lengths,
                   stored.size, stored.outputs, stored.check_results, sha256=stored.sha256)


def index_state(raw: bytes, previous: StateIndex | None = None,
                sha256: str | None = None) -> StateIndex:
    """Index a stored v4 state (see the module's docstring).

    @param previous: the index of a related version: resources whose text
        it has are not decoded again.
    @param sha256: the SHA-256 (hex) of C{raw}, when the caller knows it
        (a stored version's): kept in the index, naming what it is of.
    @raise EncryptedState: C{raw} is an OpenTofu encrypted envelope.
    @raise InvalidState: C{raw} is not a v4 state, or it lists a resource
        twice.
    """
    split = split_state(raw)
    lineage, serial, terraform_version = read_top(split)
    reader = ResourceReader()
    resources: list[ResourceId] = []
    entries: list[ResourceEntry] = []
    for position, piece in enumerate(split.pieces):
        digest = raw_digest(piece)
        known = previous.by_raw(digest) if previous is not None else None
        if known is not None:
            assert previous is not None
            resources.append(previous.resources[known])
            entries.append(previous.entries[known])
            continue
        decoded = reader.read(piece, position, digest)
        resources.append(decoded.id)
        entries.append(decoded.entry())
    index = StateIndex(lineage, serial, terraform_version, resources, entries,
                       resource_offsets(raw, split), [len(piece) for piece in split.pieces],
                       len(raw),
                       split.members.get("outputs", b"{}"),
                       split.members.get("check_results", b"null"), sha256=sha256)
    _check_unique(index)
    return index


def _check_unique(index: StateIndex) -> None:
    if len({*index.resources}) != len(index.resources):
        seen: set[ResourceId] = set()
        for position, resource in enumerate(index.resources):
            if resource in seen:
                raise InvalidState(f"resources[{position}] repeats a resource listed before it")
            seen.add(resource)


# -- claims and the state --------------------------------------------------------


class ClaimNotInState(Conflict):
    """(409) A claim names an instance the state does not have."""

    code = "address_not_in_state"

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field

    def details(self) -> dict[str, Any]:
        return {"field": self.field}


def check_claims_exist(sets: ReservationSets, index: StateIndex,
                       fields: tuple[str, str] = ("write", "read")) -> None:
    """Return if every claim of C{sets} names something C{index}'s state
    has -- an instance (a current or deposed object of it), a resource with
    an instance, a module with a resource -- except write claims marked
    C{create}.

    @param fields: how the body names the write and the read set.
    @raise ClaimNotInState: naming the first claim that does not, by its
        field and position.
    """
    units: set[UnitId] = set()
    deposed: set[tuple[UnitId, str]] = set()
    resources: set[ResourceId] = set()
    modules: set[str] = set()
    for resource, key, deposed_key in index.instances():
        unit = (*resource, key)
        units.add(unit)
        if deposed_key:
            deposed.add((unit, deposed_key))
        resources.add(resource)
        module = resource[0]
        while module and module not in modules:
            modules.add(module)
            module = _parent_module(module)
    for field, claims in zip(fields, (sets.write, sets.read), strict=True):
        _check_set(field, claims, units, deposed, resources, modules)


def _check_set(field: str, claims: AddressSet, units: set[UnitId],
               deposed: set[tuple[UnitId, str]], resources: set[ResourceId],
               modules: set[str]) -> None:
    for position, claim in enumerate(claims):
        if claim.create:
            continue
        target = claim.target
        if target.is_module:
            found = target.module_text in modules
        else:
            assert target.mode is not None and target.type is not None
            assert target.name is not None
            resource = (target.module_text, target.mode, target.type, target.name)
            unit = (*resource, target.key)
            if claim.deposed is not None:
                found = (unit, claim.deposed) in deposed
            elif target.keyed:
                found = unit in units
            else:
                found = resource in resources
        if not found:
            hint = "" if claim.deposed is not None or field != "write" else (
                ' (mark it {"address": ..., "create": true} if the plan creates it)')
            raise ClaimNotInState(f"{field}[{position}]",
                                  f"{field}[{position}]: {claim} is not in the state{hint}")


def _parent_module(module: str) -> str:
    """The module path one step up (C{""} from a first-level module)."""
    steps = parse_module_path(module)
    return format_module(steps[:-1])


def changed_claims(sets: ReservationSets, base: StateIndex, main: StateIndex
                   ) -> tuple[Claim, ...]:
    """The claims of C{sets} naming something that changed between the
    reservation's pinned snapshot (C{base}) and the current version
    (C{main}): an instance's objects (added, removed, changed), or, for a
    claim on a whole resource or a module, the resource's metadata.
    Claiming them now would make a plan made on the snapshot stale: the
    answer is to plan again."""
    changed: set[UnitId] = set()
    changed_headers: set[ResourceId] = set()
    for resource in {*base.resources, *main.resources}:
        before, after = base.entry(resource), main.entry(resource)
        if before is not None and after is not None and before.raw == after.raw:
            continue
        units_before, units_after = objects_by_unit(before), objects_by_unit(after)
        changed.update((*resource, key) for key in {*units_before, *units_after}
                       if units_before.get(key) != units_after.get(key))
        if (before is None) != (after is None) or (
                before is not None and after is not None and before.header != after.header):
            changed_headers.add(resource)
    found: list[Claim] = []
    for claims in (sets.write, sets.read):
        for claim in claims:
            single = AddressSet((claim,))
            if any(single.covers_instance(unit[:4], unit[4]) for unit in changed) or any(
                    single.covers_resource(resource) for resource in changed_headers):
                found.append(claim)
    return tuple(found)
