"""The errors of the TFE lane's documents and rules (each carries its status;
the lane answers them as JSON:API error documents)."""

from __future__ import annotations

from kilolock.core.errors import BadRequest, Conflict, KilolockError


class InvalidDocument(BadRequest):
    """The body is not a JSON:API document of the expected shape (not JSON,
    not an object, no C{data}, another C{type})."""

    code = "invalid_document"

    def __init__(self, message: str, pointer: str = "/data") -> None:
        super().__init__(message)
        self.pointer = pointer


class InvalidAttribute(KilolockError):
    """An attribute or relationship is missing or has a wrong value (422,
    as the TFE API answers)."""

    status = 422
    code = "invalid_attribute"

    def __init__(self, message: str, pointer: str) -> None:
        super().__init__(message)
        self.pointer = pointer


class WorkspaceExists(KilolockError):
    """A workspace with that name exists (422, as the TFE API answers)."""

    status = 422
    code = "already_exists"

    def __init__(self) -> None:
        super().__init__("Name has already been taken")
        self.pointer = "/data/attributes/name"


class WorkspaceLocked(Conflict):
    """C{actions/lock} on a locked workspace, or a write without the lock."""

    code = "workspace_locked"


class NotSafeToDelete(Conflict):
    """C{actions/safe-delete} of a workspace that still manages resources."""

    code = "not_safe_to_delete"
