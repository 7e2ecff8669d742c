"""Frozen value types shared by the stores, the web tree and the tools."""

from __future__ import annotations

import enum
import re
from datetime import UTC, datetime
from typing import Any, Protocol

from attrs import field, frozen

from kilolock.core.errors import InvalidLockInfo, InvalidText
from kilolock.core.text import (
    MAX_LOCK_ID_LENGTH,
    MAX_LOCK_INFO_BYTES,
    TOO_LONG,
    NotJSON,
    check_text,
    clean_text,
    load_json,
    stored_members,
)

#: The tenant every request belongs to in the C{open} and C{static} auth modes.
DEFAULT_TENANT = "default"


def utcnow() -> datetime:
    return datetime.now(UTC)


def rfc3339(moment: datetime) -> str:
    """Format C{moment} as RFC 3339 in UTC with a C{Z} (what Go's parser wants)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


_CREATED = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?"
    r"(Z|z|[+-]\d{2}:\d{2})$"
)


def parse_created(text: str) -> datetime | None:
    """Parse a Go RFC 3339 timestamp with 0-9 fractional digits; None if unparseable."""
    match = _CREATED.match(text)
    if match is None:
        return None
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    micro = int((fraction or "0").ljust(6, "0")[:6])
    try:
        moment = datetime(int(year), int(month), int(day), int(hour), int(minute),
                          int(second), micro)
        if zone in ("Z", "z"):
            return moment.replace(tzinfo=UTC)
        return datetime.fromisoformat(moment.isoformat() + zone).astimezone(UTC)
    except ValueError:
        return None


@frozen
class StateKey:
    """One state of one tenant: C{path} is its validated segments joined by C{/}."""

    tenant: str
    path: str


class Access(enum.StrEnum):
    """What a request needs of a state (and what a CI token's grant lets it do
    with the states it covers)."""

    #: Read a state's outputs only (where a lane offers that).
    OUTPUTS_ONLY = "outputs-only"
    #: Read states (GET), never lock or write.
    READ = "read"
    #: Everything on the state lane: read, lock, write, unlock.
    WRITE = "write"

    def covers(self, needed: Access) -> bool:
        """Whether this access includes C{needed} (write ⊇ read ⊇ outputs-only)."""
        order = (Access.OUTPUTS_ONLY, Access.READ, Access.WRITE)
        return order.index(self) >= order.index(needed)


class CiAccess(Protocol):
    """What a CI job's token may do (L{kilolock.auth.oidc.access.OidcAccess}),
    as the rest of Kilolock asks it: its grants on state paths, whether it
    has expired, and how the audit trail names it."""

    @property
    def expired(self) -> bool:
        """Whether the token is past its expiry (within the lock grace)."""

    @property
    def token_digest(self) -> str:
        """The SHA-256 of the token, recorded with the locks it takes."""

    def allows(self, path: str, need: Access) -> bool:
        """Whether a grant covers C{need} on the state at C{path}."""

    def require(self, path: str, need: Access) -> None:
        """@raise Denied: unless a grant covers C{need} on C{path}."""

    def require_fresh(self) -> None:
        """@raise Denied: when the token has expired."""

    def require_finishing(self, path: str, held: HeldLock | None,
                          lock_id: str | None, need: Access = Access.WRITE) -> None:
        """@raise Denied: unless the request finishes work the token locked
        (C{need}: write or unlock it, or read back the state it holds)."""

    def audit_detail(self) -> dict[str, str]:
        """What the audit trail records of the token."""


@frozen
class Principal:
    """Who is calling: a tenant, a display name for the audit trail, and a scope."""

    tenant: str
    name: str
    scope: str = "write"
    workspace_id: str | None = None
    env_public_id: str | None = None
    token_id: str | None = None
    #: The client's address (forwarded headers honoured from trusted proxies).
    address: str | None = None
    #: The username of Basic credentials (None for Bearer): in the database
    #: auth mode it must be the token's workspace_id.
    basic_username: str | None = None
    #: A CI job's OIDC token: its grants, its identity for the audit trail,
    #: its digest (recorded with the locks it takes).  None for any other
    #: credential.
    oidc: CiAccess | None = field(default=None, eq=False)

    @property
    def can_write(self) -> bool:
        return self.scope in ("write", "admin")

    @property
    def is_admin(self) -> bool:
        """A tenant admin: may also purge versions and set retention.  A
        hosted token of scope C{admin}, or the caller of the open and static
        auth modes (no workspace, no CI token: the one secret of the server,
        or no secret at all); never a CI job's token."""
        if self.oidc is not None:
            return False
        return self.scope == "admin" or (self.workspace_id is None and self.scope == "write")

    @property
    def oidc_token_digest(self) -> str | None:
        """What a lock taken by this principal records of its credential."""
        return None if self.oidc is None else self.oidc.token_digest


