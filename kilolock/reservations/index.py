"""A state's resources as digests: what a merge compares instead of whole
states.  Pure: no Twisted, no I/O; a large state is indexed in a thread.

L{index_state} reads a v4 state's bytes once and keeps, per resource, in the
state's order:

  - the digest of its JSON text exactly as stored (two resources with the
    same text are the same resource, unchanged: nothing more is read);
  - the digest of its metadata (C{provider}, the legacy C{each});
  - per instance object (the current one and each deposed one, by index
    key and deposed key), the digest of the object's I{canonical} form:
    decoded, every field Terraform writes only when it is not its zero
    value left out when it is (C{status}, C{private}, C{dependencies},
    C{identity}, C{identity_schema_version}, ...; C{schema_version: 0} is
    the same as none), numbers by value (C{1.50} is C{1.5}), keys sorted.
    So a state written by another Terraform version, or by a tool with
    other whitespace, indexes its unchanged objects to the same digests;
  - where its text starts in the bytes indexed (so a merge can splice the
    state without reading it again).

and the state's lineage, serial, Terraform version, and its C{outputs} and
C{check_results} as JSON text.  An index is a few percent of its state
(about 110 bytes a resource); L{StateIndex.to_bytes} and
L{StateIndex.from_bytes} store it.  With C{previous} (the index of a
related version), resources whose text is unchanged take their digests from
it, and only the others are decoded.

L{split_state} is how bytes are read: msgspec splits the C{resources} array
into each element's text without building the elements, and checks the
whole text is JSON; text msgspec refuses (what only C{json} accepts: an
escaped lone surrogate, a top-level member Terraform does not write) is read
by L{kilolock.tfstate.scan} instead, which is slower but reads anything
L{kilolock.tfstate.parse} accepts.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import msgspec
from attrs import frozen

from kilolock.core.errors import Conflict, EncryptedState, InvalidState
from kilolock.core.json_fast import REFUSALS
from kilolock.core.text import skip_json_whitespace
from kilolock.reservations.model import (
    AddressSet,
    Claim,
    ReservationSets,
    ResourceId,
    UnitId,
)
from kilolock.tfstate.address import InvalidAddress, Key, format_module, parse_module_path
from kilolock.tfstate.parse import SUPPORTED_VERSION
from kilolock.tfstate.scan import Member, scan_state
from kilolock.tfstate.values import is_json_integer, json_kind

__all__ = ["ClaimNotInState", "DecodedResource", "Instance", "ResourceEntry", "SplitState",
           "StateIndex", "canonical_digest", "changed_claims", "check_claims_exist",
           "index_state", "raw_digest", "split_state"]

#: Bytes of a digest kept (SHA-256, truncated: a collision would make a
#: changed resource look unchanged, never the reverse).
DIGEST_SIZE = 16


def raw_digest(text: bytes | memoryview | msgspec.Raw) -> bytes:
    """The digest of a resource's JSON text as stored."""
    return hashlib.sha256(text).digest()[:DIGEST_SIZE]


# -- canonical values ------------------------------------------------------------

#: Beyond this exponent a whole number stays a decimal (an integer of a
#: million digits is not built for a digest).
_LARGEST_EXPONENT = 400


def _number(text: str) -> int | Decimal:
    """A number with a fraction or an exponent, by value: a whole number is
    an integer (C{1.0} is C{1}), others lose their trailing zeros."""
    sign, digits, exponent = Decimal(text).as_tuple()
    assert isinstance(exponent, int)  # JSON has no NaN nor infinity
    kept = list(digits)
    while len(kept) > 1 and kept[-1] == 0:
        kept.pop()
        exponent += 1
    if not any(kept):
        return 0
    if exponent >= 0 and exponent + len(kept) <= _LARGEST_EXPONENT:
        whole: int = int("".join(map(str, kept))) * pow(10, exponent)
        return -whole if sign else whole
    return Decimal((sign, tuple(kept), exponent))


_CANONICAL_DECODER = msgspec.json.Decoder(float_hook=_number)
_CANONICAL_ENCODER = msgspec.json.Encoder(order="sorted", decimal_format="number")
_JSON_CANONICAL_DECODER = json.JSONDecoder(parse_float=_number)


def _decimal_json(value: Any) -> Any:
    if isinstance(value, Decimal):
        return {"\x00number": str(value)}
    raise TypeError(f"{type(value).__name__} is not JSON")


