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

What is read: theirs once, split into its resources' texts (the only pass
over all of it); main not at all when its index says where each resource
starts (L{Merged.index} does, for the next merge); theirs' texts compared
with main's where they lie (L{kilolock.reservations.pairing}); only the
resources whose texts differ decoded and compared object by object with
the base's digests (L{kilolock.reservations.index}).  The merged version is
main's text with those resources spliced in (L{kilolock.reservations.splice}).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

from attrs import define

from kilolock.core.errors import EncryptedState, InvalidState
from kilolock.core.model import DependencyRow, ResourceRow
from kilolock.core.text import check_depth
from kilolock.reservations.canonical import raw_digest
from kilolock.reservations.derived import (
    check_results_valid,
    higher_version,
    merge_check_results,
    merge_outputs,
)
from kilolock.reservations.index import StateIndex
from kilolock.reservations.model import (
    AddressSet,
    ReservationSets,
    ResourceId,
    instance_address,
    resource_address,
)
from kilolock.reservations.outcome import (
    InstanceChange,
    Merged,
    MergeOutcome,
    MergePolicy,
    ProjectionDelta,
    Refusal,
    RefusalRule,
    Refused,
    Unchanged,
)
from kilolock.reservations.pairing import MainText, Pairing, pair
from kilolock.reservations.render import instance_order, render_resource
from kilolock.reservations.resources import (
    DecodedResource,
    Instance,
    ResourceEntry,
    ResourceReader,
    objects_by_unit,
)
from kilolock.reservations.splice import splice
from kilolock.reservations.text import SplitState, read_top, split_state
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

__all__ = ["merge_view_post"]


def merge_view_post(theirs: bytes, main: bytes, base: StateIndex, *, write: AddressSet,
                    main_index: StateIndex | None = None, main_sha256: str | None = None,
                    others: Mapping[str, ReservationSets] | None = None,
                    policy: MergePolicy = MergePolicy.STRICT) -> MergeOutcome:
    """Merge C{theirs}, a state sent to a view, into C{main}, the state's
    current version (see the module's docstring).

    @param base: the index of the view's base.
    @param write: the reservation's write set.
    @param main_index: the index of C{main}, when the store has it
        (L{Merged.index} of the merge that wrote it); otherwise (or when
        it is not of C{main}) it is made here, from C{base}'s digests for
        what main has unchanged.
    @param main_sha256: the SHA-256 (hex) of C{main}, which the store has
        with the version: an index naming other bytes is not used.
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
        main_text = MainText(main, main_index, base, main_sha256)
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
    merge.resolve(pair(split, main_text, merge.reader))
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
    raw, index = splice(main_text, merge.results(), version, main_ix.serial + 1,
                        main_ix.lineage, outputs.text, checks.text)
    index.sha256 = hashlib.sha256(raw).hexdigest()
    return Merged(
        raw=raw, sha256=index.sha256, serial=main_ix.serial + 1,
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
    def __init__(self, split: SplitState, main: MainText, base: StateIndex,
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
        self.pairing = Pairing([])
        self.theirs_decoded: dict[int, DecodedResource] = {}
        self.theirs_rows: dict[int, tuple[list[ResourceRow], list[DependencyRow]]] = {}
        self.resolved: dict[ResourceId, _Resolved] = {}
        self._main_decoded: dict[int, DecodedResource] = {}
        self._dependencies: dict[str, Target | None] = {}

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

    def resolve(self, pairing: Pairing) -> None:
        """Decide each resource whose texts differ (or one side lacks)."""
        self.pairing = pairing
        for resource, (i, j) in pairing.touched.items():
            self.resolved[resource] = self._resolve(resource, i, j)

    def _resolve(self, resource: ResourceId, i: int | None, j: int | None) -> _Resolved:
        theirs = self._theirs(i) if i is not None else None
        main_entry = self.main.index.entries[j] if j is not None else None
        base_entry = self.base.entry(resource)
        data = resource[1] == "data"
        theirs_units = theirs.units() if theirs is not None else {}
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
        equal = self.pairing.equal
        decoded = {i: self._theirs(i) for i, j in enumerate(equal) if j < 0}
        resources = [main_index.resources[j] if j >= 0 else decoded[i].id
                     for i, j in enumerate(equal)]
        entries = [main_index.entries[j] if j >= 0 else decoded[i].entry()
                   for i, j in enumerate(equal)]
        return StateIndex(lineage, serial, terraform_version, resources, entries, None,
                          [len(piece) for piece in self.split.pieces], size,
                          self.split.members.get("outputs", b"{}"),
                          self.split.members.get("check_results", b"null"),
                          ordered=True if self.pairing.theirs_ordered else None)

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
            i = self.pairing.touched[resolved.resource][0]
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

    def results(self) -> dict[ResourceId, tuple[bytes, ResourceEntry] | None]:
        """The text and index entry of each resource the merge changed
        (None: dropped, no instance left)."""
        results: dict[ResourceId, tuple[bytes, ResourceEntry] | None] = {}
        for resource, resolved in self.resolved.items():
            if resolved.changed:
                results[resource] = resolved.result = self._text(resolved)
        return results

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

