"""What a reservation claims: resource instances, in a write set and a read
set, and when two reservations' claims conflict.  Pure: no Twisted, no I/O.

A claim is a Terraform address as C{terraform state list} prints it
(L{kilolock.tfstate.address}), and it claims what C{-target} would:

    terraform_data.web["eu"]       one instance (with its deposed objects)
    terraform_data.web             the whole resource: every instance, and
                                   the resource's own metadata (provider)
    module.net["eu"]               everything in that module instance

A deposed object is claimed as Terraform's C{show -json} names it, by its
instance's address and its C{deposed} key; the unit of a merge is the
instance, so the claim covers the instance it belongs to.  A write claim may
say that the plan creates the instance (C{"create": true}): only such a
claim may name something the state does not have yet
(L{kilolock.reservations.index.check_claims_exist}).

In a body, a set is a JSON array whose entries are an address string or an
object::

    ["terraform_data.a", {"address": "terraform_data.d[0]", "deposed": "f35c23ed"},
     {"address": "module.new.terraform_data.x", "create": true}]

L{parse_claims} reads it; every problem is a 400 naming the field and the
entry's position (C{write[3]}), never the text.

Two reservations conflict when one's write set overlaps the other's write
set or read set (L{find_conflicts}); read sets may overlap.  Overlap is at
the instance: C{terraform_data.web} overlaps C{terraform_data.web[0]},
C{module.net} everything in it, two instances only when they are the same.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from attrs import field, frozen

from kilolock.core.errors import Conflict, InvalidField
from kilolock.tfstate.address import (
    MAX_ADDRESS_LENGTH,
    InvalidAddress,
    Key,
    Target,
    format_key,
    parse_address,
)

__all__ = ["MAX_CLAIMS", "AddressSet", "Claim", "InvalidClaim", "ReservationConflict",
           "ReservationSets", "ResourceId", "SetConflict", "SetName", "UnitId",
           "check_no_conflicts", "find_conflicts", "instance_address", "parse_claims",
           "resource_address"]

#: A resource of a state: its module path as Terraform spells it in a state
#: (C{""}: the root module), mode (C{managed} or C{data}), type and name.
ResourceId = tuple[str, str, str, str]
#: An instance of a resource (the unit of a merge): the resource and its key.
UnitId = tuple[str, str, str, str, Key]

#: The most entries one set may hold.
MAX_CLAIMS = 50_000


def resource_address(resource: ResourceId) -> str:
    """C{module.net.data.http.ip}, C{terraform_data.web}."""
    module, mode, type_, name = resource
    text = ("data." if mode == "data" else "") + f"{type_}.{name}"
    return f"{module}.{text}" if module else text


def instance_address(resource: ResourceId, key: Key) -> str:
    """The instance's address as C{terraform state list} prints it."""
    return resource_address(resource) + format_key(key)


class SetName(enum.StrEnum):
    """The two sets of a reservation."""

    WRITE = "write"
    READ = "read"


class InvalidClaim(InvalidField):
    """An entry of a set is not a claim (the field names the entry)."""

    code = "invalid_address"


@frozen
class Claim:
    """One entry of a set: an address, for a deposed object its key, and
    whether the plan creates what it names."""

    target: Target
    deposed: str | None = None
    create: bool = False

    def __str__(self) -> str:
        text = str(self.target)
        return text if self.deposed is None else f"{text} (deposed object {self.deposed})"

    def to_json(self) -> str | dict[str, Any]:
        """The entry as a body holds it (the form L{parse_claims} reads)."""
        if self.deposed is None and not self.create:
            return str(self.target)
        entry: dict[str, Any] = {"address": str(self.target)}
        if self.deposed is not None:
            entry["deposed"] = self.deposed
        if self.create:
            entry["create"] = True
        return entry


def _contains_module(outer: str, inner: str) -> bool:
    """Whether the module path C{inner} is C{outer} or below it (both as a
    state spells them; each step's text ends where the next C{.} starts)."""
    return inner == outer or inner.startswith(outer + ".")


