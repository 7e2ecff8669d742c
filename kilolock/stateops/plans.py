"""What each kind of operation does to the states it names, from their
current bytes to their new bytes.  Pure: no Twisted, no I/O (the runner
calls L{plan_operation} in a thread).

  - C{rm}: L{kilolock.stateops.moves.remove};
  - C{mv}: L{kilolock.stateops.moves.move}, within the state or to another
    (C{toState}; Terraform's C{state mv -state-out});
  - C{split}: each part's module moved to its own new state;
  - C{import}: a state file as the next version (L{import_body}).

Serials and lineages follow Terraform: a state that changes gets its
current serial + 1 and keeps its lineage; a state created by a move or a
split (it had no version) gets a new lineage and serial 1, as C{terraform
state mv -state-out} gives a state that did not exist.  A split's states
must not have a version yet.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from attrs import frozen

from kilolock.core.errors import EncryptedState, StateExists, VersionNotFound
from kilolock.core.model import StateKey
from kilolock.stateops.document import (
    WorkingState,
    import_body,
    new_state,
    open_state,
    render_state,
)
from kilolock.stateops.moves import move, move_wanted, remove, remove_wanted
from kilolock.stateops.requests import (
    ImportRequest,
    MoveRequest,
    OperationRequest,
    RemoveRequest,
    SplitRequest,
)
from kilolock.tfstate.address import ModuleStep
from kilolock.tfstate.parse import parse_state

__all__ = ["Planned", "StateExists", "plan_operation"]


@frozen
class Planned:
    """The new bytes of each state an operation changes (in the order they
    are written), and what it did, for its result."""

    writes: tuple[tuple[StateKey, bytes], ...]
    result: dict[str, Any]


def plan_operation(request: OperationRequest, keys: Mapping[str, StateKey],
                   current: Mapping[StateKey, bytes | None],
                   state_file: bytes | None = None) -> Planned:
    """The new bytes of the states C{request} names.

    @param keys: the state of each name the request uses.
    @param current: the current bytes of each of those states (None: none).
    @param state_file: the bytes an import brings.
    @raise kilolock.core.errors.KilolockError: what the operation cannot do (an
        address that names nothing, a taken destination, an encrypted
        state, a state without a version ...).
    """
    source = keys[request.state]
    if isinstance(request, ImportRequest):
        assert state_file is not None
        return _import(source, current[source], state_file, request.force)
    raw = current[source]
    if raw is None:
        raise VersionNotFound("the state has no version yet: there is nothing to change")
    if isinstance(request, RemoveRequest):
        state = open_state(raw, remove_wanted(request.addresses))
        removed = remove(state, request.addresses)
        return Planned(((source, _next(state)),), {"removed": removed})
    if isinstance(request, MoveRequest):
        return _move(request, source, raw, keys, current)
    return _split(request, source, raw, keys, current)


def _next(state: WorkingState) -> bytes:
    """The state's bytes as its next version (serial + 1)."""
    if "serial" not in state.replaced:
        state.replaced["serial"] = state.serial + 1
    return render_state(state)


def _move(request: MoveRequest, source: StateKey, raw: bytes, keys: Mapping[str, StateKey],
          current: Mapping[StateKey, bytes | None]) -> Planned:
    from_, to = request.from_, request.to
    if request.to_state is None:
        state = open_state(raw, move_wanted(from_, to, source_state=True,
                                            destination_state=True))
        moved = move(state, state, from_, to)
        return Planned(((source, _next(state)),), {"moved": _pairs(moved)})
    target = keys[request.to_state]
    state = open_state(raw, move_wanted(from_, to, source_state=True, destination_state=False))
    target_raw = current[target]
    created = target_raw is None
    destination = new_state(state) if target_raw is None else open_state(
        target_raw, move_wanted(from_, to, source_state=False, destination_state=True))
    moved = move(state, destination, from_, to)
    return Planned(((source, _next(state)), (target, _next(destination))),
                   {"moved": _pairs(moved, source.path, target.path),
                    "created": [target.path] if created else []})


def _split(request: SplitRequest, source: StateKey, raw: bytes,
           keys: Mapping[str, StateKey], current: Mapping[StateKey, bytes | None]) -> Planned:
    wanted = [move_wanted(part.module, part.to, source_state=True, destination_state=False)
              for part in request.parts]

    def any_wanted(module: tuple[ModuleStep, ...], document: dict[str, Any]) -> bool:
        return any(one(module, document) for one in wanted)

    state = open_state(raw, any_wanted)
    targets: dict[StateKey, WorkingState] = {}
    moved: list[dict[str, str]] = []
    for part in request.parts:
        target = keys[part.state]
        if current[target] is not None:
            raise StateExists(f"{part.state} already has a version: a split writes new states"
                              " only (move resources into an existing state with mv and"
                              " toState)")
        destination = targets.setdefault(target, new_state(state))
        moved += _pairs(move(state, destination, part.module, part.to, root=True),
                        source.path, target.path)
    writes = ((source, _next(state)),
              *((target, _next(destination)) for target, destination in targets.items()))
    return Planned(writes, {"moved": moved, "created": [key.path for key in targets]})


def _import(key: StateKey, raw: bytes | None, state_file: bytes, force: bool) -> Planned:
    parsed = parse_state(state_file)
    if raw is None:
        body = import_body(state_file, parsed, None, None, force)
    else:
        try:
            current: WorkingState | None = open_state(raw, lambda module, document: False)
        except EncryptedState:
            current = None
        serial = current.serial if current is not None else parse_state(raw).serial
        body = import_body(state_file, parsed, current, serial, force)
    return Planned(((key, body),), {"imported": {"size": len(state_file),
                                                 "rewritten": body is not state_file}})


def _pairs(moved: list[tuple[str, str]], source: str | None = None,
           target: str | None = None) -> list[dict[str, str]]:
    pairs = []
    for old, new in moved:
        pair = {"from": old, "to": new}
        if source is not None and target is not None:
            pair.update(fromState=source, toState=target)
        pairs.append(pair)
    return pairs
