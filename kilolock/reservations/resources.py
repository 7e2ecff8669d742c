"""A state's resources read from their texts: each one's address,
metadata and instance objects, with the objects' canonical digests and
texts.  Pure: no Twisted, no I/O.

A merge reads only the resources whose text differs between the states it
compares (L{ResourceReader}); what an index keeps of a resource is its
L{ResourceEntry}.  Errors name the position (C{resources[3].instances[0]
.index_key}), never a value.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
from attrs import frozen

from kilolock.core.errors import InvalidState
from kilolock.core.json_fast import REFUSALS
from kilolock.core.text import skip_json_whitespace
from kilolock.reservations.canonical import (
    canonical_digest,
    canonical_object,
    decode_canonical,
    raw_digest,
)
from kilolock.reservations.model import ResourceId
from kilolock.reservations.text import Piece
from kilolock.tfstate.address import InvalidAddress, Key, format_module, parse_module_path
from kilolock.tfstate.values import is_json_integer, json_kind

__all__ = ["DecodedResource", "Instance", "Piece", "ResourceEntry", "ResourceReader",
           "objects_by_unit"]

@frozen
class Instance:
    """One instance object of a decoded resource."""

    key: Key
    deposed: str
    digest: bytes
    #: Its C{dependencies} (configuration addresses).
    dependencies: tuple[str, ...]
    #: Its JSON text as the resource holds it.
    text: bytes


@frozen
class DecodedResource:
    """A resource read from its text."""

    id: ResourceId
    provider: str
    each: str
    header: bytes
    instances: tuple[Instance, ...]
    raw: bytes

    def units(self) -> dict[Key, frozenset[tuple[str, bytes]]]:
        """Its objects by instance key: (deposed key, digest) of each."""
        units: dict[Key, set[tuple[str, bytes]]] = {}
        for instance in self.instances:
            units.setdefault(instance.key, set()).add((instance.deposed, instance.digest))
        return {key: frozenset(objects) for key, objects in units.items()}

    def entry(self) -> ResourceEntry:
        return ResourceEntry(self.raw, self.header, tuple(
            (instance.key, instance.deposed, instance.digest) for instance in self.instances))


class _Shape(msgspec.Struct):
    """A resource with each instance's text."""

    mode: Any = None
    type: Any = None
    name: Any = None
    module: Any = None
    each: Any = None
    provider: Any = None
    instances: list[msgspec.Raw] | None = None


class _Header(msgspec.Struct):
    mode: Any = None
    type: Any = None
    name: Any = None
    module: Any = None


_SHAPE_DECODER = msgspec.json.Decoder(_Shape)
_HEADER_DECODER = msgspec.json.Decoder(_Header)


def _instance_texts(text: str) -> list[str]:
    """The text of each element of the (last) C{instances} array of a
    resource's JSON text."""
    decoder = json.JSONDecoder()
    position = skip_json_whitespace(text, 0) + 1
    found: list[str] = []
    while True:
        position = skip_json_whitespace(text, position)
        if text[position] == "}":
            return found
        name, position = decoder.raw_decode(text, position)
        position = skip_json_whitespace(text, skip_json_whitespace(text, position) + 1)
        if name == "instances" and text[position] == "[":
            found = []
            position = skip_json_whitespace(text, position + 1)
            while text[position] != "]":
                _, end = decoder.raw_decode(text, position)
                found.append(text[position:end])
                position = skip_json_whitespace(text, end)
                if text[position] == ",":
                    position = skip_json_whitespace(text, position + 1)
            position += 1
        else:
            _, position = decoder.raw_decode(text, position)
        position = skip_json_whitespace(text, position)
        if text[position] == ",":
            position += 1


