"""The merge of a state Terraform sends to a reservation's view into the
state's current version.  Pure: no Twisted, no I/O; the store runs
L{merge_view_post} in a worker thread, inside the state's transaction.

Three states meet: the view's I{base} (the snapshot the reservation pinned,
advanced to each state the view has had accepted since), I{theirs} (the
state just sent) and I{main} (the state's current version).  The unit of
the merge is the resource instance -- module path, mode, type, name, index
key -- with all its objects, the current one and the deposed ones.  For each
instance, what theirs has compared with what the base had:

  - unchanged: main's is kept;
  - changed the way main changed it too: main's is kept (nothing to do);
  - a data source changed: theirs is taken (the last writer wins: a data
    source is a cache, read again by every plan);
  - a managed instance changed: theirs is taken -- an instance theirs lacks
    is removed -- when the reservation's write set claims it and main has
    not changed it since the base; otherwise the merge is refused, naming
    the instance and the rule (L{RefusalRule}).  With the C{AUTO_WIDEN}
    policy an instance outside the write set is taken too when no other
    reservation claims it and main has not changed it (L{Merged.auto_widened});
  - every object theirs writes is checked for a stale read: each managed
    resource its C{dependencies} name must not have changed in main since
    the base, or the object was computed from a value main no longer has.

A resource's own metadata (its C{provider}, the legacy C{each}) changed by
theirs needs the whole resource claimed.  A resource left without
instances is dropped, as Terraform drops it after an apply.  Outputs,
check results and the Terraform version are merged by
L{kilolock.reservations.derived} (never refused).  The merged version's
serial is main's + 1 and its lineage main's; theirs must have main's
lineage.  When theirs brings nothing main does not have (a replay of the
same state, a state that changed nothing) there is no new version
(L{Unchanged}).

What is read, for a state of N resources of which theirs changes a few:
theirs once, split into each resource's text by msgspec (the only pass
over all of it); main not at all when its index has where each resource
starts (L{Merged.index} has, for the next merge); each of theirs' resources
compared byte for byte with main's; only resources whose text differs from
main's decoded, on both sides, and compared object by object with the
base's digests (L{kilolock.reservations.index}).  The merged version is
main's text with those resources replaced (L{kilolock.reservations.render}),
the rest of it copied byte for byte, and it is checked to split into the
resources it was built from before it is returned.
"""

from __future__ import annotations

import enum
import hashlib
import json
import operator
from collections.abc import Mapping
from typing import Any

from attrs import define, field, frozen

from kilolock.core.errors import Conflict, EncryptedState, InvalidState
from kilolock.core.model import DependencyRow, OutputRow, ParsedState, Projection, ResourceRow
from kilolock.core.text import check_depth, clean_text
from kilolock.reservations.derived import (
    check_results_valid,
    higher_version,
    merge_check_results,
    merge_outputs,
)
from kilolock.reservations.index import (
    DecodedResource,
    Instance,
    Piece,
    ResourceEntry,
    ResourceReader,
    SplitState,
    StateIndex,
    index_state,
    objects_by_unit,
    raw_digest,
    read_top,
    split_state,
)
from kilolock.reservations.model import (
    AddressSet,
    ReservationSets,
    ResourceId,
    instance_address,
    resource_address,
)
from kilolock.reservations.render import (
    FIRST_RESOURCE,
    NEXT_RESOURCE,
    instance_order,
    render_resource,
    state_head,
    state_tail,
)
from kilolock.tfstate.address import (
    InvalidAddress,
    Key,
    ModuleStep,
    Target,
    parse_address,
    parse_module_path,
)
from kilolock.tfstate.parse import JSON_DECODER, parse_state
from kilolock.tfstate.projection import project_resource, project_state

__all__ = ["InstanceChange", "MergeFailed", "MergePolicy", "MergeRefused", "Merged",
           "ProjectionDelta", "Refusal", "RefusalRule", "Refused", "Unchanged",
           "merge_view_post"]


class MergePolicy(enum.StrEnum):
    """What a change outside the write set does."""

    #: It refuses the merge.
    STRICT = "strict"
    #: It is taken when no other reservation claims it and main has not
    #: changed it since the view's base; otherwise it refuses the merge.
    AUTO_WIDEN = "auto-widen"


