"""What the reservation merge's tests share (tests/reservations/): reading a
merged state's instances back, the claims they merge with, and the stale
reads a merge must refuse, worked out on modelled states
(L{tests.support.state_strategies})."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import msgspec

from kilolock.reservations.index import StateIndex, index_state
from kilolock.reservations.merge import merge_view_post
from kilolock.reservations.model import AddressSet, instance_address, parse_claims
from kilolock.reservations.outcome import Merged, MergeOutcome, Refused
from kilolock.tfstate.address import parse_module_path
from tests.support.state_strategies import Model, UnitId


class _Resource(msgspec.Struct):
    mode: str
    type: str
    name: str
    module: str = ""
    instances: list[msgspec.Raw] = []


class _Instance(msgspec.Struct):
    index_key: int | str | None = None
    deposed: str = ""


class _State(msgspec.Struct):
    resources: list[_Resource] = []


def instance_texts(raw: bytes) -> dict[tuple[UnitId, str], bytes]:
    """Every instance object's JSON text as the state holds it, by unit and
    deposed key."""
    texts = {}
    for resource in msgspec.json.decode(raw, type=_State).resources:
        for text in resource.instances:
            item = msgspec.json.decode(text, type=_Instance)
            unit = (resource.module, resource.mode, resource.type, resource.name, item.index_key)
            texts[(unit, item.deposed)] = bytes(text)
    return texts


def units_of(raw: bytes) -> dict[UnitId, list[dict[str, Any]]]:
    """Every instance's objects, decoded, by unit (in the state's order)."""
    units: dict[UnitId, list[dict[str, Any]]] = {}
    for resource in json.loads(raw)["resources"]:
        for item in resource["instances"]:
            unit = (resource.get("module", ""), resource["mode"], resource["type"],
                    resource["name"], item.get("index_key"))
            units.setdefault(unit, []).append(item)
    return units


def claims(units: Iterable[UnitId], field: str = "write") -> AddressSet:
    """The write set claiming exactly C{units}."""
    return parse_claims([instance_address(unit[:4], unit[4]) for unit in units], field)


def merge(theirs: bytes, main: bytes, base: bytes | StateIndex,
          write: Iterable[UnitId] | AddressSet, **options: Any) -> MergeOutcome:
    """L{merge_view_post} with the base's index made from its bytes."""
    base_index = base if isinstance(base, StateIndex) else index_state(base)
    sets = write if isinstance(write, AddressSet) else claims(write)
    return merge_view_post(theirs, main, base_index, write=sets, **options)


def merged(outcome: MergeOutcome) -> Merged:
    """The outcome, which must be a merge."""
    assert isinstance(outcome, Merged), getattr(outcome, "reason", outcome)
    return outcome


def refused(outcome: MergeOutcome) -> Refused:
    assert isinstance(outcome, Refused), outcome
    return outcome


def config_address(unit: UnitId) -> str:
    """The configuration address of a unit's resource (module keys left out)."""
    module, mode, type_, name, _ = unit
    steps = ".".join(f"module.{step.name}" for step in parse_module_path(module))
    resource = ("data." if mode == "data" else "") + f"{type_}.{name}"
    return f"{steps}.{resource}" if steps else resource


def written_dependencies(base: Model, theirs: Model, units: Iterable[UnitId]
                         ) -> dict[UnitId, set[str]]:
    """For each managed unit of C{units} theirs writes, the managed
    dependencies of the objects it writes (the stale-read check's input)."""
    found: dict[UnitId, set[str]] = {}
    for unit in units:
        if unit[1] != "managed" or theirs.get(unit) == base.get(unit):
            continue
        before = base.get(unit, ())
        for item in theirs.get(unit, ()):
            if item not in before:
                found.setdefault(unit, set()).update(
                    dependency for dependency in item[2] if not dependency.startswith("data."))
    return found


def _module_steps(module: str) -> list[tuple[str, object]]:
    return [(step.name, step.key) for step in parse_module_path(module)]


def reads(writer: UnitId, dependency: str, changed: UnitId) -> bool:
    """Whether an object of C{writer} whose dependencies name C{dependency}
    read C{changed}: its configuration address is the dependency's, and in
    the module calls the writer's path shares by name with the
    dependency's, it is in the writer's own module instances."""
    if config_address(changed) != dependency:
        return False
    mine, theirs = _module_steps(writer[0]), _module_steps(changed[0])
    names = dependency.split(".")[1::2][:-1] if dependency.startswith("module.") else []
    shared = 0
    while shared < min(len(mine), len(names)) and mine[shared][0] == names[shared]:
        shared += 1
    return mine[:shared] == theirs[:shared]


def stale_units(base: Model, theirs: Model, main: Model, view: Iterable[UnitId],
                changed_in_main: Iterable[UnitId]) -> set[UnitId]:
    """The units of C{view} a merge must refuse as stale reads: an object
    theirs writes depends on a managed resource main changed (and theirs
    did not change alike)."""
    changed = [unit for unit in changed_in_main
               if unit[1] == "managed" and main.get(unit) != base.get(unit)
               and theirs.get(unit) != main.get(unit)]
    return {unit for unit, dependencies in written_dependencies(base, theirs, view).items()
            if any(reads(unit, dependency, other)
                   for dependency in dependencies for other in changed)}