class ResourceReader:
    """Reads resources' texts, remembering the module paths it has parsed
    (a state has few).  @param where: how errors name the state
    (C{"resources"}: the body's resources array)."""

    def __init__(self, where: str = "resources") -> None:
        self.where = where
        self._modules: dict[str, str] = {}

    def module(self, text: Any, position: int) -> str:
        """A state's C{module} field as Terraform spells it."""
        if text is None or text == "":
            return ""
        if not isinstance(text, str):
            raise InvalidState(f"{self.where}[{position}].module must be a string")
        known = self._modules.get(text)
        if known is None:
            try:
                known = format_module(parse_module_path(text))
            except InvalidAddress:
                raise InvalidState(f"{self.where}[{position}].module is not a module path"
                                   ) from None
            self._modules[text] = known
        return known

    def _id(self, shape: _Shape | _Header, position: int) -> ResourceId:
        if shape.mode not in ("managed", "data"):
            raise InvalidState(f'{self.where}[{position}].mode must be "managed" or "data"')
        for name in ("type", "name"):
            if not isinstance(getattr(shape, name), str):
                raise InvalidState(f"{self.where}[{position}] has no string {name}")
        return (self.module(shape.module, position), shape.mode, shape.type, shape.name)

    def header(self, piece: Piece, position: int) -> ResourceId:
        """The resource a text is (module, mode, type, name)."""
        try:
            shape = _HEADER_DECODER.decode(piece)
        except REFUSALS:
            document = self._decoded(piece, position)
            if not isinstance(document, dict):
                raise InvalidState(f"{self.where}[{position}] must be a JSON object") from None
            shape = _Header(document.get("mode"), document.get("type"), document.get("name"),
                            document.get("module"))
        return self._id(shape, position)

    def read(self, piece: Piece, position: int, digest: bytes | None = None) -> DecodedResource:
        """A resource's text decoded (C{digest}: its raw digest, if known)."""
        try:
            shape = _SHAPE_DECODER.decode(piece)
        except REFUSALS:
            shape = self._shape_slowly(piece, position)
        resource = self._id(shape, position)
        for name in ("provider", "each"):
            if getattr(shape, name) is not None and not isinstance(getattr(shape, name), str):
                raise InvalidState(f"{self.where}[{position}].{name} must be a string")
        provider, each = shape.provider or "", shape.each or ""
        instances: list[Instance] = []
        seen: set[tuple[Key, str]] = set()
        for index, text in enumerate(shape.instances or ()):
            instance = self._instance(bytes(text), position, index)
            if (instance.key, instance.deposed) in seen:
                raise InvalidState(f"{self.where}[{position}].instances[{index}] repeats an"
                                   " instance object")
            seen.add((instance.key, instance.deposed))
            instances.append(instance)
        return DecodedResource(
            resource, provider, each, canonical_digest({"provider": provider, "each": each}),
            tuple(instances), digest if digest is not None else raw_digest(piece))

    def _decoded(self, piece: Piece, position: int) -> Any:
        """A resource's text decoded by C{json} (what msgspec refused).

        @raise InvalidState: it is not JSON C{json} reads either.
        """
        try:
            return json.loads(bytes(piece).decode("utf-8"))
        except UnicodeDecodeError:
            raise InvalidState("the state is not valid UTF-8") from None
        except (ValueError, RecursionError):
            raise InvalidState(f"{self.where}[{position}] is not valid JSON") from None

    def _shape_slowly(self, piece: Piece, position: int) -> _Shape:
        """A text msgspec refused, split by C{json} (which must accept it):
        each instance's text is cut from the resource's, as stored."""
        text = bytes(piece).decode("utf-8", "replace")
        document = self._decoded(piece, position)
        if not isinstance(document, dict):
            raise InvalidState(f"{self.where}[{position}] must be a JSON object")
        instances = document.get("instances")
        if instances is not None and not isinstance(instances, list):
            raise InvalidState(f"{self.where}[{position}].instances must be a list")
        return _Shape(document.get("mode"), document.get("type"), document.get("name"),
                      document.get("module"), document.get("each"), document.get("provider"),
                      [msgspec.Raw(element.encode("utf-8"))
                       for element in _instance_texts(text)] if instances else None)

    def _instance(self, text: bytes, position: int, index: int) -> Instance:
        where = f"{self.where}[{position}].instances[{index}]"
        document = decode_canonical(text)
        if not isinstance(document, dict):
            raise InvalidState(f"{where} must be a JSON object, not {json_kind(document)}")
        key = document.get("index_key")
        if key is not None and not isinstance(key, str) and not is_json_integer(key):
            raise InvalidState(f"{where}.index_key must be an integer or a string")
        deposed = document.get("deposed") or ""
        if not isinstance(deposed, str):
            raise InvalidState(f"{where}.deposed must be a string")
        dependencies = document.get("dependencies") or []
        if not isinstance(dependencies, list) or not all(
                isinstance(entry, str) for entry in dependencies):
            raise InvalidState(f"{where}.dependencies must be a list of strings")
        return Instance(key, deposed, canonical_digest(canonical_object(document)),
                        tuple(dependencies), text)


class ResourceEntry(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """What an index keeps of one resource.  (It holds bytes and tuples of
    scalars, never a cycle: the garbage collector need not track it, and
    loading the index of a large state takes half the time.)"""

    #: L{raw_digest} of its text.
    raw: bytes
    #: The digest of its metadata.
    header: bytes
    #: (index key, deposed key or C{""}, canonical digest) of each object.
    objects: tuple[tuple[Key, str, bytes], ...]

    def units(self) -> dict[Key, dict[str, bytes]]:
        """Its objects by instance key, then deposed key."""
        units: dict[Key, dict[str, bytes]] = {}
        for key, deposed, digest in self.objects:
            units.setdefault(key, {})[deposed] = digest
        return units

    def same_as(self, other: ResourceEntry | None) -> bool:
        """Whether C{other} is the same resource, object for object."""
        if other is None:
            return False
        if self.raw == other.raw:
            return True
        return self.header == other.header and set(self.objects) == set(other.objects)


def objects_by_unit(entry: ResourceEntry | None) -> dict[Key, frozenset[tuple[str, bytes]]]:
    """The units of a resource entry: each instance key's objects."""
    if entry is None:
        return {}
    units: dict[Key, set[tuple[str, bytes]]] = {}
    for key, deposed, digest in entry.objects:
        units.setdefault(key, set()).add((deposed, digest))
    return {key: frozenset(objects) for key, objects in units.items()}
