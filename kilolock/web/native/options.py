"""What the write side of the native API is configured with: who runs
operations, how large an upload may be, how long an upload session lives."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from attrs import field, frozen

from kilolock.core.model import utcnow
from kilolock.stateops.runner import OperationRunner
from kilolock.web.request import DEFAULT_MAX_BODY_BYTES

#: Seconds an upload session lives after its last chunk (or its opening).
DEFAULT_UPLOAD_TTL = 3600.0
#: Upload sessions one principal may have open at once.
MAX_OPEN_UPLOADS = 16


@frozen
class NativeOptions:
    """The native API's write side.

    @ivar runner: runs operations (None: one on the lane's store and reactor).
    @ivar max_state_bytes: the largest state an upload session may declare
        (the server's body limit: what a POST may send).
    @ivar upload_ttl: seconds an upload session lives after its last chunk.
    @ivar now: the time upload sessions are stamped and expired with.
    """

    runner: OperationRunner | None = None
    max_state_bytes: int = DEFAULT_MAX_BODY_BYTES
    upload_ttl: float = DEFAULT_UPLOAD_TTL
    max_open_uploads: int = MAX_OPEN_UPLOADS
    now: Callable[[], datetime] = field(default=utcnow)
