"""Terraform's C{state mv} and C{state rm}, on states opened with
L{kilolock.stateops.document}.  Pure: no Twisted, no I/O.

L{move} follows Terraform's C{state mv} (with C{-state-out} when the
destination is another state):

  - a module instance moves with everything below it (C{module.a} to
    C{module.b}: C{module.a.module.c} becomes C{module.b.module.c}); the
    destination module must not be in the destination state yet;
  - a resource whose instances have keys (C{count}, C{for_each}) moves
    whole, to a resource address that is not in the destination state;
  - a resource without a key, and an instance, move as an instance, to an
    instance (or a resource: its instance without a key) that is not in
    the destination state, creating its resource with the source's
    provider when needed; the source resource goes when its last instance
    did.  Deposed objects move with their instance;
  - mode (managed, data) and type never change.

Instances move intact: every attribute, private data and sensitive path as
stored.  What changes besides the address is the C{dependencies} of the
destination state's instances that name what moved.  Terraform empties
those lists (the next apply records them again); Kilolock rewrites them
when the new name is exact -- the whole resource, or the whole module,
moved to a new address and no instance key is involved (C{module.a} to
C{module.b}: C{module.a.terraform_data.x} becomes
C{module.b.terraform_data.x}) -- and empties them, as Terraform does,
otherwise (a dependency names a resource, never a key).  Between two
states only the destination's lists are touched, as with Terraform's
C{-state-out}: the source's entries naming what left, and the moved
instances' entries naming what stayed, are kept (Terraform orders destroys
by them only against resources in the same run, and its next apply records
them again).  C{check_results} are kept as Terraform keeps them (the next
plan records them again).

L{remove} follows C{state rm}: every instance an address contains goes
(a module address: everything below it), and a resource goes with its last
instance; dependencies are left as they are.  An address that matches
nothing fails the whole request, as it does in Terraform.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from kilolock.core.errors import BadRequest, Conflict
from kilolock.stateops.document import Resource, Wanted, WorkingState
from kilolock.tfstate.address import Key, ModuleStep, Target, format_key, format_module

__all__ = ["InvalidMove", "NothingMatched", "TargetExists", "check_move", "move", "move_wanted",
           "remove", "remove_wanted"]


class NothingMatched(Conflict):
    """An address names nothing in the state."""

    code = "address_not_in_state"


class TargetExists(Conflict):
    """The destination address is taken in the destination state."""

    code = "destination_exists"


class InvalidMove(BadRequest):
    code = "invalid_move"


def check_move(source: Target, destination: Target, root: bool = False) -> None:
    """What a move's two addresses must satisfy whatever the state holds.

    @param root: the destination may be the root module (a split).
    @raise InvalidMove: a module to a resource or back, a change of mode or
        type, a whole resource to an instance, or the root where it may not be.
    """
    if source.is_module != destination.is_module:
        raise InvalidMove(f"cannot move {source} to {destination}: a module moves to a module,"
                          " a resource or instance to a resource or instance")
    if source.is_module:
        if not source.module:
            raise InvalidMove("the root module cannot be moved")
        if not destination.module and not root:
            raise InvalidMove(f"cannot move {source} to the root module")
        return
    if source.mode != destination.mode:
        raise InvalidMove(f"cannot move {source} to {destination}: a {source.mode} resource"
                          f" moves only to another {source.mode} resource address")
    if source.type != destination.type:
        raise InvalidMove(f"cannot move {source} to {destination}: resource types don't match")


def _dependency_of(target: Target) -> Callable[[str], bool]:
    """Which C{dependencies} entries name C{target} or something in it."""
    config = target.config_text()
    if target.is_module:
        prefix = config + "."
        return lambda entry: entry.startswith(prefix)
    return lambda entry: entry == config


def _names(dependency: Callable[[str], bool], document: dict[str, Any]) -> bool:
    """Whether an instance of a decoded resource has a dependency entry
    C{dependency} accepts."""
    for instance in document.get("instances") or ():
        entries = instance.get("dependencies") if isinstance(instance, dict) else None
        if isinstance(entries, list) and any(
                isinstance(entry, str) and dependency(entry) for entry in entries):
            return True
    return False


def move_wanted(source: Target, destination: Target, *, source_state: bool,
                destination_state: bool) -> Wanted:
    """Which resources of a state a move changes (so they stay decoded):
    in the source state, those C{source} names; in the destination state,
    those C{destination} names and those whose dependencies name C{source}."""
    dependency = _dependency_of(source)

    def wanted(module: tuple[ModuleStep, ...], document: dict[str, Any]) -> bool:
        header = (module, str(document.get("mode")), str(document.get("type")),
                  str(document.get("name")))
        if source_state and source.touches_resource(*header):
            return True
        return destination_state and (
            (not destination.is_module and destination.touches_resource(*header))
            or _names(dependency, document))

    return wanted


def remove_wanted(targets: Iterable[Target]) -> Wanted:
    """Which resources L{remove} looks into: those the addresses name."""
    targets = tuple(targets)

    def wanted(module: tuple[ModuleStep, ...], document: dict[str, Any]) -> bool:
        return any(target.touches_resource(module, str(document.get("mode")),
                                           str(document.get("type")), str(document.get("name")))
                   for target in targets)

    return wanted


# -- state rm -------------------------------------------------------------------


def remove(state: WorkingState, targets: Iterable[Target]) -> list[str]:
    """Remove every instance the addresses contain.

    @return: the addresses of the instance objects removed, in state order.
    @raise NothingMatched: an address contains nothing.
    """
    targets = tuple(targets)
    removed: list[str] = []
    matched: set[Target] = set()
    kept: list[Resource] = []
    for resource in state.resources:
        header = (resource.module, resource.mode, resource.type, resource.name)
        naming = [target for target in targets if target.touches_resource(*header)]
        if not naming:
            kept.append(resource)
            continue
        instances = resource.instances()
        if not instances:
            unkeyed = [t for t in naming if t.is_module or not t.keyed]
            matched.update(unkeyed)
            if unkeyed:
                removed.append(_resource_address(resource))
            else:
                kept.append(resource)
            continue
        remaining = []
        for instance in instances:
            key = instance.get("index_key")
            hits = [t for t in naming if t.contains_instance(*header, key)]
            if hits:
                matched.update(hits)
                removed.append(_instance_address(resource, key))
            else:
                remaining.append(instance)
        if remaining:
            if len(remaining) != len(instances):
                resource.changed()["instances"] = remaining
            kept.append(resource)
    missing = [str(target) for target in targets if target not in matched]
    if missing:
        raise NothingMatched("no matching objects in the state for " + ", ".join(missing))
    state.resources = kept
    return sorted(set(removed), key=removed.index)


# -- state mv -------------------------------------------------------------------


def move(source: WorkingState, destination: WorkingState, from_: Target, to: Target,
         root: bool = False) -> list[tuple[str, str]]:
    """Move what C{from_} names in C{source} to C{to} in C{destination}
    (the same object for a move within one state).

    @param root: C{to} may be the root module (a split).
    @return: (from, to) address pairs of what moved.
    @raise InvalidMove: see L{check_move}.
    @raise NothingMatched: C{from_} names nothing in C{source}.
    @raise TargetExists: C{to} is taken in C{destination}.
    """
    check_move(from_, to, root)
    if from_.is_module:
        return _move_module(source, destination, from_, to)
    resource = _find(source, from_)
    if resource is None:
        raise NothingMatched(f"cannot move {from_}: the state does not contain it")
    if not from_.keyed:
        if any(instance.get("index_key") is None for instance in resource.instances()):
            from_ = from_.instance(None)  # a resource without count or for_each
        else:
            if to.keyed:
                raise InvalidMove(f"cannot move {from_} to {to}: the source is a whole resource"
                                  " (not a resource instance) so the target must also be a"
                                  " whole resource")
            return _move_resource(source, destination, resource, from_, to)
    return _move_instance(source, destination, resource, from_, to)


def _find(state: WorkingState, target: Target) -> Resource | None:
    for resource in state.resources:
        if (resource.module, resource.mode, resource.type, resource.name) == (
                target.module, target.mode, target.type, target.name):
            return resource
    return None


def _move_module(source: WorkingState, destination: WorkingState, from_: Target,
                 to: Target) -> list[tuple[str, str]]:
    same = source is destination
    if same and (from_.module_contains(to.module) or to.module_contains(from_.module)):
        raise InvalidMove(f"cannot move {from_} to {to}: one is inside the other")
    moving = [r for r in source.resources if from_.module_contains(r.module)]
    if not moving:
        raise NothingMatched(f"cannot move {from_}: it does not match anything in the state")
    if any(to.module_contains(r.module) for r in destination.resources if r not in moving):
        raise TargetExists(f"cannot move {from_} to {to}: the destination module already"
                           " exists in the state")
    pairs: dict[str, str] = {}
    for resource in moving:
        old = resource.module_text
        resource.module = to.module + resource.module[len(from_.module):]
        _set_module(resource.changed(), resource.module)
        pairs.setdefault(old, resource.module_text)
    _transfer(source, destination, moving)
    exact = _keyless(from_) and _keyless(to)
    old_prefix, new_prefix = from_.config_text() + ".", to.config_text()
    new_prefix = new_prefix + "." if new_prefix else ""
    _fix_dependencies(destination, _dependency_of(from_),
                      (lambda entry: new_prefix + entry[len(old_prefix):]) if exact else None)
    return [(old or "(root)", new or "(root)") for old, new in pairs.items()]


def _move_resource(source: WorkingState, destination: WorkingState, resource: Resource,
                   from_: Target, to: Target) -> list[tuple[str, str]]:
    if _find(destination, to) is not None:
        raise TargetExists(f"cannot move to {to}: there is already a resource at that address"
                           " in the state")
    resource.module, resource.name = to.module, str(to.name)
    document = resource.changed()
    _set_module(document, to.module)
    document["name"] = to.name
    _transfer(source, destination, [resource])
    exact = _keyless(from_) and _keyless(to)
    _fix_dependencies(destination, _dependency_of(from_),
                      (lambda entry: to.config_text()) if exact else None)
    return [(str(from_), str(to))]


def _move_instance(source: WorkingState, destination: WorkingState, resource: Resource,
                   from_: Target, to: Target) -> list[tuple[str, str]]:
    key: Key = to.key if to.keyed else None
    to = to.instance(key)
    objects = [i for i in resource.instances() if i.get("index_key") == from_.key]
    if not objects:
        raise NothingMatched(f"cannot move {from_}: the state does not contain it")
    target = _find(destination, to)
    if target is not None and any(i.get("index_key") == key for i in target.instances()):
        raise TargetExists(f"cannot move to {to}: there is already a resource instance at that"
                           " address in the state")
    existed = target is not None and target is not resource
    left = [i for i in resource.instances() if i.get("index_key") != from_.key]
    resource.changed()["instances"] = left
    if not left:
        source.resources.remove(resource)
    target = _find(destination, to)
    for instance in objects:
        if key is None:
            instance.pop("index_key", None)
        else:
            instance["index_key"] = key
    if target is None:
        target = Resource(to.module, resource.mode, resource.type, str(to.name),
                          document=_new_resource(resource.decoded(), to, key))
        destination.resources.append(target)
    target.changed()["instances"] = [*target.instances(), *objects]
    exact = not left and not existed and _keyless(from_) and _keyless(to)
    _fix_dependencies(destination, _dependency_of(from_.resource()),
                      (lambda entry: to.config_text()) if exact else None)
    return [(str(from_), str(to))]


def _new_resource(like: dict[str, Any], to: Target, key: Key) -> dict[str, Any]:
    """A resource created by an instance move: the source's provider."""
    document: dict[str, Any] = {"mode": like.get("mode"), "type": like.get("type"),
                                "name": to.name, "provider": like.get("provider"),
                                "instances": []}
    _set_module(document, to.module)
    if "each" in like and key is not None:
        document["each"] = "list" if isinstance(key, int) else "map"
    return document


