"""The rules of an upload session's chunks, decided once for both stores.
Pure: no Twisted, no I/O.

A chunk is C{data} at an C{offset} of the declared whole.  It must lie
inside the declared size and be at most L{MAX_CHUNK_BYTES} long.  Chunks may
come in any order.  A chunk equal to one received (same offset, length and
SHA-256) is a replay -- a client retrying after a dropped connection -- and
changes nothing; any other chunk overlapping one received is refused
(L{ChunkConflict}, 409): bytes already received are never replaced.  The
ranges received are what a client resumes from (C{GET} of the session).
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Iterable

from kilolock.core.errors import BadRequest, Conflict, NotFound
from kilolock.stateops.model import Chunk, UploadSession

__all__ = ["MAX_CHUNK_BYTES", "ChunkConflict", "Placement", "TooManyUploads",
           "UploadNotFound", "place_chunk", "received_ranges"]

#: The largest chunk accepted (below a 10 MB body limit of an edge proxy).
MAX_CHUNK_BYTES = 8 << 20

#: The one message of a session nobody can see: unknown, expired, or another's.
NO_SUCH_UPLOAD = "no such upload session"


class UploadNotFound(NotFound):
    """No live session with that id of the caller (whoever else's it is)."""

    code = "upload_not_found"

    def __init__(self) -> None:
        super().__init__(NO_SUCH_UPLOAD)


class ChunkConflict(Conflict):
    code = "chunk_conflict"


class TooManyUploads(Conflict):
    code = "too_many_uploads"


class InvalidChunk(BadRequest):
    code = "invalid_chunk"


class Placement(enum.Enum):
    """What a chunk does to a session."""

    #: New bytes: keep the chunk.
    ADD = "add"
    #: A chunk already received: nothing changes.
    REPLAY = "replay"


def chunk_of(offset: int, data: bytes) -> Chunk:
    """The chunk C{data} at C{offset}, with its SHA-256."""
    return Chunk(offset, len(data), hashlib.sha256(data).hexdigest())


def place_chunk(session: UploadSession, chunk: Chunk) -> Placement:
    """Where a chunk goes in a live session (see the module's docstring).

    @raise InvalidChunk: (400) empty, too long, or outside the declared size.
    @raise ChunkConflict: (409) the session is committed, or the chunk
        overlaps a received one without repeating it.
    """
    if chunk.length == 0:
        raise InvalidChunk("a chunk must not be empty")
    if chunk.length > MAX_CHUNK_BYTES:
        raise InvalidChunk(f"a chunk is at most {MAX_CHUNK_BYTES} bytes")
    if chunk.offset < 0 or chunk.end > session.size:
        raise InvalidChunk(f"the chunk does not fit in the declared size ({session.size}"
                           " bytes)")
    if session.committed_version is not None:
        raise ChunkConflict("the upload session is committed; it takes no more chunks")
    for received in session.chunks:
        if received == chunk:
            return Placement.REPLAY
        if chunk.offset < received.end and received.offset < chunk.end:
            raise ChunkConflict(
                f"the chunk overlaps bytes {received.offset}-{received.end - 1}, already"
                " received with other content; resend the missing ranges only")
    return Placement.ADD


def received_ranges(chunks: Iterable[Chunk]) -> list[list[int]]:
    """The byte ranges received, merged: C{[[start, end], ...]} (end
    exclusive), in order."""
    ranges: list[list[int]] = []
    for chunk in sorted(chunks, key=lambda c: c.offset):
        if ranges and ranges[-1][1] == chunk.offset:
            ranges[-1][1] = chunk.end
        else:
            ranges.append([chunk.offset, chunk.end])
    return ranges
