"""kl's exit codes (docs/kl.md) and the one error type that carries them."""

from __future__ import annotations

EXIT_OK = 0
#: The server refused the request (400, 401, 403, another 4xx) or the input is unusable.
EXIT_REFUSED = 1
#: The command line or the configuration is wrong.
EXIT_USAGE = 2
#: The state, version, tenant or token does not exist (404).
EXIT_NOT_FOUND = 3
#: Locked by someone else, or a conflict (423, 409; push lineage/serial checks).
EXIT_CONFLICT = 4
#: The server or the lane a command needs cannot be reached, timed out, or
#: failed (5xx).
EXIT_UNAVAILABLE = 5
#: The server's discovery document or a lane answered something unusable
#: (e.g. a percent-encoded path).
EXIT_PROTOCOL = 6
#: C{kl events verify}: the audit chain does not verify.
EXIT_BROKEN_CHAIN = 7
#: Ctrl-C.
EXIT_INTERRUPTED = 130


class KlError(Exception):
    """A failure with its exit code and the one-line message kl prints."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