class RefusalRule(enum.StrEnum):
    """Why a merge was refused."""

    #: An instance (or a resource's metadata) changed outside the write set.
    OUTSIDE_RESERVATION = "outside_reservation"
    #: Main changed an instance the view changed, since the view's base.
    CHANGED_IN_MAIN = "changed_in_main"
    #: An object the view writes depends on a resource main changed since
    #: the view's base.
    STALE_READ = "stale_read"
    #: The state sent is not of this state's lineage.
    LINEAGE_MISMATCH = "lineage_mismatch"
    #: The state sent, or the current version, is an OpenTofu encrypted
    #: state: Kilolock cannot read it.
    ENCRYPTED_STATE = "encrypted_state"
    #: The current version is not a state Kilolock can merge into.
    UNREADABLE_STATE = "unreadable_state"


@frozen
class Refusal:
    """One reason a merge was refused, in words a user can act on.

    @ivar address: the instance or resource at fault (None: the state).
    @ivar holders: for a change outside the reservation, the reservations
        that claim it.
    @ivar dependency: for a stale read, the dependency main changed.
    """

    rule: RefusalRule
    reason: str
    address: str | None = None
    holders: tuple[str, ...] = ()
    dependency: str | None = None


class MergeRefused(Conflict):
    """(409) A view's state was not merged (the reasons are stored with the
    reservation, for C{kl} to show: Terraform shows only the status)."""

    code = "merge_refused"

    def __init__(self, refused: Refused) -> None:
        super().__init__(refused.reason)
        self.refused = refused

    def details(self) -> dict[str, Any]:
        return {"rules": sorted({refusal.rule.value for refusal in self.refused.refusals}),
                "addresses": list(self.refused.addresses)}


#: How many reasons a refusal's message spells out.
_SHOWN = 5


@frozen
class Refused:
    """The merge is refused: nothing changes, the view's base stays."""

    refusals: tuple[Refusal, ...]

    @property
    def reason(self) -> str:
        """Every refusal's reason (the first few), as one message."""
        shown = "; ".join(refusal.reason for refusal in self.refusals[:_SHOWN])
        more = len(self.refusals) - _SHOWN
        return shown + (f" (and {more} more)" if more > 0 else "")

    @property
    def addresses(self) -> tuple[str, ...]:
        """The addresses at fault, each once."""
        return tuple(dict.fromkeys(refusal.address for refusal in self.refusals
                                   if refusal.address is not None))

    def error(self) -> MergeRefused:
        """The error to answer (409) once the refusal is recorded."""
        return MergeRefused(self)


@frozen
class InstanceChange:
    """An instance the merged version has differently from main's.

    @ivar action: C{create}, C{update} or C{delete} (of the instance, its
        deposed objects included).
    """

    address: str
    action: str
    auto_widened: bool = False


@frozen
class ProjectionDelta:
    """The merged version's projection, as changes to main's: the rows of
    each resource that changed (none: it was removed), and the outputs'
    rows.  L{apply} makes the whole projection from main's."""

    resources: Mapping[ResourceId, tuple[ResourceRow, ...]]
    dependencies: Mapping[ResourceId, tuple[DependencyRow, ...]]
    outputs: tuple[OutputRow, ...]

    def apply(self, main: Projection) -> Projection:
        """The merged version's projection, from main's (in the state's
        order, the order L{kilolock.tfstate.projection} gives)."""
        reader = ResourceReader()
        resource_of: dict[str, ResourceId] = {}
        groups: list[tuple[ResourceId, list[ResourceRow]]] = []
        for row in main.resources:
            resource = (reader.module(row.module, 0), row.mode, row.type, row.name)
            resource_of[row.address] = resource
            if not groups or groups[-1][0] != resource:
                groups.append((resource, []))
            groups[-1][1].append(row)
        dependencies: dict[ResourceId, list[DependencyRow]] = {}
        for dependency in main.dependencies:
            dependencies.setdefault(resource_of[dependency.address], []).append(dependency)
        present = {group for group, _ in groups}
        added = sorted(resource for resource in self.resources if resource not in present)
        rows: list[ResourceRow] = []
        depends: list[DependencyRow] = []

        def emit(resource: ResourceId) -> None:
            rows.extend(self.resources[resource])
            depends.extend(self.dependencies.get(resource, ()))

        waiting = list(reversed(added))
        for resource, own in groups:
            while waiting and waiting[-1] < resource:
                emit(waiting.pop())
            if resource in self.resources:
                emit(resource)
            else:
                rows.extend(own)
                depends.extend(dependencies.get(resource, ()))
        for new in reversed(waiting):
            emit(new)
        return Projection(resources=tuple(rows), dependencies=tuple(depends),
                          outputs=self.outputs)


