"""Values to and from SQL: how a state, its projection and bytea travel.

Bytes come back from the pool as bytea hex text (L{bytes_from_hex}); a
write's parameters go out pre-quoted (L{WriteParameters}), the state as a
text or hex literal and the projection as three JSON arrays, so that the
quoting of a large state can run in a thread.  Pure functions and values: no
I/O, no Twisted.
"""

from __future__ import annotations

import codecs
import hashlib
import json
from collections.abc import Iterable, Sequence
from json.encoder import encode_basestring_ascii as _encode_json_string
from typing import Any

from attrs import define, field
from psycopg2.extensions import ISQLQuote

from kilolock.model import Projection, StateUpload
from kilolock.text_rules import clean_json_text

__all__ = ["SQLLiteral", "WriteParameters", "bytes_from_hex", "jsonb_safe"]

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


def jsonb_safe(text: str) -> str:
    """C{text} (JSON) with NUL characters and unpaired surrogates replaced by
    U+FFFD, as jsonb requires (a state may hold them inside attribute values:
    they are valid JSON); unchanged (and fast) in the usual case.  The rule
    is L{kilolock.text_rules.clean_json_text}'s."""
    return clean_json_text(text)


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


def _bytea_expression(raw: bytes, as_text: bool) -> SQLLiteral:
    """C{raw} as an SQL expression of type bytea.

    With C{as_text} (a UTF-8 database), UTF-8 without NUL (every state body:
    it is JSON) travels as a text literal through C{convert_to}, half the
    size of hex and about twice as fast for the server to read; the session
    has standard_conforming_strings on, so only quotes need doubling (byte
    0x27 never occurs inside a UTF-8 multi-byte sequence).  Anything else
    travels as hex.
    """
    decoder = codecs.getincrementaldecoder("utf-8")()
    parts = [b"convert_to('"]
    try:
        if not as_text:
            raise ValueError("hex")
        for start in range(0, len(raw), _QUOTING_CHUNK):
            chunk = raw[start:start + _QUOTING_CHUNK]
            if b"\x00" in chunk:
                raise ValueError("NUL")
            decoder.decode(chunk)
            parts.append(chunk.replace(b"'", b"''"))
        decoder.decode(b"", final=True)
    except ValueError:  # UnicodeDecodeError included
        hex_parts = [raw[start:start + _QUOTING_CHUNK].hex().encode()
                     for start in range(0, len(raw), _QUOTING_CHUNK)]
        return SQLLiteral(b"'\\x" + b"".join(hex_parts) + b"'::bytea")
    parts.append(b"', 'UTF8')")
    return SQLLiteral(b"".join(parts))


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
    """What a write sends besides small values: the state as a bytea
    expression and the projection as three JSON arrays of row objects (the
    parameters of L{kilolock.store.postgres.statements.PROJECTION_STEPS}),
    all pre-quoted.  Attribute JSON is spliced in as it is (after
    L{jsonb_safe}), never parsed again."""

    raw_state: SQLLiteral
    resources: SQLLiteral
    dependencies: SQLLiteral
    outputs: SQLLiteral
    resource_count: int = field(default=0)
    #: SHA-256 (hex) of the resources, dependencies and outputs JSON.
    digests: tuple[str, str, str] = field(default=("", "", ""))

    def projection_parameters(self, stored: Sequence[str | None] | None) -> dict[str, Any]:
        """The parameters of the projection's statement given the digests
        stored on the state row: a table whose digest is unchanged is left
        alone (its JSON is not sent, its rows are not touched)."""
        stored = tuple(stored or ())
        params: dict[str, Any] = {"digests": list(self.digests)}
        for index, name in enumerate(("resources", "dependencies", "outputs")):
            unchanged = len(stored) == 3 and stored[index] == self.digests[index]
            params["replace_" + name] = not unchanged
            params[name] = None if unchanged else getattr(self, name)
        return params

    @classmethod
    def of(cls, upload: StateUpload, utf8_database: bool) -> WriteParameters:
        """Quote C{upload}; C{utf8_database}: the server encoding is UTF-8
        (else the state travels as hex)."""
        projection = upload.parsed.projection or Projection()
        resources = [
            ("{" if index == 0 else ",{")
            + '"address":' + _text(row.address) + ',"module":' + _text(row.module)
            + ',"mode":' + _text(row.mode) + ',"type":' + _text(row.type)
            + ',"name":' + _text(row.name) + ',"provider":' + _text(row.provider)
            + ',"index_key":' + (jsonb_safe(row.index_key) if row.index_key is not None
                                 else "null")
            + ',"deposed":' + _text(row.deposed)
            + ',"attributes":' + jsonb_safe(row.attributes) + "}"
            for index, row in enumerate(projection.resources)]
        dependencies = json.dumps([{"address": row.address, "depends_on": row.depends_on}
                                   for row in projection.dependencies])
        outputs = json.dumps([
            {"name": row.name,
             "type": None if row.type is None else jsonb_safe(row.type),
             "value": None if row.value is None else jsonb_safe(row.value),
             "sensitive": row.sensitive}
            for row in projection.outputs])
        resource_parts = ["[", *resources, "]"]
        return cls(
            raw_state=_bytea_expression(upload.raw, as_text=utf8_database),
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