def decode_canonical(text: bytes | memoryview | msgspec.Raw) -> Any:
    """Decode JSON text with numbers by value (see L{_number})."""
    try:
        return _CANONICAL_DECODER.decode(text)
    except REFUSALS:
        return _JSON_CANONICAL_DECODER.decode(bytes(text).decode("utf-8"))


def canonical_digest(value: Any) -> bytes:
    """The digest of a value decoded by L{decode_canonical}: its JSON with
    keys sorted (text msgspec cannot write, an unpaired surrogate, is
    written by C{json}: the same value always takes the same path)."""
    try:
        text = _CANONICAL_ENCODER.encode(value)
    except (UnicodeEncodeError, TypeError, ValueError, OverflowError):
        text = json.dumps(value, sort_keys=True, separators=(",", ":"),
                          default=_decimal_json).encode()
    return hashlib.sha256(text).digest()[:DIGEST_SIZE]


#: Fields of an instance object Terraform writes only when they are not
#: their zero value (C{omitempty} in statefile/version4.go, and the fields
#: later versions added): the zero value and an absent field are the same.
_ZERO_FIELDS: dict[str, tuple[Any, ...]] = {
    "index_key": (),
    "status": ("",),
    "deposed": ("",),
    "schema_version": (0,),
    "attributes_flat": (),
    "sensitive_attributes": ([],),
    "identity_schema_version": (0,),
    "identity": (),
    "private": ("",),
    "dependencies": ([],),
    "create_before_destroy": (False,),
}


def _is_zero(name: str, value: Any) -> bool:
    if value is None:
        return True
    return any(type(value) is type(zero) and value == zero for zero in _ZERO_FIELDS[name])


def _canonical_object(instance: dict[str, Any]) -> dict[str, Any]:
    """An instance object as Terraform reads it: zero-valued fields left
    out, and no attributes at all the same as empty ones."""
    canonical = {name: value for name, value in instance.items()
                 if name not in _ZERO_FIELDS or not _is_zero(name, value)}
    if canonical.get("attributes") is None and "attributes_flat" not in canonical:
        canonical["attributes"] = {}
    return canonical


# -- a state's text, split -------------------------------------------------------


class _Top(msgspec.Struct, forbid_unknown_fields=True):
    """The members Terraform writes, each as its text; the C{resources}
    array as the text of each element."""

    version: msgspec.Raw = msgspec.Raw()
    terraform_version: msgspec.Raw = msgspec.Raw()
    serial: msgspec.Raw = msgspec.Raw()
    lineage: msgspec.Raw = msgspec.Raw()
    outputs: msgspec.Raw = msgspec.Raw()
    resources: list[msgspec.Raw] | None = None
    check_results: msgspec.Raw = msgspec.Raw()
    encrypted_data: msgspec.Raw = msgspec.Raw()
    encryption_version: msgspec.Raw = msgspec.Raw()
    meta: msgspec.Raw = msgspec.Raw()


_TOP_DECODER = msgspec.json.Decoder(_Top)
_MEMBERS = tuple(name for name in _Top.__struct_fields__ if name != "resources")

#: A resource's text: msgspec's view of the bytes, bytes, or a view of them.
Piece = msgspec.Raw | bytes | memoryview


@frozen
class SplitState:
    """A state's bytes split: each top-level member's text (members the
    state has), and each resource's text in the state's order."""

    members: dict[str, bytes]
    pieces: list[Piece]

    def member(self, name: str) -> Any:
        """A member decoded (None when absent)."""
        text = self.members.get(name)
        return None if text is None else json.loads(text)

    @property
    def encrypted(self) -> bool:
        return "encrypted_data" in self.members or "encryption_version" in self.members


def split_state(raw: bytes) -> SplitState:
    """Split C{raw}, a v4 state or an OpenTofu envelope (see the module's
    docstring).  Nothing below the top level is checked but that the text
    is JSON.

    @raise InvalidState: C{raw} is not a JSON object.
    """
    if not raw or raw.isspace():
        raise InvalidState("the body is empty; send the state as JSON")
    if raw.startswith(b"\xef\xbb\xbf"):
        raise InvalidState("the body starts with a byte order mark; send plain UTF-8 JSON")
    try:
        top = _TOP_DECODER.decode(raw)
    except REFUSALS:
        return _split_slowly(raw)
    members = {name: bytes(text) for name in _MEMBERS
               if len(text := getattr(top, name))}
    return SplitState(members, list(top.resources or ()))


