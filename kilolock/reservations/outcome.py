"""What a merge answers: the merged version, no new version, or a refusal
and its reasons.  Pure: no Twisted, no I/O.

L{kilolock.reservations.merge.merge_view_post} returns one of
L{Merged}, L{Unchanged} and L{Refused} (L{MergeOutcome}).  A store writes
a L{Merged} as the state's next version (with L{Merged.parsed} for its
projection), keeps nothing new for L{Unchanged} but the view's next base,
and records a L{Refused}'s reasons with the reservation before it answers
L{Refused.error} (409): Terraform shows only the status, C{kl} shows the
reasons.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from attrs import field, frozen

from kilolock.core.errors import Conflict
from kilolock.core.model import DependencyRow, OutputRow, ParsedState, Projection, ResourceRow
from kilolock.core.text import clean_text
from kilolock.reservations.index import StateIndex
from kilolock.reservations.model import ResourceId
from kilolock.reservations.resources import ResourceReader

__all__ = ["InstanceChange", "MergeFailed", "MergeOutcome", "MergePolicy", "MergeRefused",
           "Merged", "ProjectionDelta", "Refusal", "RefusalRule", "Refused", "Unchanged"]


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