@frozen
class LockInfo:
    """A lock as the client sent it: the original bytes plus the fields we read."""

    raw: bytes
    id: str
    operation: str = ""
    who: str = ""
    version: str = ""
    created: datetime | None = None

    @classmethod
    def from_bytes(cls, raw: bytes) -> LockInfo:
        """Parse a LockInfo body under the text rules of L{kilolock.core.text};
        raise L{InvalidLockInfo} unless it is a JSON object with a non-empty
        string C{ID}, and L{kilolock.core.errors.InvalidText} when it breaks a
        rule (too large, too deep, NUL or an unpaired surrogate anywhere, an
        C{ID} longer than L{MAX_LOCK_ID_LENGTH})."""
        if len(raw) > MAX_LOCK_INFO_BYTES:
            raise InvalidText(TOO_LONG, f"the lock body is larger than {MAX_LOCK_INFO_BYTES}"
                                        " bytes")
        try:
            doc = load_json(raw, "the lock body")
        except NotJSON:
            raise InvalidLockInfo("the lock body is not valid JSON") from None
        if not isinstance(doc, dict):
            raise InvalidLockInfo("the lock body must be a JSON object (LockInfo)")
        lock_id = doc.get("ID")
        if not isinstance(lock_id, str) or not lock_id:
            raise InvalidLockInfo("LockInfo needs a non-empty string ID")
        check_text(lock_id, "the lock ID", "ID", MAX_LOCK_ID_LENGTH)
        return cls._of(raw, doc)

    @classmethod
    def stored(cls, raw: bytes) -> LockInfo:
        """A LockInfo a store kept (it passed L{from_bytes} when it arrived,
        or an older, laxer check): never raises.  Fields that cannot be read
        are empty."""
        return cls._of(raw, stored_members(raw))

    @classmethod
    def _of(cls, raw: bytes, doc: dict[str, Any]) -> LockInfo:
        """The fields read from C{doc}; the ones only ever shown (who, what,
        which version) with what a page cannot show (NUL, an unpaired
        surrogate of an older record) as U+FFFD."""
        created = doc.get("Created")
        return cls(
            raw=raw,
            id=_text(doc.get("ID")),
            operation=clean_text(_text(doc.get("Operation"))),
            who=clean_text(_text(doc.get("Who"))),
            version=clean_text(_text(doc.get("Version"))),
            created=parse_created(created) if isinstance(created, str) else None,
        )


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


@frozen
class HeldLock:
    """The lock currently held on a state."""

    info: LockInfo
    acquired_at: datetime
    principal: str
    #: The SHA-256 of the OIDC token that took the lock (None for any other
    #: credential): an expired CI token may finish the work it locked.
    token_digest: str | None = field(default=None, repr=False)


@frozen
class ResourceRow:
    """One resource instance (or deposed object) of a state's current version.

    Its JSON text (C{index_key}, C{attributes}) is storable as jsonb as it
    is: the projection replaced NUL and unpaired surrogates
    (L{kilolock.core.text.clean_json_text}), so stores splice it in
    unchecked."""

    address: str
    module: str
    mode: str
    type: str
    name: str
    provider: str
    index_key: str | None  # JSON text of the count/for_each key, or None
    deposed: str | None
    attributes: str  # JSON text, sensitive paths redacted