def _split_slowly(raw: bytes) -> SplitState:
    """L{split_state} by L{scan_state}: anything C{json} reads."""
    pieces: list[Piece] = []

    def visit(index: int, resource: Any, text_of: Callable[[], str]) -> None:
        pieces.append(text_of().encode("utf-8"))

    try:
        found: dict[str, Member] = scan_state(raw, visit)
    except EncryptedState:
        found = {}
        for name, member in _envelope_members(raw).items():
            found[name] = member
    return SplitState({name: member.text.encode("utf-8") for name, member in found.items()},
                      pieces)


def _envelope_members(raw: bytes) -> dict[str, Member]:
    try:
        document = json.loads(raw)
    except (ValueError, RecursionError):
        raise InvalidState("the body is not valid JSON") from None
    if not isinstance(document, dict):
        raise InvalidState("the body must be a JSON object")
    return {name: Member(value, json.dumps(value)) for name, value in document.items()}


_WHITESPACE = rb"[ \t\n\r]*"
_OPENING = re.compile(_WHITESPACE + rb"\{")
_MEMBER_NAME = re.compile(_WHITESPACE + rb'(,' + _WHITESPACE + rb')?"([a-z_]+)"'
                          + _WHITESPACE + rb":" + _WHITESPACE)
_FIRST_ELEMENT = re.compile(rb"\[" + _WHITESPACE)
_SEPARATOR = re.compile(_WHITESPACE + rb"," + _WHITESPACE)
_CLOSING = re.compile(_WHITESPACE + rb"\]")


def resource_offsets(raw: bytes, split: SplitState) -> list[int] | None:
    """Where each resource's text starts in C{raw} (split by
    L{split_state}), or None when the top level is not plain enough to
    tell without reading the text again (a member name with an escape, a
    member repeated).  msgspec checked the text is JSON, and gave the
    length of every member and resource: only the whitespace and commas
    between them are read here."""
    opening = _OPENING.match(raw)
    if opening is None:
        return None
    position = opening.end()
    seen: set[str] = set()
    while True:
        match = _MEMBER_NAME.match(raw, position)
        if match is None or (match.group(1) is None) != (not seen):
            return None
        name = match.group(2).decode()
        if name in seen or (name != "resources" and name not in split.members):
            return None
        seen.add(name)
        position = match.end()
        if name == "resources":
            break
        position += len(split.members[name])
    first = _FIRST_ELEMENT.match(raw, position)
    if first is None:
        return None
    position = first.end()
    offsets: list[int] = []
    for index, piece in enumerate(split.pieces):
        if index:
            separator = _SEPARATOR.match(raw, position)
            if separator is None:
                return None
            position = separator.end()
        offsets.append(position)
        position += len(piece)
    if _CLOSING.match(raw, position) is None:
        return None
    return offsets


# -- resources decoded -----------------------------------------------------------


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
        return Instance(key, deposed, canonical_digest(_canonical_object(document)),
                        tuple(dependencies), text)


# -- the index -------------------------------------------------------------------


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


class _Stored(msgspec.Struct, array_like=True, gc=False):
    lineage: str
    serial: int
    terraform_version: str | None
    size: int
    outputs: bytes
    check_results: bytes
    resources: list[tuple[str, str, str, str]]
    entries: list[ResourceEntry]
    offsets: list[int] | None
    lengths: list[int]


_STORED_ENCODER = msgspec.msgpack.Encoder()
_STORED_DECODER = msgspec.msgpack.Decoder(_Stored)