class AddressSet:
    """A set of claims, indexed for the questions a merge and the conflict
    check ask.  Immutable once built."""

    def __init__(self, claims: Iterable[Claim] = ()) -> None:
        self.claims: tuple[Claim, ...] = tuple(dict.fromkeys(claims))
        self._instances: set[UnitId] = set()
        self._resources: set[ResourceId] = set()
        self._by_resource: dict[ResourceId, list[Claim]] = {}
        self._modules: list[tuple[str, Claim]] = []
        for claim in self.claims:
            target = claim.target
            if target.is_module:
                self._modules.append((target.module_text, claim))
                continue
            assert target.mode is not None and target.type is not None
            assert target.name is not None
            resource = (target.module_text, target.mode, target.type, target.name)
            self._by_resource.setdefault(resource, []).append(claim)
            if target.keyed:
                self._instances.add((*resource, target.key))
            else:
                self._resources.add(resource)

    def __iter__(self) -> Iterator[Claim]:
        return iter(self.claims)

    def __len__(self) -> int:
        return len(self.claims)

    def __bool__(self) -> bool:
        return bool(self.claims)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AddressSet) and set(self.claims) == set(other.claims)

    def __hash__(self) -> int:
        return hash(frozenset(self.claims))

    def __repr__(self) -> str:
        return f"AddressSet({[str(claim) for claim in self.claims]!r})"

    def union(self, other: AddressSet) -> AddressSet:
        """This set with C{other}'s claims added (a reservation widened)."""
        return AddressSet((*self.claims, *other.claims))

    def _in_module(self, module: str) -> bool:
        return any(_contains_module(outer, module) for outer, _ in self._modules)

    def covers_resource(self, resource: ResourceId) -> bool:
        """Whether the whole resource is claimed (its metadata with it): by
        its resource address or a module containing it."""
        return resource in self._resources or self._in_module(resource[0])

    def covers_instance(self, resource: ResourceId, key: Key) -> bool:
        """Whether the instance C{key} of C{resource} is claimed."""
        return ((*resource, key) in self._instances or resource in self._resources
                or self._in_module(resource[0]))

    def touches_resource(self, resource: ResourceId) -> bool:
        """Whether anything of the resource is claimed (any instance of it)."""
        return resource in self._by_resource or self._in_module(resource[0])

    def overlapping(self, other: AddressSet) -> list[tuple[Claim, Claim]]:
        """The pairs (a claim of this set, a claim of C{other}) that name a
        common instance (or could: a module, a whole resource)."""
        pairs: list[tuple[Claim, Claim]] = []
        for claim in self.claims:
            target = claim.target
            if target.is_module:
                module = target.module_text
                pairs.extend((claim, theirs) for theirs in other.claims
                             if _contains_module(module, theirs.target.module_text)
                             or (theirs.target.is_module
                                 and _contains_module(theirs.target.module_text, module)))
                continue
            assert target.mode is not None and target.type is not None
            assert target.name is not None
            resource = (target.module_text, target.mode, target.type, target.name)
            pairs.extend((claim, theirs) for outer, theirs in other._modules
                         if _contains_module(outer, resource[0]))
            for theirs in other._by_resource.get(resource, ()):
                if not (target.keyed and theirs.target.keyed) or target.key == theirs.target.key:
                    pairs.append((claim, theirs))
        return pairs


@frozen
class ReservationSets:
    """A reservation's two sets."""

    write: AddressSet = field(factory=AddressSet)
    read: AddressSet = field(factory=AddressSet)

    def sets(self) -> Iterator[tuple[SetName, AddressSet]]:
        yield SetName.WRITE, self.write
        yield SetName.READ, self.read

    def holds_instance(self, resource: ResourceId, key: Key) -> bool:
        """Whether either set claims the instance."""
        return (self.write.covers_instance(resource, key)
                or self.read.covers_instance(resource, key))

    def holds_resource(self, resource: ResourceId) -> bool:
        """Whether either set claims anything of the resource."""
        return self.write.touches_resource(resource) or self.read.touches_resource(resource)


@frozen
class SetConflict:
    """A claim of a reservation being made overlaps a claim another
    reservation (C{holder}) holds."""

    holder: str
    mine: Claim
    mine_set: SetName
    theirs: Claim
    theirs_set: SetName

    @property
    def reason(self) -> str:
        same = str(self.mine.target) == str(self.theirs.target)
        other = "" if same else f" ({self.theirs.target})"
        return (f"{self.mine.target} is in this reservation's {self.mine_set} set and in the"
                f" {self.theirs_set} set of reservation {self.holder}{other}")


