"""Frozen value types of the TFE lane."""

from __future__ import annotations

from datetime import datetime

from attrs import frozen

from kilolock.core.model import StateKey

#: The statuses of a pending state version, as the TFE API names them
#: (C{uploading} is Kilolock's own: its bytes are being stored).
PENDING = "pending"
UPLOADING = "uploading"
FINALIZED = "finalized"
DISCARDED = "discarded"

#: The two uploads a pending state version takes.
STATE_PART = "state"
JSON_PART = "json-state"

#: Event kinds of the TFE lane (the state's own events are the state lane's).
TFE_WORKSPACE_CREATE = "tfe_workspace_create"
TFE_WORKSPACE_DELETE = "tfe_workspace_delete"
TFE_TAGS_UPDATE = "tfe_tags_update"


@frozen
class Tag:
    """A workspace tag: a key, and a value (empty for a plain tag)."""

    key: str
    value: str = ""


@frozen
class TFEWorkspace:
    """A TFE workspace: a public id and tags for the state at C{key}.

    C{name} is what the TFE API calls it: the last segment of the state's
    path (the state's name within the caller's scope)."""

    id: str
    key: StateKey
    created_at: datetime
    tags: tuple[Tag, ...] = ()

    @property
    def name(self) -> str:
        return self.key.path.rpartition("/")[2]


@frozen
class PendingVersion:
    """A state version announced by C{POST .../state-versions} whose bytes
    are still to come through its upload capability.

    C{grant_hash} is the SHA-256 (hex) of the capability (the capability
    itself is never stored); C{lock_id} is the lock its creator held, which
    must still hold the state when the bytes arrive; C{md5} (hex) is the
    digest the bytes must have.  C{version} is the stored version's number
    once C{status} is L{FINALIZED}."""

    id: str
    workspace_id: str
    key: StateKey
    serial: int
    lineage: str
    md5: str
    lock_id: str
    principal: str
    grant_hash: str
    created_at: datetime
    expires_at: datetime
    status: str = PENDING
    json_received: bool = False
    version: int | None = None

    def status_at(self, now: datetime) -> str:
        """The status the API shows at C{now}: a version whose bytes never
        came before its capability expired is discarded."""
        if self.status in (PENDING, UPLOADING) and now >= self.expires_at:
            return DISCARDED
        return self.status


def settled_status(version: int | None, reopen: bool = False) -> str:
    """The status an upload ends in: finalized with a stored version,
    pending again when reopened, else discarded."""
    if version is not None:
        return FINALIZED
    return PENDING if reopen else DISCARDED