@frozen
class Merged:
    """The merged version, for the store to write as the state's next
    version.

    @ivar raw: its bytes (written by the server: main's resources byte for
        byte, the view's changed ones as the view sent them).
    @ivar sha256: their SHA-256 (hex).
    @ivar changes: each instance it has differently from main's.
    @ivar auto_widened: the addresses taken outside the write set (the
        C{AUTO_WIDEN} policy).
    @ivar stale_outputs: outputs both changed, main's value kept.
    @ivar merged_outputs: outputs both changed, merged by key.
    @ivar index: the merged version's index (pass it as C{main_index} to
        the next merge into it).
    @ivar view_base: the index of the view's state: the view's next base.
    @ivar projection: the merged version's projection as changes to main's.
    """

    raw: bytes = field(repr=lambda raw: f"<{len(raw)} bytes>")
    sha256: str
    serial: int
    lineage: str
    terraform_version: str | None
    changes: tuple[InstanceChange, ...]
    auto_widened: tuple[str, ...]
    stale_outputs: tuple[str, ...]
    merged_outputs: tuple[str, ...]
    index: StateIndex
    view_base: StateIndex
    projection: ProjectionDelta

    def parsed(self, main: Projection) -> ParsedState:
        """What a store writes a version with (as L{parse_state} would have
        read it), from the projection of main (the version merged into)."""
        return ParsedState(serial=self.serial, lineage=self.lineage,
                           projection=self.projection.apply(main),
                           terraform_version=None if self.terraform_version is None
                           else clean_text(self.terraform_version))


@frozen
class Unchanged:
    """The view's state brings nothing main does not have: no new version.
    The view's base advances to it (C{view_base})."""

    view_base: StateIndex


MergeOutcome = Merged | Unchanged | Refused


class MergeFailed(RuntimeError):
    """The merged text did not read back as the state it was built as (a
    fault of the merge, never of its input: nothing may be stored)."""


# -- the merge -------------------------------------------------------------------


def merge_view_post(theirs: bytes, main: bytes, base: StateIndex, *, write: AddressSet,
                    main_index: StateIndex | None = None,
                    others: Mapping[str, ReservationSets] | None = None,
                    policy: MergePolicy = MergePolicy.STRICT) -> MergeOutcome:
    """Merge C{theirs}, a state sent to a view, into C{main}, the state's
    current version (see the module's docstring).

    @param base: the index of the view's base.
    @param write: the reservation's write set.
    @param main_index: the index of C{main}, when the store has it
        (L{Merged.index} of the merge that wrote it); otherwise it is
        made here, from C{base}'s digests for what main has unchanged.
    @param others: the other reservations of the state, by id: who holds
        what a refusal names, and what C{AUTO_WIDEN} may take.
    @return: L{Merged}, L{Unchanged} or L{Refused}.
    @raise InvalidState: (400) C{theirs} is not a v4 state (nothing is
        merged; the message names the position at fault, never a value).
    @raise kilolock.core.errors.InvalidText: (400) C{theirs} nests deeper
        than any state may.
    @raise MergeFailed: the merged text failed its check (a fault here).
    """
    split = split_state(theirs)
    if split.encrypted:
        return Refused((Refusal(RefusalRule.ENCRYPTED_STATE, _ENCRYPTED_VIEW),))
    _check_top(split)
    lineage, serial, terraform_version = read_top(split)
    try:
        main_text = _MainText(main, main_index, base)
    except EncryptedState:
        return Refused((Refusal(RefusalRule.ENCRYPTED_STATE, _ENCRYPTED_MAIN),))
    except InvalidState as error:
        return Refused((Refusal(RefusalRule.UNREADABLE_STATE,
                                f"the state's current version cannot be merged: {error.message}"),
                        ))
    main_ix = main_text.index
    if lineage != main_ix.lineage:
        return Refused((Refusal(
            RefusalRule.LINEAGE_MISMATCH,
            f"the view was sent a state of lineage {lineage}, this state's is"
            f" {main_ix.lineage}: a state of another lineage is never merged"),))
    merge = _Merge(split, main_text, base, write, others or {}, policy)
    merge.pair()
    merge.resolve()
    merge.check_stale_reads()
    if merge.refusals:
        return Refused(tuple(merge.refusals))
    view_base = merge.view_base(lineage, serial, terraform_version, len(theirs))
    outputs = merge_outputs(base.outputs, split.members.get("outputs", b"{}"), main_ix.outputs)
    checks = merge_check_results(base.check_results,
                                 split.members.get("check_results", b"null"),
                                 main_ix.check_results)
    if not merge.changes and not outputs.changed and not checks.changed:
        return Unchanged(view_base)
    version = higher_version(main_ix.terraform_version, terraform_version)
    raw, index = merge.assemble(version, main_ix.serial + 1, main_ix.lineage, outputs.text,
                                checks.text)
    return Merged(
        raw=raw, sha256=hashlib.sha256(raw).hexdigest(), serial=main_ix.serial + 1,
        lineage=main_ix.lineage, terraform_version=version, changes=tuple(merge.changes),
        auto_widened=tuple(merge.auto_widened), stale_outputs=outputs.stale,
        merged_outputs=outputs.structural, index=index, view_base=view_base,
        projection=merge.projection(outputs.text))


