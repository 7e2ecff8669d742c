"""Values to and from SQL: how a state's projection and bytea travel.

Bytes come back from the pool as bytea hex text (L{bytes_from_hex}); a
write's projection goes out pre-quoted as three JSON arrays
(L{WriteParameters}), so that the quoting of a large one can run in a
thread.  Pure functions and values: no I/O, no Twisted.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from json.encoder import encode_basestring_ascii as _encode_json_string
from typing import Any

from attrs import define, field
from psycopg2.extensions import ISQLQuote

from kilolock.core.model import Projection, StateUpload

__all__ = ["SQLLiteral", "WriteParameters", "bytes_from_hex"]

#: Bytes quoted or decoded per step, so that a thread doing it releases the
#: GIL often.
_QUOTING_CHUNK = 1 << 22


def bytes_from_hex(hex_text: str) -> bytes:
    """Decode a bytea's hex text (C{\\x} and two digits a byte), a few MB at
    a time so that a decoding thread releases the GIL often."""
    if not hex_text.startswith("\\x"):
        raise ValueError("expected bytea in hex format")
    return b"".join(bytes.fromhex(hex_text[start:start + 2 * _QUOTING_CHUNK])
                    for start in range(2, len(hex_text), 2 * _QUOTING_CHUNK))


class SQLLiteral:
    """A query parameter already quoted as SQL, which psycopg2 splices in as
    it is.  Big values are quoted in a thread, so the reactor thread does not
    spend a second escaping a 100 MB state."""

    def __init__(self, quoted: bytes) -> None:
        self.quoted = quoted

    def __conform__(self, protocol: Any) -> SQLLiteral | None:
        return self if protocol is ISQLQuote else None

    def getquoted(self) -> bytes:
        return self.quoted


def _text_literal(parts: Iterable[str]) -> SQLLiteral:
    """The concatenation of C{parts} (text without NUL, such as JSON) as an
    SQL string literal, quoted part by part."""
    quoted = [b"'"]
    quoted.extend(part.replace("'", "''").encode("utf-8") for part in parts)
    quoted.append(b"'")
    return SQLLiteral(b"".join(quoted))


def _text(value: str | None) -> str:
    """C{json.dumps(value)} for text or None, without its per-call overhead."""
    return "null" if value is None else _encode_json_string(value)


@define
class WriteParameters:
    """What a write sends besides small values: the projection as three JSON
    arrays of row objects (parameters of the schema's C{kl_write_state}),
    pre-quoted, and their digests.  Attribute JSON is spliced in as it is,
    never parsed again: the projection made it storable as jsonb
    (L{kilolock.tfstate.projection})."""

    resources: SQLLiteral
    dependencies: SQLLiteral
    outputs: SQLLiteral
    resource_count: int = field(default=0)
    #: SHA-256 (hex) of the resources, dependencies and outputs JSON.
    digests: tuple[str, str, str] = field(default=("", "", ""))

    def projection_parameters(self) -> dict[str, Any]:
        """The projection's parameters of C{kl_write_state}: the database
        replaces a table only where its stored digest differs."""
        return {"digests": list(self.digests), "resources": self.resources,
                "dependencies": self.dependencies, "outputs": self.outputs}

    @classmethod
    def of(cls, upload: StateUpload) -> WriteParameters:
        """Quote C{upload}'s projection."""
        projection = upload.parsed.projection or Projection()
        # One f-string a row (the text fields of a row are str, deposed may
        # be None): a third cheaper than concatenating its pieces.
        quote, text = _encode_json_string, _text
        resources = [
            f'{"," if index else ""}{{"address":{quote(row.address)}'
            f',"module":{quote(row.module)},"mode":{quote(row.mode)}'
            f',"type":{quote(row.type)},"name":{quote(row.name)}'
            f',"provider":{quote(row.provider)}'
            f',"index_key":{"null" if row.index_key is None else row.index_key}'
            f',"deposed":{text(row.deposed)},"attributes":{row.attributes}}}'
            for index, row in enumerate(projection.resources)]
        dependencies = json.dumps([{"address": row.address, "depends_on": row.depends_on}
                                   for row in projection.dependencies])
        outputs = json.dumps([
            {"name": row.name,
             "type": row.type,
             "value": row.value,
             "sensitive": row.sensitive}
            for row in projection.outputs])
        resource_parts = ["[", *resources, "]"]
        return cls(
            resources=_text_literal(resource_parts),
            dependencies=_text_literal([dependencies]),
            outputs=_text_literal([outputs]),
            resource_count=len(projection.resources),
            digests=(_digest(resource_parts), _digest([dependencies]), _digest([outputs])),
        )


def _digest(parts: Iterable[str]) -> str:
    """SHA-256 (hex) of the concatenated C{parts}, UTF-8."""
    hasher = hashlib.sha256()
    for part in parts:
        hasher.update(part.encode("utf-8", "surrogatepass"))
    return hasher.hexdigest()