@frozen
class DependencyRow:
    address: str
    depends_on: str


@frozen
class OutputRow:
    """A root output; its JSON text is storable as jsonb, like
    L{ResourceRow}'s."""

    name: str
    type: str | None  # JSON text of the output's type
    value: str | None  # JSON text; None when sensitive
    sensitive: bool


@frozen
class Projection:
    resources: tuple[ResourceRow, ...] = ()
    dependencies: tuple[DependencyRow, ...] = ()
    outputs: tuple[OutputRow, ...] = ()


@frozen
class ParsedState:
    """What the server reads out of a state body before storing it verbatim."""

    serial: int
    lineage: str
    #: None for an OpenTofu encrypted envelope (stored, not projected).
    projection: Projection | None
    terraform_version: str | None = None

    @property
    def encrypted(self) -> bool:
        return self.projection is None


@frozen
class StateUpload:
    """A state body ready for a store: raw bytes, their SHA-256 and the parse."""

    raw: bytes = field(repr=lambda raw: f"<{len(raw)} bytes>")
    sha256: str
    parsed: ParsedState


@frozen
class StateVersion:
    """Metadata of one stored version (its bytes are fetched separately)."""

    number: int  # 1, 2, 3 ... within the state; survives nothing after DELETE
    serial: int
    lineage: str
    sha256: str
    size: int
    created_at: datetime
    principal: str
    projected: bool
    #: A tombstone (its bytes were pruned by retention or purged): when,
    #: and why.  None for a version whose bytes are stored.
    pruned_at: datetime | None = None
    prune_reason: str | None = None

    @property
    def pruned(self) -> bool:
        """Whether only the tombstone of this version is left."""
        return self.pruned_at is not None

    @classmethod
    def of_upload(cls, upload: StateUpload, number: int, created_at: datetime,
                  principal: str) -> StateVersion:
        """What storing C{upload} as version C{number} records."""
        return cls(number=number, serial=upload.parsed.serial, lineage=upload.parsed.lineage,
                   sha256=upload.sha256, size=len(upload.raw), created_at=created_at,
                   principal=principal, projected=upload.parsed.projection is not None)


@frozen
class WriteOutcome:
    """C{created} is False for an idempotent replay of an identical write."""

    version: StateVersion
    created: bool


@frozen
class StateSummary:
    key: StateKey
    current: StateVersion | None
    version_count: int
    resource_count: int
    lock: HeldLock | None
    updated_at: datetime


@frozen
class Condition:
    type: str
    status: str  # "True" | "False" | "Unknown"
    reason: str
    message: str
    observed_generation: int
    last_transition_time: datetime

    def to_json(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "status": self.status,
            "reason": self.reason,
            "message": self.message,
            "observedGeneration": self.observed_generation,
            "lastTransitionTime": rfc3339(self.last_transition_time),
        }


@frozen
class StoreProbe:
    """What a store says about its database when readiness is checked."""

    reachable: bool
    message: str
    #: The applied and the expected schema versions; None for a store without
    #: a schema (memory).
    schema_version: int | None = None
    expected_schema_version: int | None = None
    #: The connection pool's health: live connections and pool size (None
    #: for a store without a pool).
    connections_alive: int | None = None
    connections_total: int | None = None

    @property
    def schema_current(self) -> bool:
        return self.schema_version == self.expected_schema_version


@frozen
class UiSession:
    """A signed-in browser: who it is, found by the SHA-256 of its cookie's
    secret (the secret itself is never stored).  C{credential_digest} is the
    SHA-256 of the token it signed in with (checked again on every request,
    so revoking the token ends the session); C{csrf} the token its forms
    carry."""

    id_hash: str
    principal: Principal
    credential_digest: str | None
    csrf: str
    created_at: datetime
    expires_at: datetime
