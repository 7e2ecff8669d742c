"""A slice of a stored state: some of its resources, or only its outputs.
Pure: no Twisted, no I/O; the native API runs it in a thread for large states.

A L{Selector} names what to keep: resources by module path, by type, by
address (criteria of one kind are alternatives, kinds combine: C{module} and
C{type} keep the resources of that type in that module), and whether the
outputs come along.  Module and address criteria follow Terraform's
addresses (L{kilolock.tfstate.address}): C{module.net} is the module instance
C{module.net} and everything below it; C{terraform_data.web} every instance
of that resource; C{terraform_data.web[0]} one instance.

The slice is read with L{kilolock.tfstate.scan} straight from the stored
bytes, one resource at a time, keeping only what is selected, and answered

  - as a v4 state document (L{slice_document}): the version, Terraform
    version, serial and lineage of the stored version, the selected
    resources exactly as stored (a resource of which only some instances are
    selected is re-encoded with those instances), their instances'
    C{dependencies} as stored, the outputs when asked for (else none), no
    check results.  Terraform reads it as any other state;
  - or projected (L{slice_projection}): the resource rows, dependencies and
    outputs of L{kilolock.tfstate.projection}, sensitive values redacted.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from attrs import define, field, frozen

from kilolock.core.errors import BadRequest, InvalidField
from kilolock.tfstate.address import InvalidAddress, ModuleStep, Target, parse_module_path
from kilolock.tfstate.diff import output_document
from kilolock.tfstate.projection import StreamedResources, project_state
from kilolock.tfstate.scan import Member, scan_state

__all__ = ["Selector", "SliceResult", "slice_document", "slice_projection", "slice_state"]


@frozen
class Selector:
    """What a slice keeps (see the module's docstring)."""

    modules: tuple[Target, ...] = ()
    types: tuple[str, ...] = ()
    addresses: tuple[Target, ...] = ()
    outputs: bool = False

    def __attrs_post_init__(self) -> None:
        if not (self.modules or self.types or self.addresses or self.outputs):
            raise BadRequest("name what to fetch: module, type, address or outputs")
        for module in self.modules:
            if not module.is_module:
                raise InvalidField("module", f"module: {module} is not a module address"
                                             " (module.NAME)")

    @property
    def selects_resources(self) -> bool:
        return bool(self.modules or self.types or self.addresses)

    def keeps_resource(self, module: tuple[ModuleStep, ...], mode: str, type_: str,
                       name: str) -> bool:
        """Whether some instance of this resource may be kept (its module and
        type match; an address names it or something containing it)."""
        if not self.selects_resources:
            return False
        if self.modules and not any(m.module_contains(module) for m in self.modules):
            return False
        if self.types and type_ not in self.types:
            return False
        return not self.addresses or any(
            address.touches_resource(module, mode, type_, name) for address in self.addresses)

    def keeps_instance(self, module: tuple[ModuleStep, ...], mode: str, type_: str,
                       name: str, key: Any) -> bool:
        """Whether an instance of a resource L{keeps_resource} accepted is kept."""
        return not self.addresses or any(
            address.contains_instance(module, mode, type_, name, key)
            for address in self.addresses)


@define
class SliceResult:
    """The selected resources (text as stored, or re-encoded), their decoded
    form when asked for, and the state's top-level members."""

    members: dict[str, Member] = field(factory=dict)
    texts: list[str] = field(factory=list)
    documents: list[dict[str, Any]] = field(factory=list)


def slice_state(raw: bytes, selector: Selector, decoded: bool = False) -> SliceResult:
    """Read the selected resources of the stored state C{raw}; with
    C{decoded}, keep them decoded too.

    @raise kilolock.core.errors.EncryptedState: C{raw} is an encrypted envelope.
    """
    result = SliceResult()
    modules: dict[str, tuple[ModuleStep, ...]] = {}

    def visit(index: int, resource: Any, text_of: Callable[[], str]) -> None:
        if not isinstance(resource, dict):
            return
        module = _module_path(modules, resource.get("module"))
        mode, type_, name = (str(resource.get(part)) for part in ("mode", "type", "name"))
        if not selector.keeps_resource(module, mode, type_, name):
            return
        instances = resource.get("instances") or []
        kept = [instance for instance in instances
                if selector.keeps_instance(module, mode, type_, name,
                                           instance.get("index_key"))]
        if instances and not kept:
            return
        if len(kept) == len(instances):
            result.texts.append(text_of())
        else:
            resource = {**resource, "instances": kept}
            result.texts.append(json.dumps(resource, indent=2, ensure_ascii=False))
        if decoded:
            result.documents.append(resource)

    result.members = scan_state(raw, visit)
    return result


#: What an unreadable C{module} field stands for: a path no address names.
_UNNAMED = (ModuleStep("\x00"),)


def _module_path(known: dict[str, tuple[ModuleStep, ...]], text: Any) -> tuple[ModuleStep, ...]:
    """The parsed module path of a resource's C{module} field (cached)."""
    text = text if isinstance(text, str) else ""
    found = known.get(text)
    if found is None:
        try:
            found = parse_module_path(text)
        except InvalidAddress:
            found = _UNNAMED
        known[text] = found
    return found


def slice_document(raw: bytes, selector: Selector) -> bytes:
    """The slice as a v4 state document (see the module's docstring)."""
    found = slice_state(raw, selector)
    members = found.members
    head = {name: members[name].text for name in ("version", "terraform_version", "serial",
                                                   "lineage") if name in members}
    outputs = members["outputs"].text if selector.outputs and "outputs" in members else "{}"
    parts = [f'  "{name}": {text}' for name, text in head.items()]
    parts.append(f'  "outputs": {outputs}')
    resources = ",\n    ".join(found.texts)
    parts.append('  "resources": [' + (f"\n    {resources}\n  " if found.texts else "") + "]")
    parts.append('  "check_results": null')
    return ("{\n" + ",\n".join(parts) + "\n}\n").encode("utf-8")


def slice_projection(raw: bytes, selector: Selector) -> dict[str, Any]:
    """The slice projected: C{serial}, C{lineage}, C{resources} (rows with
    attributes redacted), C{dependencies} and C{outputs} (only with
    C{selector.outputs}; sensitive values withheld)."""
    found = slice_state(raw, selector, decoded=True)
    streamed = StreamedResources()
    for resource in found.documents:
        streamed.add(resource)
    members = found.members
    outputs = members["outputs"].value if selector.outputs and "outputs" in members else None
    projection = project_state({"outputs": outputs, "resources": streamed.marker}, streamed)
    return {
        "serial": members["serial"].value if "serial" in members else None,
        "lineage": members["lineage"].value if "lineage" in members else None,
        "resources": [{
            "address": row.address, "module": row.module, "mode": row.mode, "type": row.type,
            "name": row.name, "provider": row.provider,
            "indexKey": None if row.index_key is None else json.loads(row.index_key),
            "deposed": row.deposed, "attributes": json.loads(row.attributes),
        } for row in projection.resources],
        "dependencies": [{"address": row.address, "dependsOn": row.depends_on}
                         for row in projection.dependencies],
        "outputs": [output_document(row.name, row.type, row.value, row.sensitive)
                    for row in projection.outputs],
    }