class ReservationConflict(Conflict):
    """(409) A reservation's sets overlap another reservation's."""

    code = "reservation_conflict"

    def __init__(self, conflicts: tuple[SetConflict, ...]) -> None:
        shown = "; ".join(conflict.reason for conflict in conflicts[:5])
        more = f" (and {len(conflicts) - 5} more)" if len(conflicts) > 5 else ""
        super().__init__(f"reservation conflict: {shown}{more}")
        self.conflicts = conflicts

    def details(self) -> dict[str, Any]:
        return {"holders": sorted({conflict.holder for conflict in self.conflicts})}


def find_conflicts(claimed: ReservationSets,
                   held: Mapping[str, ReservationSets]) -> tuple[SetConflict, ...]:
    """The conflicts of the sets C{claimed} with the reservations C{held}
    (by id; the reservation being claimed for is not among them): a write
    claim overlapping another's write or read claim, a read claim
    overlapping another's write claim."""
    conflicts: list[SetConflict] = []
    for holder, sets in held.items():
        for mine_set, mine in claimed.sets():
            for theirs_set, theirs in sets.sets():
                if mine_set is SetName.READ and theirs_set is SetName.READ:
                    continue
                conflicts.extend(SetConflict(holder, a, mine_set, b, theirs_set)
                                 for a, b in mine.overlapping(theirs))
    return tuple(conflicts)


def check_no_conflicts(claimed: ReservationSets, held: Mapping[str, ReservationSets]) -> None:
    """Return if the sets C{claimed} conflict with none of C{held}.

    @raise ReservationConflict: naming each overlap and its holder.
    """
    conflicts = find_conflicts(claimed, held)
    if conflicts:
        raise ReservationConflict(conflicts)


# -- a set in a body -----------------------------------------------------------

_ENTRY_FIELDS = frozenset({"address", "deposed", "create"})
#: Terraform's deposed keys are 8 characters (states/statefile/version4.go).
_DEPOSED_LENGTH = 8


def parse_claims(value: Any, field: str, *, creates: bool = True) -> AddressSet:
    """Read the set C{value} (a decoded JSON array; None: empty), which
    the body holds as C{field} (C{"write"}, C{"read"}, C{"add_write"}, ...).

    @param creates: whether an entry may say C{"create": true} (a write set).
    @raise InvalidClaim: (400) naming C{field[N]} and what is wrong.
    """
    if value is None:
        return AddressSet()
    if not isinstance(value, list):
        raise InvalidClaim(field, f"{field} must be a JSON array of addresses")
    if len(value) > MAX_CLAIMS:
        raise InvalidClaim(field, f"{field} holds at most {MAX_CLAIMS} addresses")
    return AddressSet(_claim(entry, f"{field}[{position}]", creates)
                      for position, entry in enumerate(value))


def _claim(entry: Any, where: str, creates: bool) -> Claim:
    if isinstance(entry, str):
        return Claim(_target(entry, where))
    if not isinstance(entry, dict):
        raise InvalidClaim(where, f"{where} must be an address string or an object with an"
                                  " address")
    unknown = sorted(key for key in entry if key not in _ENTRY_FIELDS)
    if unknown:
        raise InvalidClaim(where, f"{where} has an unknown field (an entry has address,"
                                  " deposed and create)")
    address = entry.get("address")
    if not isinstance(address, str):
        raise InvalidClaim(f"{where}.address", f"{where}.address must be a string")
    target = _target(address, f"{where}.address")
    deposed = entry.get("deposed")
    if deposed is not None:
        if (not isinstance(deposed, str) or len(deposed) != _DEPOSED_LENGTH
                or not deposed.isascii() or not deposed.isprintable()):
            raise InvalidClaim(f"{where}.deposed", f"{where}.deposed must be a deposed key"
                                                   " (8 characters, as in a state)")
        if target.is_module:
            raise InvalidClaim(f"{where}.deposed", f"{where} names a deposed object of a"
                                                   " module: give a resource instance")
    create = entry.get("create", False)
    if not isinstance(create, bool):
        raise InvalidClaim(f"{where}.create", f"{where}.create must be true or false")
    if create and not creates:
        raise InvalidClaim(f"{where}.create", f"{where}: only a write set creates")
    if create and deposed is not None:
        raise InvalidClaim(f"{where}.create", f"{where}: a deposed object is never created")
    return Claim(target, deposed, create)


def _target(text: str, where: str) -> Target:
    if len(text) > MAX_ADDRESS_LENGTH:
        raise InvalidClaim(where, f"{where} is longer than {MAX_ADDRESS_LENGTH} characters")
    try:
        return parse_address(text)
    except InvalidAddress as error:
        raise InvalidClaim(where, f"{where}: {error.message}") from None
