"""Typed errors that carry their HTTP status and JSON error code.

Stores and resources raise these; only the base resource
(L{kilolock.web.resource}) turns them into responses.  A message never contains
state bytes, tokens or passwords.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar


class KilolockError(Exception):
    """An expected failure with a fixed HTTP status and a stable JSON code."""

    status: ClassVar[int] = 500
    code: ClassVar[str] = "internal_error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def headers(self) -> dict[bytes, bytes]:
        """Extra response headers this error needs (e.g. C{WWW-Authenticate})."""
        return {}

    def details(self) -> dict[str, Any]:
        """Extra members of the JSON error object (e.g. the C{field} at fault)."""
        return {}


class BadRequest(KilolockError):
    status = 400
    code = "bad_request"


class InvalidPath(BadRequest):
    """A path segment broke one of the naming rules (the code names the rule)."""

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(message)
        self.rule = rule
        self.code = rule  # type: ignore[misc]  # the rule is this error's code


class InvalidText(BadRequest):
    """Input broke one of the text rules of L{kilolock.core.text} (nesting,
    numbers, Unicode, length): the code names the rule, the JSON error the
    field when one is at fault."""

    def __init__(self, rule: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.code = rule  # type: ignore[misc]  # the rule is this error's code
        self.field = field
        #: The JSON pointer of the value at fault in a document, when known
        #: (the TFE lane answers it as the error's C{source}).
        self.pointer: str | None = None

    def details(self) -> dict[str, str]:
        return {} if self.field is None else {"field": self.field}


class InvalidState(BadRequest):
    code = "invalid_state"


class InvalidLockInfo(BadRequest):
    code = "invalid_lock_info"


class ChecksumMismatch(BadRequest):
    code = "content_md5_mismatch"


class Denied(KilolockError):
    """A caller refused (401 or 403), and why, for the access log.

    @ivar reason: a stable code naming the refusal (C{unknown_token},
        C{read_only}, C{oidc_expired}, ...): the access log's C{denied}.
    @ivar log_fields: what else the server log may say about it (an OIDC
        token's issuer, subject and the rules evaluated; never a secret).
        The client sees only the message.
    """

    def __init__(self, message: str, reason: str | None = None,
                 log_fields: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.reason = reason or self.code
        self.log_fields = dict(log_fields or {})


class Unauthorized(Denied):
    status = 401
    code = "unauthorized"

    def headers(self) -> dict[bytes, bytes]:
        return {b"WWW-Authenticate": b'Basic realm="kilolock"'}


class Forbidden(Denied):
    status = 403
    code = "forbidden"


class NotFound(KilolockError):
    status = 404
    code = "not_found"


class StateNotFound(NotFound):
    code = "state_not_found"


class MethodNotAllowed(KilolockError):
    status = 405
    code = "method_not_allowed"

    def __init__(self, allowed: list[bytes], method: bytes | None = None) -> None:
        super().__init__(
            "method not allowed here; allowed: " + ", ".join(m.decode() for m in allowed))
        self.allowed = allowed
        #: The method that was refused (when known).
        self.method = method

    def headers(self) -> dict[bytes, bytes]:
        return {b"Allow": b", ".join(self.allowed)}


class Conflict(KilolockError):
    status = 409
    code = "conflict"


class SerialConflict(Conflict):
    """Same serial as a stored version, different bytes."""

    code = "serial_conflict"

    def __init__(self, serial: int) -> None:
        super().__init__(
            f"a different state with serial {serial} is already stored;"
            " bump the serial and retry"
        )
        self.serial = serial


class LockNotHeld(Conflict):
    """A write named a lock ID but no lock is held (it was force-released)."""

    code = "lock_not_held"

    def __init__(self) -> None:
        super().__init__(
            "the request names a lock ID but the state is not locked;"
            " the lock was released (force-unlock?) - lock again before writing"
        )


class LockConflict(KilolockError):
    """The state is locked by someone else; the body is the holder's LockInfo.

    C{status} is 423 for LOCK, POST and DELETE, and 409 for an owner UNLOCK
    whose ID does not match the holder's.
    """

    code = "locked"

    def __init__(self, holder: bytes, status: int = 423) -> None:
        super().__init__("the state is locked by another client")
        self.holder = holder
        self.status = status  # type: ignore[misc]


class PayloadTooLarge(KilolockError):
    status = 413
    code = "payload_too_large"


class ServiceUnavailable(KilolockError):
    """The database cannot be reached; clients retry after C{retry_after} s."""

    status = 503
    code = "service_unavailable"

    def __init__(self, message: str = "the state database is unavailable; retry later",
                 retry_after: int = 5) -> None:
        super().__init__(message)
        self.retry_after = retry_after

    def headers(self) -> dict[bytes, bytes]:
        return {b"Retry-After": str(self.retry_after).encode()}


# -- the KL-native lane ---------------------------------------------------------


class VersionNotFound(NotFound):
    """The state exists (for this tenant) but has no version with that number."""

    code = "version_not_found"


class EncryptedState(Conflict):
    """The version is an OpenTofu encrypted envelope: nothing in it can be read
    (diff, outputs) or re-serialised (rollback) by the server."""

    code = "encrypted_state"


class StateExists(Conflict):
    """A state that must have no version yet has one: a split's new state,
    or a state an operation found without a version and that got one
    before the operation wrote it."""

    code = "state_exists"


class VersionTooDeep(Conflict):
    """A stored version nests deeper than the server reads (stored before
    the nesting rule of L{kilolock.core.text}): its bytes can be fetched,
    not diffed or read for outputs."""

    code = "too_deep"


# -- hosted mode (control API) ------------------------------------------------


class _AboutAField(KilolockError):
    """An error about one field of a request: the JSON error names it
    (C{"field": ...})."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field

    def details(self) -> dict[str, Any]:
        return {"field": self.field}


class InvalidField(_AboutAField, BadRequest):
    """A field of a request body or query is missing or wrong."""

    code = "invalid_field"


class AlreadyExists(_AboutAField, Conflict):
    """A tenant slug, workspace, environment or live token name is taken."""

    code = "already_exists"


class NotEmpty(Conflict):
    """A tenant, workspace or environment still holds states (or locks)."""

    code = "not_empty"


class ControlUnauthorized(Unauthorized):
    """The control API wants C{Authorization: Bearer <KL_CONTROL_TOKEN>}."""

    def headers(self) -> dict[bytes, bytes]:
        return {b"WWW-Authenticate": b'Bearer realm="kilolock-control"'}


class TenantNotFound(NotFound):
    code = "tenant_not_found"


class WorkspaceNotFound(NotFound):
    code = "workspace_not_found"


class EnvironmentNotFound(NotFound):
    code = "environment_not_found"


class TokenNotFound(NotFound):
    code = "token_not_found"


# -- CI identity (OIDC policies) ------------------------------------------------


class InvalidOidcPolicy(BadRequest):
    """An OIDC policy document breaks the rules; C{problems} lists each, with
    its place (C{rules[1] "prs-read".grant.access: ...})."""

    code = "invalid_oidc_policy"

    def __init__(self, problems: list[str] | tuple[str, ...]) -> None:
        super().__init__(f"the OIDC policy has {len(problems)} problem(s): "
                         + "; ".join(problems))
        self.problems = list(problems)

    def details(self) -> dict[str, Any]:
        return {"problems": self.problems}


class OidcPolicyNotFound(NotFound):
    code = "oidc_policy_not_found"


# -- state at rest: tombstones, purge, encryption keys -------------------------


class VersionPruned(KilolockError):
    """The version's bytes are gone (pruned by retention, or purged): only its
    tombstone is left, and history still lists it."""

    status = 410
    code = "version_pruned"


class VersionIsCurrent(Conflict):
    """A purge named the state's current version, whose bytes every client
    reads: roll back (or write a new version) first."""

    code = "version_is_current"


class EncryptionKeysRefused(ServiceUnavailable):
    """The store cannot serve: the database holds versions the configured
    encryption keys cannot open (or keys are needed and none are configured).
    The message (logged at start) says which key id and what to do; clients
    get a 503 until the keys open what the database holds: the server
    restarted with the right key file, or (no key file) the encrypted
    versions decrypted by C{kilolock-migrate decrypt-versions} -- the store
    checks again at the next request a second after a refusal."""

    code = "encryption_keys_refused"

    def __init__(self, detail: str) -> None:
        super().__init__("the server cannot open its stored versions with the encryption keys"
                         " it was given; its log says why", retry_after=30)
        #: What the log says: the key id at fault and the fix (never a secret).
        self.detail = detail
