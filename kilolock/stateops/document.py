"""A stored state opened for refactoring: its resources one by one, changed
in place, written back as a new version.  Pure: no Twisted, no I/O.

L{open_state} reads a v4 state with L{kilolock.tfstate.scan}: each resource
is kept as its text as stored, and decoded only when the caller's
C{wanted} says it will be changed (so a 120 MB state is never a whole
document of Python objects).  L{render_state} writes the state back: the
resources in Terraform's order (module, mode, type, name; instances by key),
untouched ones byte for byte as they were, changed ones re-encoded, and the
other top-level members (outputs, check results, ...) as stored.

L{import_body} decides what a state file becomes when imported over a
state (Terraform's C{state push} checks).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from attrs import define, field

from kilolock.core.errors import Conflict
from kilolock.core.model import ParsedState
from kilolock.tfstate.address import InvalidAddress, ModuleStep, format_module, parse_module_path
from kilolock.tfstate.diff import restore_body
from kilolock.tfstate.scan import Member, scan_state

__all__ = ["Resource", "WorkingState", "import_body", "new_state", "open_state",
           "render_state"]

#: Terraform's order of a state's top-level members.
_MEMBER_ORDER = ("version", "terraform_version", "serial", "lineage", "outputs")


class LineageMismatch(Conflict):
    code = "lineage_mismatch"


class SerialTooLow(Conflict):
    code = "serial_too_low"


@define(eq=False)
class Resource:
    """One resource of a state.  C{text} is its JSON as stored, until it is
    changed; C{document} is its decoded form, once needed (L{decoded})."""

    module: tuple[ModuleStep, ...]
    mode: str
    type: str
    name: str
    text: str | None = None
    document: dict[str, Any] | None = None

    @property
    def module_text(self) -> str:
        return format_module(self.module)

    def decoded(self) -> dict[str, Any]:
        """The decoded resource (decoded from its text on first use)."""
        if self.document is None:
            assert self.text is not None
            self.document = json.loads(self.text)
        return self.document

    def changed(self) -> dict[str, Any]:
        """The decoded resource, marked as changed (it is re-encoded)."""
        document = self.decoded()
        self.text = None
        return document

    def instances(self) -> list[dict[str, Any]]:
        instances = self.decoded().get("instances")
        return instances if isinstance(instances, list) else []

    def sort_key(self) -> tuple[str, str, str, str]:
        return (self.module_text, self.mode, self.type, self.name)

    def render(self) -> str:
        if self.text is not None:
            return self.text
        document = self.decoded()
        document["instances"] = sorted(document.get("instances") or [], key=_instance_order)
        return json.dumps(document, indent=2, ensure_ascii=False).replace("\n", "\n    ")


def _instance_order(instance: Any) -> tuple[int, int, str, str]:
    """Terraform's order of instances: no key, then integer keys, then
    string keys; deposed objects after the current one."""
    key = instance.get("index_key") if isinstance(instance, dict) else None
    deposed = str(instance.get("deposed") or "") if isinstance(instance, dict) else ""
    if key is None:
        return (0, 0, "", deposed)
    if isinstance(key, (int, float)) and not isinstance(key, bool):
        return (1, int(key), "", deposed)
    return (2, 0, str(key), deposed)


@define(eq=False)
class WorkingState:
    """A state being refactored: its top-level members and its resources."""

    members: dict[str, Member]
    resources: list[Resource] = field(factory=list)
    #: Values replacing members when written (serial, lineage).
    replaced: dict[str, Any] = field(factory=dict)

    @property
    def serial(self) -> int:
        return int(self.members["serial"].value)

    @property
    def lineage(self) -> str:
        return str(self.members["lineage"].value)

    def instance_addresses(self) -> Iterator[tuple[Resource, dict[str, Any]]]:
        """Every instance object (decoding every resource)."""
        for resource in self.resources:
            for instance in resource.instances():
                yield resource, instance


#: Decides, from a decoded resource, whether it must stay decoded.
Wanted = Callable[[tuple[ModuleStep, ...], dict[str, Any]], bool]


def open_state(raw: bytes, wanted: Wanted) -> WorkingState:
    """Read the v4 state C{raw}; resources C{wanted} accepts stay decoded.

    @raise kilolock.core.errors.EncryptedState: C{raw} is an encrypted envelope.
    @raise kilolock.core.errors.InvalidState: C{raw} is not a v4 state.
    """
    resources: list[Resource] = []
    modules: dict[str, tuple[ModuleStep, ...]] = {}

    def visit(index: int, resource: Any, text_of: Callable[[], str]) -> None:
        if not isinstance(resource, dict):
            return
        module_text = resource.get("module") or ""
        module = modules.get(module_text)
        if module is None:
            try:
                module = modules[module_text] = parse_module_path(str(module_text))
            except InvalidAddress:
                raise InvalidAddress(f"resources[{index}].module is not a module path") \
                    from None
        keep = wanted(module, resource)
        resources.append(Resource(module, str(resource.get("mode")), str(resource.get("type")),
                                  str(resource.get("name")), text=text_of(),
                                  document=resource if keep else None))

    return WorkingState(scan_state(raw, visit), resources)


def new_state(like: WorkingState) -> WorkingState:
    """An empty state for resources moved out of C{like}: Terraform's
    version of C{like}, a new lineage, serial 1 (what C{terraform state mv
    -state-out} writes to a state that does not exist yet)."""
    members: dict[str, Member] = {name: like.members[name]
                                  for name in ("version", "terraform_version")
                                  if name in like.members}
    members["outputs"] = Member({}, "{}")
    state = WorkingState(members)
    state.replaced.update(serial=1, lineage=str(uuid.uuid4()))
    return state


def render_state(state: WorkingState) -> bytes:
    """The state as bytes (see the module's docstring).  It consumes
    C{state}: each resource's text is let go once encoded, so a large state
    is never held as text and as bytes twice over."""
    ordered = sorted(state.resources, key=Resource.sort_key)
    texts: dict[str, str] = {name: member.text for name, member in state.members.items()}
    for name, value in state.replaced.items():
        texts[name] = json.dumps(value, ensure_ascii=False)
    head = [f'  "{name}": {texts[name]}' for name in _MEMBER_ORDER if name in texts]
    tail = [f"  {json.dumps(name, ensure_ascii=False)}: {text}"
            for name, text in texts.items() if name not in _MEMBER_ORDER]
    if "check_results" not in texts:
        tail.append('  "check_results": null')
    pieces = [("{\n" + ",\n".join(head) + ',\n  "resources": [').encode()]
    for position, resource in enumerate(ordered):
        pieces.append((",\n    " if position else "\n    ").encode()
                      + resource.render().encode("utf-8"))
        resource.text = resource.document = None
    state.resources = []
    pieces.append(("\n  ]" if ordered else "]").encode())
    pieces.append(("".join(",\n" + part for part in tail) + "\n}\n").encode("utf-8"))
    return b"".join(pieces)


def import_body(raw: bytes, parsed: ParsedState, current: WorkingState | None,
                current_serial: int | None, force: bool) -> bytes:
    """What a state file C{raw} (parsed as C{parsed}) becomes when imported
    over a state whose current version is C{current} (None: no version, or
    an encrypted one of serial C{current_serial}): Terraform's C{state
    push} checks unless C{force} -- an unrelated lineage or a lower serial
    is refused while the current state has resources or outputs -- and the
    file itself when its serial is above the current one, else the file
    with the current serial + 1.

    @raise LineageMismatch: (409) an unrelated state.
    @raise SerialTooLow: (409) an older state.
    @raise kilolock.core.errors.EncryptedState: an encrypted file whose serial
        is not above the current one (its serial cannot be rewritten).
    """
    if current_serial is None:
        return raw
    if not force and current is not None and not _is_empty(current):
        if current.lineage != parsed.lineage:
            raise LineageMismatch(f"the file's lineage is {parsed.lineage}, the state's"
                                  f" {current.lineage}: an unrelated state (force imports it)")
        if parsed.serial < current_serial:
            raise SerialTooLow(f"the file's serial {parsed.serial} is below the state's"
                               f" {current_serial}: an older state (force imports it)")
    if parsed.serial > current_serial:
        return raw
    return restore_body(raw, current_serial + 1, parsed.lineage)


def _is_empty(state: WorkingState) -> bool:
    """Terraform's State.Empty(): no resource instances and no outputs."""
    outputs = state.members.get("outputs")
    if outputs is not None and outputs.value:
        return False
    return not any(resource.instances() for resource in state.resources)
