"""The key file (C{--encryption-keys FILE}): key-encryption keys, one active.

A TOML file::

    # Kilolock key-encryption keys: keep secret, back up apart from the database.
    active = "2026-12"

    [[keys]]
    id = "2026-12"
    secret = "q1b1...="   # head -c 32 /dev/urandom | base64

    [[keys]]
    id = "2025-06"        # older keys stay until no row is wrapped under them
    secret = "..."

Rotation: add a key, make it C{active}, restart, rewrap, then remove the old
key.  Everything is checked when the file is read, and the first problem
found is reported with the file's name and the key's id, never a secret.
"""

from __future__ import annotations

import base64
import binascii
import tomllib
from pathlib import Path
from typing import Any

from kilolock.atrest.envelope import KEY_ID
from kilolock.atrest.errors import KeyFileError
from kilolock.atrest.keyring import KEK_BYTES, KeyEncryptionKey, KeyRing

_TOP = {"active", "keys"}
_KEY = {"id", "secret"}


def _key(source: str, position: int, entry: Any) -> KeyEncryptionKey:
    where = f"{source}: keys[{position}]"
    if not isinstance(entry, dict):
        raise KeyFileError(f"{where} is not a table; write each key as [[keys]]")
    unknown = sorted(set(entry) - _KEY)
    if unknown:
        raise KeyFileError(f"{where} has unknown fields {unknown} (a key has id and secret)")
    key_id = entry.get("id")
    if not isinstance(key_id, str) or KEY_ID.fullmatch(key_id) is None:
        raise KeyFileError(
            f"{where}: id must be 1 to 64 letters, digits, '.', '_' or '-',"
            " starting with a letter or digit")
    where = f"{source}: key {key_id!r}"
    secret = entry.get("secret")
    if not isinstance(secret, str):
        raise KeyFileError(f"{where} has no secret (base64 of {KEK_BYTES} random bytes)")
    try:
        material = base64.b64decode(secret.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise KeyFileError(f"{where}: the secret is not valid base64") from None
    if len(material) != KEK_BYTES:
        raise KeyFileError(
            f"{where}: the secret is {len(material)} bytes; AES-256 needs exactly {KEK_BYTES}"
            f" (head -c {KEK_BYTES} /dev/urandom | base64)")
    return KeyEncryptionKey(key_id, material)


def parse_key_file(text: str, source: str = "the key file") -> KeyRing:
    """The L{KeyRing} a key file describes; L{KeyFileError} naming C{source}
    and the first rule the text breaks."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise KeyFileError(f"{source} is not valid TOML: {error}") from None
    unknown = sorted(set(document) - _TOP)
    if unknown:
        raise KeyFileError(f"{source} has unknown settings {unknown} (expected active and keys)")
    entries = document.get("keys")
    if not isinstance(entries, list) or not entries:
        raise KeyFileError(f"{source} has no keys: add at least one [[keys]] table")
    keys = [_key(source, position, entry) for position, entry in enumerate(entries)]
    ids: dict[bytes, str] = {}
    for key in keys:
        if key.key_id in ids.values():
            raise KeyFileError(f"{source}: two keys have the id {key.key_id!r}")
        if key.secret in ids:
            raise KeyFileError(
                f"{source}: keys {ids[key.secret]!r} and {key.key_id!r} have the same secret;"
                " a new key needs new random bytes")
        ids[key.secret] = key.key_id
    active = document.get("active")
    if not isinstance(active, str):
        raise KeyFileError(f"{source} names no active key: add active = \"<key id>\"")
    if active not in ids.values():
        raise KeyFileError(f"{source}: the active key {active!r} is not one of its keys")
    return KeyRing(keys, active)


def load_key_file(path: str | Path) -> KeyRing:
    """Read and check the key file at C{path}; L{KeyFileError} if it cannot be used."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise KeyFileError(f"cannot read the key file {str(path)!r}: {error}") from None
    return parse_key_file(text, repr(str(path)))