class StateIndex:
    """The index of one version's bytes (see the module's docstring).

    @ivar resources: each resource, in the state's order.
    @ivar entries: what is kept of each (in the same order).
    @ivar offsets: where each one's text starts in the bytes indexed, or
        None when unknown.
    @ivar lengths: the length of each one's text.
    @ivar size: the length of the bytes indexed.
    @ivar outputs: the C{outputs} member's JSON text (C{b"{}"} if none).
    @ivar check_results: the C{check_results} member's JSON text
        (C{b"null"} if none).
    """

    def __init__(self, lineage: str, serial: int, terraform_version: str | None,
                 resources: list[ResourceId], entries: list[ResourceEntry],
                 offsets: list[int] | None, lengths: list[int], size: int,
                 outputs: bytes, check_results: bytes, ordered: bool | None = None) -> None:
        self.lineage = lineage
        self.serial = serial
        self.terraform_version = terraform_version
        self.resources = resources
        self.entries = entries
        self.offsets = offsets
        self.lengths = lengths
        self.size = size
        self.outputs = outputs
        self.check_results = check_results
        self._positions: dict[ResourceId, int] | None = None
        self._by_raw: dict[bytes, int] | None = None
        self._ordered = ordered

    @property
    def ordered(self) -> bool:
        """Whether the resources are in Terraform's order (module, mode,
        type, name: C{sortResourcesV4}), each once."""
        if self._ordered is None:
            self._ordered = all(a < b for a, b in itertools.pairwise(self.resources))
        return self._ordered

    def __repr__(self) -> str:
        return (f"<StateIndex lineage={self.lineage} serial={self.serial}"
                f" resources={len(self.resources)}>")

    def position(self, resource: ResourceId) -> int | None:
        """Where C{resource} is in the state's order (None: not there)."""
        if self._positions is None:
            self._positions = {found: index for index, found in enumerate(self.resources)}
        return self._positions.get(resource)

    def entry(self, resource: ResourceId) -> ResourceEntry | None:
        position = self.position(resource)
        return None if position is None else self.entries[position]

    def by_raw(self, digest: bytes) -> int | None:
        """The position of the resource whose text has C{digest}."""
        if self._by_raw is None:
            self._by_raw = {entry.raw: index for index, entry in enumerate(self.entries)}
        return self._by_raw.get(digest)

    def instances(self) -> Iterator[tuple[ResourceId, Key, str]]:
        """Every object: (resource, index key, deposed key or C{""})."""
        for resource, entry in zip(self.resources, self.entries, strict=True):
            for key, deposed, _ in entry.objects:
                yield resource, key, deposed

    def to_bytes(self) -> bytes:
        """The index as bytes (msgpack), for L{from_bytes}."""
        return _STORED_ENCODER.encode(_Stored(
            self.lineage, self.serial, self.terraform_version, self.size, self.outputs,
            self.check_results, list(self.resources), self.entries, self.offsets,
            self.lengths))

    @classmethod
    def from_bytes(cls, data: bytes) -> StateIndex:
        stored = _STORED_DECODER.decode(data)
        return cls(stored.lineage, stored.serial, stored.terraform_version,
                   stored.resources, stored.entries, stored.offsets, stored.lengths,
                   stored.size,
                   stored.outputs, stored.check_results)


def read_top(split: SplitState) -> tuple[str, int, str | None]:
    """The lineage, serial and Terraform version of a split v4 state.

    @raise EncryptedState: it is an OpenTofu encrypted envelope.
    @raise InvalidState: it is not a v4 state.
    """
    if split.encrypted:
        raise EncryptedState("this version is an OpenTofu encrypted state: the server cannot"
                             " read its resources")
    version = split.member("version")
    if not is_json_integer(version) or version != SUPPORTED_VERSION:
        raise InvalidState("the bytes are not a Terraform state version 4")
    serial, lineage = split.member("serial"), split.member("lineage")
    if not is_json_integer(serial) or serial < 0 or not isinstance(lineage, str):
        raise InvalidState("the state has no integer serial and string lineage")
    terraform_version = split.member("terraform_version")
    return lineage, serial, terraform_version if isinstance(terraform_version, str) else None


def index_state(raw: bytes, previous: StateIndex | None = None) -> StateIndex:
    """Index a stored v4 state (see the module's docstring).

    @param previous: the index of a related version: resources whose text
        it has are not decoded again.
    @raise EncryptedState: C{raw} is an OpenTofu encrypted envelope.
    @raise InvalidState: C{raw} is not a v4 state, or it lists a resource
        twice.
    """
    split = split_state(raw)
    lineage, serial, terraform_version = read_top(split)
    reader = ResourceReader()
    resources: list[ResourceId] = []
    entries: list[ResourceEntry] = []
    for position, piece in enumerate(split.pieces):
        digest = raw_digest(piece)
        known = previous.by_raw(digest) if previous is not None else None
        if known is not None:
            assert previous is not None
            resources.append(previous.resources[known])
            entries.append(previous.entries[known])
            continue
        decoded = reader.read(piece, position, digest)
        resources.append(decoded.id)
        entries.append(decoded.entry())
    index = StateIndex(lineage, serial, terraform_version, resources, entries,
                       resource_offsets(raw, split), [len(piece) for piece in split.pieces],
                       len(raw),
                       split.members.get("outputs", b"{}"),
                       split.members.get("check_results", b"null"))
    _check_unique(index)
    return index


