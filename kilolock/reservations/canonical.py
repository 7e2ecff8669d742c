"""An instance object's canonical form, and the digests a merge compares.
Pure: no Twisted, no I/O.

Two texts of one object must digest alike whoever wrote them: every field
Terraform writes only when it is not its zero value is left out when it is
(C{status}, C{private}, C{dependencies}, C{identity},
C{identity_schema_version}, ...; C{schema_version: 0} is the same as none),
numbers go by value (C{1.50} is C{1.5}, C{1.0} is C{1}), keys are sorted.
So a state written by another Terraform version, or by a tool with other
whitespace, digests its unchanged objects as Terraform's own text does.
"""

from __future__ import annotations

import hashlib
import json
from decimal import Decimal
from typing import Any

import msgspec

from kilolock.core.json_fast import REFUSALS

__all__ = ["DIGEST_SIZE", "canonical_digest", "canonical_object", "decode_canonical",
           "raw_digest"]

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


def canonical_object(instance: dict[str, Any]) -> dict[str, Any]:
    """An instance object as Terraform reads it: zero-valued fields left
    out, and no attributes at all the same as empty ones."""
    canonical = {name: value for name, value in instance.items()
                 if name not in _ZERO_FIELDS or not _is_zero(name, value)}
    if canonical.get("attributes") is None and "attributes_flat" not in canonical:
        canonical["attributes"] = {}
    return canonical
