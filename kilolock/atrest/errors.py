"""Why a stored version's bytes could not be reproduced, or a key file loaded.

A failure to read a stored version is a fault of what the server holds (its
database rows or its keys), never of the request, so these errors answer
502: the server could not get a valid answer from the storage behind it.
They are typed and carry a stable JSON code, so a tampered or swapped row is
reported as what it is instead of an opaque internal error.  Messages name
the version and the check that failed, never state bytes or key material.
"""

from __future__ import annotations

from kilolock.core.errors import KilolockError


class StoredVersionUnreadable(KilolockError):
    """The bytes of a stored version could not be reproduced."""

    status = 502
    code = "stored_version_unreadable"


class CorruptVersion(StoredVersionUnreadable):
    """A malformed envelope or frame, or bytes whose sha256 or size is not the
    one recorded for the version (also a delta decoded against the wrong base,
    when nothing authenticated it)."""

    code = "stored_version_corrupt"


class WrongBase(CorruptVersion):
    """A delta was given a base whose sha256 is not the one it needs."""

    code = "stored_version_wrong_base"


class AuthenticationFailed(StoredVersionUnreadable):
    """AES-GCM refused the payload: it was altered, moved to another row (its
    associated data names another version), or its data key is not the one
    it was sealed with."""

    code = "stored_version_unauthentic"


class ChunkUnauthentic(AuthenticationFailed):
    """AES-GCM refused a sealed chunk of an upload session: altered, moved
    from another session or offset, or sealed under another data key."""

    code = "upload_chunk_unauthentic"


class UnknownKey(StoredVersionUnreadable):
    """A wrapped data key names a key-encryption key the provider does not have."""

    code = "encryption_key_unknown"

    def __init__(self, key_id: str) -> None:
        super().__init__(f"no key-encryption key with id {key_id!r} is configured")
        self.key_id = key_id


class KeyUnwrapFailed(StoredVersionUnreadable):
    """The named key-encryption key exists but does not open the wrapped data
    key: the key file holds different key material under that id, or the
    wrapped key was altered."""

    code = "data_key_unwrap_failed"


class KeyFileError(ValueError):
    """A key file that cannot be used; the message names the file and the
    rule it breaks (never a key's value).  Raised at startup."""