_ENCRYPTED_VIEW = ("the view was sent an OpenTofu encrypted state: Kilolock cannot read it,"
                   " and reservations need a state the server can read")
_ENCRYPTED_MAIN = ("the state's current version is an OpenTofu encrypted state: Kilolock"
                   " cannot read it, and reservations need a state the server can read")

#: The members of a state checked as a whole by the ordinary parse.
_CHECKED_MEMBERS = ("version", "terraform_version", "serial", "lineage", "outputs",
                    "check_results")


def _check_top(split: SplitState) -> None:
    """Check theirs' top-level members as any state body is checked
    (L{kilolock.tfstate.parse}: the same messages), and its check results.

    @raise InvalidState: they are not a v4 state's.
    """
    members = [b'"' + name.encode() + b'": ' + split.members[name]
               for name in _CHECKED_MEMBERS if name in split.members]
    parse_state(b"{" + b", ".join([*members, b'"resources": []']) + b"}")
    check_results_valid(split.members.get("check_results", b"null"))


class _MainText:
    """Main's bytes with its index (made when not given, or not of these
    bytes)."""

    def __init__(self, raw: bytes, index: StateIndex | None, base: StateIndex) -> None:
        if index is None or index.size != len(raw) or not _starts_agree(raw, index):
            index = index_state(raw, base)
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


#: How many resources' texts are compared at once.
_BLOCK = 256

#: Where a resource of the merged version comes from: a run of main's
#: resources (from, to), or a text with its index entry.
_Run = tuple[int, int]
_Item = _Run | tuple[bytes, ResourceEntry]


def _known(new: tuple[bytes, ResourceEntry] | None) -> tuple[bytes, ResourceEntry]:
    assert new is not None
    return new


@define
class _Resolved:
    """What the merge decided for one resource it had to look at."""

    resource: ResourceId
    theirs: DecodedResource | None
    main_position: int | None
    #: Each instance key of the merged resource, and whose objects it has
    #: (C{"theirs"} or C{"main"}).
    units: dict[Key, str]
    header_from_theirs: bool
    #: Whether the merged resource differs from main's.
    changed: bool
    #: The objects theirs writes (for the stale-read check).
    written: list[tuple[Key, Instance]]
    #: Whether main changed it since the base (and theirs does not agree).
    main_changed: bool
    #: The merged resource's text and index entry (None: it is dropped),
    #: once made.
    result: tuple[bytes, ResourceEntry] | None = None