def _set_module(document: dict[str, Any], module: tuple[ModuleStep, ...]) -> None:
    if module:
        document["module"] = format_module(module)
    else:
        document.pop("module", None)
    # Keep Terraform's member order: module first.
    for name in [name for name in document if name != "module"]:
        document[name] = document.pop(name)


def _transfer(source: WorkingState, destination: WorkingState,
              moving: list[Resource]) -> None:
    if source is destination:
        return
    moved = set(map(id, moving))
    source.resources = [r for r in source.resources if id(r) not in moved]
    destination.resources.extend(moving)


def _keyless(target: Target) -> bool:
    return all(step.key is None for step in target.module) and (
        target.is_module or target.key is None)


def _fix_dependencies(state: WorkingState, names: Callable[[str], bool],
                      rewrite: Callable[[str], str] | None) -> None:
    """Rewrite (with C{rewrite}) or empty (without) the dependency lists of
    the state's instances that have an entry C{names} accepts."""
    for resource in state.resources:
        if resource.document is None or not _names(names, resource.document):
            continue
        for instance in resource.changed().get("instances") or ():
            entries = instance.get("dependencies")
            if not isinstance(entries, list) or not any(
                    isinstance(e, str) and names(e) for e in entries):
                continue
            if rewrite is None:
                instance["dependencies"] = []
                continue
            fixed: list[str] = []
            for entry in entries:
                new = rewrite(entry) if isinstance(entry, str) and names(entry) else entry
                if new not in fixed:
                    fixed.append(new)
            instance["dependencies"] = sorted(fixed)


def _instance_address(resource: Resource, key: Key) -> str:
    return _resource_address(resource) + format_key(key)


def _resource_address(resource: Resource) -> str:
    prefix = f"{resource.module_text}." if resource.module else ""
    mode = "data." if resource.mode == "data" else ""
    return f"{prefix}{mode}{resource.type}.{resource.name}"