def _check_unique(index: StateIndex) -> None:
    if len({*index.resources}) != len(index.resources):
        seen: set[ResourceId] = set()
        for position, resource in enumerate(index.resources):
            if resource in seen:
                raise InvalidState(f"resources[{position}] repeats a resource listed before it")
            seen.add(resource)


# -- claims and the state --------------------------------------------------------


class ClaimNotInState(Conflict):
    """(409) A claim names an instance the state does not have."""

    code = "address_not_in_state"

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field

    def details(self) -> dict[str, Any]:
        return {"field": self.field}


def check_claims_exist(sets: ReservationSets, index: StateIndex,
                       fields: tuple[str, str] = ("write", "read")) -> None:
    """Return if every claim of C{sets} names something C{index}'s state
    has -- an instance (a current or deposed object of it), a resource with
    an instance, a module with a resource -- except write claims marked
    C{create}.

    @param fields: how the body names the write and the read set.
    @raise ClaimNotInState: naming the first claim that does not, by its
        field and position.
    """
    units: set[UnitId] = set()
    deposed: set[tuple[UnitId, str]] = set()
    resources: set[ResourceId] = set()
    modules: set[str] = set()
    for resource, key, deposed_key in index.instances():
        unit = (*resource, key)
        units.add(unit)
        if deposed_key:
            deposed.add((unit, deposed_key))
        resources.add(resource)
        module = resource[0]
        while module and module not in modules:
            modules.add(module)
            module = _parent_module(module)
    for field, claims in zip(fields, (sets.write, sets.read), strict=True):
        _check_set(field, claims, units, deposed, resources, modules)


def _check_set(field: str, claims: AddressSet, units: set[UnitId],
               deposed: set[tuple[UnitId, str]], resources: set[ResourceId],
               modules: set[str]) -> None:
    for position, claim in enumerate(claims):
        if claim.create:
            continue
        target = claim.target
        if target.is_module:
            found = target.module_text in modules
        else:
            assert target.mode is not None and target.type is not None
            assert target.name is not None
            resource = (target.module_text, target.mode, target.type, target.name)
            unit = (*resource, target.key)
            if claim.deposed is not None:
                found = (unit, claim.deposed) in deposed
            elif target.keyed:
                found = unit in units
            else:
                found = resource in resources
        if not found:
            hint = "" if claim.deposed is not None or field != "write" else (
                ' (mark it {"address": ..., "create": true} if the plan creates it)')
            raise ClaimNotInState(f"{field}[{position}]",
                                  f"{field}[{position}]: {claim} is not in the state{hint}")


def _parent_module(module: str) -> str:
    """The module path one step up (C{""} from a first-level module)."""
    steps = parse_module_path(module)
    return format_module(steps[:-1])


def objects_by_unit(entry: ResourceEntry | None) -> dict[Key, frozenset[tuple[str, bytes]]]:
    """The units of a resource entry: each instance key's objects."""
    if entry is None:
        return {}
    units: dict[Key, set[tuple[str, bytes]]] = {}
    for key, deposed, digest in entry.objects:
        units.setdefault(key, set()).add((deposed, digest))
    return {key: frozenset(objects) for key, objects in units.items()}


def changed_claims(sets: ReservationSets, base: StateIndex, main: StateIndex
                   ) -> tuple[Claim, ...]:
    """The claims of C{sets} naming something that changed between the
    reservation's pinned snapshot (C{base}) and the current version
    (C{main}): an instance's objects (added, removed, changed), or, for a
    claim on a whole resource or a module, the resource's metadata.
    Claiming them now would make a plan made on the snapshot stale: the
    answer is to plan again."""
    changed: set[UnitId] = set()
    changed_headers: set[ResourceId] = set()
    for resource in {*base.resources, *main.resources}:
        before, after = base.entry(resource), main.entry(resource)
        if before is not None and after is not None and before.raw == after.raw:
            continue
        units_before, units_after = objects_by_unit(before), objects_by_unit(after)
        changed.update((*resource, key) for key in {*units_before, *units_after}
                       if units_before.get(key) != units_after.get(key))
        if (before is None) != (after is None) or (
                before is not None and after is not None and before.header != after.header):
            changed_headers.add(resource)
    found: list[Claim] = []
    for claims in (sets.write, sets.read):
        for claim in claims:
            single = AddressSet((claim,))
            if any(single.covers_instance(unit[:4], unit[4]) for unit in changed) or any(
                    single.covers_resource(resource) for resource in changed_headers):
                found.append(claim)
    return tuple(found)