class _Merge:
    def __init__(self, split: SplitState, main: _MainText, base: StateIndex,
                 write: AddressSet, others: Mapping[str, ReservationSets],
                 policy: MergePolicy) -> None:
        self.split = split
        self.main = main
        self.base = base
        self.write = write
        self.others = others
        self.policy = policy
        self.reader = ResourceReader()
        self.refusals: list[Refusal] = []
        self.changes: list[InstanceChange] = []
        self.auto_widened: list[str] = []
        #: theirs' position -> main's position, for texts that are equal
        #: (-1: not equal to any).
        self.equal: list[int] = []
        #: Resources whose texts differ: (theirs' position, main's position).
        self.touched: dict[ResourceId, tuple[int | None, int | None]] = {}
        self.theirs_decoded: dict[int, DecodedResource] = {}
        self.theirs_rows: dict[int, tuple[list[ResourceRow], list[DependencyRow]]] = {}
        self.resolved: dict[ResourceId, _Resolved] = {}
        self.theirs_ordered = False
        self._main_decoded: dict[int, DecodedResource] = {}
        self._dependencies: dict[str, Target | None] = {}

    # -- pairing theirs' resources with main's

    def pair(self) -> None:
        """Pair each of theirs' resources with main's.  Terraform sorts a
        state's resources, so both lists are in one order and mostly line
        up: runs of texts are compared where they do (in blocks, without a
        step of Python per resource), and where a text differs the two
        resources' addresses decide which side has one the other lacks.
        States whose resources are not in Terraform's order are paired by
        address instead."""
        pieces = self.split.pieces
        ids = self.main.index.resources
        equal = self.equal = [-1] * len(pieces)
        headers: dict[int, ResourceId] = {}
        i = j = 0
        while i < len(pieces) and j < len(ids):
            same = self.main.equal_run(j, pieces[i:i + _BLOCK])
            equal[i:i + same] = range(j, j + same)
            i, j = i + same, j + same
            if same == _BLOCK or i == len(pieces) or j == len(ids):
                continue
            resource = headers[i] = self.reader.header(pieces[i], i)
            if resource == ids[j]:
                self.touched[resource] = (i, j)
                i, j = i + 1, j + 1
            elif resource < ids[j]:
                self.touched[resource] = (i, None)
                i += 1
            else:
                self.touched[ids[j]] = (None, j)
                j += 1
        for rest in range(i, len(pieces)):
            resource = headers[rest] = self.reader.header(pieces[rest], rest)
            self.touched[resource] = (rest, None)
        for rest in range(j, len(ids)):
            self.touched[ids[rest]] = (None, rest)
        self.theirs_ordered = self.main.index.ordered and self._theirs_ordered(headers)
        if not self.theirs_ordered:
            self._pair_by_address()

    def _theirs_ordered(self, headers: dict[int, ResourceId]) -> bool:
        """Whether theirs' resources are in Terraform's order, each once
        (those equal to main's follow main's order: only the others are
        looked at, with their neighbours)."""
        ids = self.main.index.resources

        def at(position: int) -> ResourceId:
            j = self.equal[position]
            return ids[j] if j >= 0 else headers[position]

        last = len(self.equal) - 1
        for position in headers:
            if position > 0 and not at(position - 1) < at(position):
                return False
            if position < last and not at(position) < at(position + 1):
                return False
        return True

    def _pair_by_address(self) -> None:
        """Pairing for states whose resources are not in Terraform's order."""
        self.equal = [-1] * len(self.split.pieces)
        self.touched.clear()
        ids = self.main.index.resources
        main_positions = {resource: position for position, resource in enumerate(ids)}
        seen: set[ResourceId] = set()
        for i, piece in enumerate(self.split.pieces):
            resource = self.reader.header(piece, i)
            if resource in seen:
                raise InvalidState(f"resources[{i}] repeats a resource listed before it")
            seen.add(resource)
            j = main_positions.get(resource)
            if j is not None and self.main.equal_run(j, [piece]):
                self.equal[i] = j
            else:
                self.touched[resource] = (i, j)
        for resource, j in main_positions.items():
            if resource not in seen:
                self.touched[resource] = (None, j)

    # -- deciding each resource whose texts differ

    def _theirs(self, position: int) -> DecodedResource:
        """Theirs' resource at C{position}, checked as any state's resource
        is, decoded."""
        decoded = self.theirs_decoded.get(position)
        if decoded is None:
            piece = self.split.pieces[position]
            try:
                text = bytes(piece).decode("utf-8")
            except UnicodeDecodeError:
                raise InvalidState("the state is not valid UTF-8") from None
            try:
                document = JSON_DECODER.decode(text)
            except (ValueError, RecursionError):
                raise InvalidState(f"resources[{position}] is not valid JSON") from None
            check_depth(text, 0, len(text), document, 2, "the state")
            self.theirs_rows[position] = project_resource(position, document)
            decoded = self.theirs_decoded[position] = self.reader.read(piece, position)
            self._check_dependencies(decoded, position)
        return decoded

    def _check_dependencies(self, resource: DecodedResource, position: int) -> None:
        for index, instance in enumerate(resource.instances):
            for dependency in instance.dependencies:
                if self._dependency(dependency) is None:
                    raise InvalidState(f"resources[{position}].instances[{index}].dependencies"
                                       " names something that is not a resource")

    def _dependency(self, text: str) -> Target | None:
        """A C{dependencies} entry parsed (None: not a resource address)."""
        if text not in self._dependencies:
            try:
                target: Target | None = parse_address(text)
            except InvalidAddress:
                target = None
            self._dependencies[text] = None if target is None or target.is_module else target
        return self._dependencies[text]

    def _main_resource(self, position: int) -> DecodedResource:
        decoded = self._main_decoded.get(position)
        if decoded is None:
            decoded = self._main_decoded[position] = self.reader.read(
                self.main.piece(position), position)
        return decoded

    def resolve(self) -> None:
        for resource, (i, j) in self.touched.items():
            self.resolved[resource] = self._resolve(resource, i, j)

    def _resolve(self, resource: ResourceId, i: int | None, j: int | None) -> _Resolved:
        theirs = self._theirs(i) if i is not None else None
        main_entry = self.main.index.entries[j] if j is not None else None
        base_entry = self.base.entry(resource)
        data = resource[1] == "data"
        theirs_units = _units(theirs)
        base_units = objects_by_unit(base_entry)
        main_units = objects_by_unit(main_entry)
        units: dict[Key, str] = {}
        written: list[tuple[Key, Instance]] = []
        main_changed = False
        changes: list[InstanceChange] = []
        for key in sorted({*theirs_units, *base_units, *main_units},
                          key=lambda key: instance_order(key, "")):
            t, b, m = theirs_units.get(key), base_units.get(key), main_units.get(key)
            if m != b and t != m:
                main_changed = True
            if t in (b, m):
                if m is not None:
                    units[key] = "main"
                continue
            address = instance_address(resource, key)
            widened = False
            if not data:
                if not self.write.covers_instance(resource, key):
                    holders = self._holders(resource, key)
                    if self.policy is MergePolicy.AUTO_WIDEN and not holders and m == b:
                        widened = True
                    else:
                        self._refuse_outside(address, f"change to {address}", holders)
                        continue
                elif m != b:
                    self.refusals.append(Refusal(
                        RefusalRule.CHANGED_IN_MAIN,
                        f"{address} changed in main since this view's base (another writer"
                        " changed it): reserve it again and plan again", address))
                    continue
            if widened:
                self.auto_widened.append(address)
            if t is not None:
                units[key] = "theirs"
                assert theirs is not None
                written.extend((key, instance) for instance in theirs.instances
                               if instance.key == key
                               and (instance.deposed, instance.digest) not in (b or ()))
            action = "create" if m is None else "delete" if t is None else "update"
            changes.append(InstanceChange(address, action, widened))
        header_from_theirs = self._header(resource, theirs, base_entry, main_entry, data)
        if main_entry is not None and base_entry is not None and theirs is not None and (
                main_entry.header != base_entry.header
                and theirs.header != main_entry.header):
            main_changed = True
        changed = bool(changes) or header_from_theirs
        self.changes.extend(changes)
        return _Resolved(resource, theirs, j, units, header_from_theirs, changed, written,
                         main_changed)

    def _header(self, resource: ResourceId, theirs: DecodedResource | None,
                base: ResourceEntry | None, main: ResourceEntry | None, data: bool) -> bool:
        """Whether the merged resource takes theirs' metadata (refusing the
        merge when theirs changed it where it may not)."""
        if theirs is None:
            return False
        if base is None and main is None:
            return True
        if (base is not None and theirs.header == base.header) or (
                main is not None and theirs.header == main.header):
            return False
        if data:
            return True
        address = resource_address(resource)
        if base is not None and not self.write.covers_resource(resource):
            holders = self._holders(resource)
            main_unchanged = main is not None and main.header == base.header
            if not (self.policy is MergePolicy.AUTO_WIDEN and not holders and main_unchanged):
                self._refuse_outside(
                    address, f"change to the provider of {address} (a claim on the whole"
                             f" resource {address} covers it)", holders)
                return False
            self.auto_widened.append(address)
        if main is None or base is None or main.header != base.header:
            self.refusals.append(Refusal(
                RefusalRule.CHANGED_IN_MAIN,
                f"the provider of {address} changed in main since this view's base (another"
                " writer changed it): reserve it again and plan again", address))
            return False
        return True

    def _holders(self, resource: ResourceId, *key: Key) -> tuple[str, ...]:
        """The other reservations claiming the instance C{key} of
        C{resource} (no key: anything of it)."""
        return tuple(sorted(
            holder for holder, sets in self.others.items()
            if (sets.holds_instance(resource, key[0]) if key else sets.holds_resource(resource))))

    def _refuse_outside(self, address: str, what: str, holders: tuple[str, ...]) -> None:
        held = f" and held by {', '.join(holders)}" if holders else ""
        self.refusals.append(Refusal(RefusalRule.OUTSIDE_RESERVATION,
                                     f"{what} is outside the reservation{held}", address,
                                     holders))

    def check_stale_reads(self) -> None:
        """Refuse each object theirs writes that depends on a managed
        resource main changed since the base.

        A C{dependencies} entry is a configuration address (no instance
        keys).  Where its module path starts like the writer's, the
        dependency is in the writer's own module instances: no value flows
        from one instance of a module call to another (it would be a cycle
        through the call), so only that instance of it counts -- an object
        in C{module.m["q"]} depending on C{module.m.terraform_data.r} read
        C{module.m["q"]}'s, whatever main did to C{module.m["p"]}'s."""
        changed: dict[str, list[tuple[ModuleStep, ...]]] = {}
        for resource, resolved in self.resolved.items():
            if resolved.main_changed and resource[1] == "managed":
                changed.setdefault(_config_address(resource), []).append(
                    parse_module_path(resource[0]))
        if not changed:
            return
        for resource, resolved in self.resolved.items():
            if resource[1] != "managed" or not resolved.written:
                continue
            writer = parse_module_path(resource[0])
            for key, instance in resolved.written:
                for dependency in instance.dependencies:
                    target = self._dependency(dependency)
                    if target is None or target.mode == "data":
                        continue
                    config = target.config_text()
                    shared = _shared_names(writer, target.module)
                    if any(found[:shared] == writer[:shared] for found in changed.get(config, ())):
                        address = instance_address(resource, key)
                        self.refusals.append(Refusal(
                            RefusalRule.STALE_READ,
                            f"{address} depends on {config}, which changed in main since this"
                            " view's base (stale read)", address, dependency=config))
                        break

    # -- the view's next base

    def view_base(self, lineage: str, serial: int, terraform_version: str | None,
                  size: int) -> StateIndex:
        """The index of theirs (its resources equal to main's take main's
        digests; the others were decoded)."""
        main_index = self.main.index
        decoded = {i: self._theirs(i) for i, j in enumerate(self.equal) if j < 0}
        resources = [main_index.resources[j] if j >= 0 else decoded[i].id
                     for i, j in enumerate(self.equal)]
        entries = [main_index.entries[j] if j >= 0 else decoded[i].entry()
                   for i, j in enumerate(self.equal)]
        return StateIndex(lineage, serial, terraform_version, resources, entries, None,
                          [len(piece) for piece in self.split.pieces], size,
                          self.split.members.get("outputs", b"{}"),
                          self.split.members.get("check_results", b"null"),
                          ordered=True if self.theirs_ordered else None)

    # -- the merged version

    def _text(self, resolved: _Resolved) -> tuple[bytes, ResourceEntry] | None:
        """The merged resource's text and index entry (None: it has no
        instance left)."""
        if not resolved.units:
            return None
        theirs = resolved.theirs
        if theirs is not None and all(side == "theirs" for side in resolved.units.values()) \
                and set(resolved.units) == {instance.key for instance in theirs.instances} \
                and (resolved.header_from_theirs or resolved.main_position is None
                     or theirs.header == self.main.index.entries[resolved.main_position].header):
            i = self.touched[resolved.resource][0]
            assert i is not None
            return bytes(self.split.pieces[i]), theirs.entry()
        main = (self._main_resource(resolved.main_position)
                if resolved.main_position is not None else None)
        header_side = theirs if resolved.header_from_theirs or main is None else main
        assert header_side is not None
        instances: list[Instance] = []
        for key, side in resolved.units.items():
            source = theirs if side == "theirs" else main
            assert source is not None
            instances.extend(instance for instance in source.instances if instance.key == key)
        instances.sort(key=lambda instance: instance_order(instance.key, instance.deposed))
        text = render_resource(resolved.resource, header_side.provider, header_side.each,
                               (instance.text for instance in instances))
        entry = ResourceEntry(raw_digest(text), header_side.header, tuple(
            (instance.key, instance.deposed, instance.digest) for instance in instances))
        return text, entry

    def assemble(self, terraform_version: str | None, serial: int, lineage: str,
                 outputs: bytes, check_results: bytes) -> tuple[bytes, StateIndex]:
        """The merged version's bytes, and their index: main's resources in
        main's order, runs of unchanged ones as one slice, the ones theirs
        added at their place in Terraform's order."""
        ids = self.main.index.resources
        replaced: dict[ResourceId, tuple[bytes, ResourceEntry] | None] = {}
        for resource, resolved in self.resolved.items():
            if resolved.changed:
                replaced[resource] = resolved.result = self._text(resolved)
        added = sorted(resource for resource, new in replaced.items()
                       if new is not None and self.touched[resource][1] is None)
        in_order = self.main.index.ordered
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
            items = self._sorted_items(items)
        return self._write(items, terraform_version, serial, lineage, outputs, check_results)

    def _sorted_items(self, items: list[tuple[ResourceId, _Item]]
                      ) -> list[tuple[ResourceId, _Item]]:
        """Every resource on its own, in Terraform's order (main's were not)."""
        single: list[tuple[ResourceId, _Item]] = []
        ids = self.main.index.resources
        for resource, item in items:
            if isinstance(item[0], int):
                start, stop = item
                single.extend((ids[j], (j, j + 1)) for j in range(start, stop))
            else:
                single.append((resource, item))
        return sorted(single, key=lambda pair: pair[0])

    def _write(self, items: list[tuple[ResourceId, _Item]],
               terraform_version: str | None, serial: int, lineage: str, outputs: bytes,
               check_results: bytes) -> tuple[bytes, StateIndex]:
        main_index = self.main.index
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
                run = self.main.run(start, stop)
                if main_offsets is not None:
                    shift = position - main_offsets[start]
                    offsets.extend(main_offsets[j] + shift for j in range(start, stop))
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
        _verify(raw, index)
        return raw, index

    def projection(self, outputs: bytes) -> ProjectionDelta:
        """The merged version's projection, as changes to main's."""
        rows: dict[ResourceId, tuple[ResourceRow, ...]] = {}
        dependencies: dict[ResourceId, tuple[DependencyRow, ...]] = {}
        for resource, resolved in self.resolved.items():
            if not resolved.changed:
                continue
            if resolved.result is None:
                rows[resource], dependencies[resource] = (), ()
                continue
            projected = project_resource(0, json.loads(resolved.result[0]))
            rows[resource] = tuple(projected[0])
            dependencies[resource] = tuple(projected[1])
        return ProjectionDelta(rows, dependencies,
                               project_state({"outputs": json.loads(outputs)}).outputs)


def _units(resource: DecodedResource | None) -> dict[Key, frozenset[tuple[str, bytes]]]:
    if resource is None:
        return {}
    units: dict[Key, set[tuple[str, bytes]]] = {}
    for instance in resource.instances:
        units.setdefault(instance.key, set()).add((instance.deposed, instance.digest))
    return {key: frozenset(objects) for key, objects in units.items()}


def _shared_names(writer: tuple[ModuleStep, ...], dependency: tuple[ModuleStep, ...]) -> int:
    """How many first module steps of a writer's path and of a dependency's
    (configuration) path name the same module calls."""
    shared = 0
    for mine, theirs in zip(writer, dependency, strict=False):
        if mine.name != theirs.name:
            break
        shared += 1
    return shared


def _config_address(resource: ResourceId) -> str:
    """A resource's configuration address (what C{dependencies} name)."""
    module, mode, type_, name = resource
    steps = parse_module_path(module)
    return Target(steps, mode, type_, name).config_text()


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
