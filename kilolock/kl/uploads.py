"""Sending a large state through an upload session of the native lane (what
C{kl state push} and C{kl state import} do above L{UPLOAD_THRESHOLD}):
open the session (size, SHA-256), PUT the chunks, then commit or hand the
session to an operation.

Each chunk is one request below an edge's body limit (L{DEFAULT_CHUNK_BYTES},
at most the server's C{maxChunkBytes}).  When a chunk gets no answer (a
dropped connection, a timeout, a 5xx), kl asks the session what it received
and sends what is missing, L{RESUME_ATTEMPTS} times at most; a chunk sent
twice is harmless (the server takes a repeat as a no-op).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from kilolock.kl.context import Context
from kilolock.kl.exits import EXIT_UNAVAILABLE, KlError
from kilolock.kl.output import Progress

__all__ = ["DEFAULT_CHUNK_BYTES", "RESUME_ATTEMPTS", "UPLOAD_THRESHOLD", "send_in_chunks"]

#: States at least this large go through an upload session.
UPLOAD_THRESHOLD = 8 << 20
#: The size of each chunk (below a 10 MB body limit with room to spare).
DEFAULT_CHUNK_BYTES = 4 << 20
#: Times kl resumes an upload whose chunks went unanswered.
RESUME_ATTEMPTS = 5


def send_in_chunks(ctx: Context, state: str, body: bytes, chunk_bytes: int,
                   progress: Progress | None) -> str:
    """Open an upload session for C{state} and send C{body} into it.

    @return: the session's id, complete (commit it, or import it).
    @raise KlError: the server refused, or kept failing to answer.
    """
    opened = ctx.native("/uploads", f"opening an upload of {state}", method="POST",
                        expect=201, body=json.dumps({
                            "state": state, "size": len(body),
                            "sha256": hashlib.sha256(body).hexdigest()}).encode(),
                        headers={"Content-Type": "application/json"}).json()
    upload = str(opened["id"])
    size = min(chunk_bytes, int(opened.get("maxChunkBytes") or chunk_bytes))
    missing: list[list[int]] = opened["missing"]
    for attempt in range(RESUME_ATTEMPTS + 1):
        try:
            for start, end in missing:
                for offset in range(start, end, size):
                    piece = body[offset:min(offset + size, end)]
                    ctx.native(f"/uploads/{upload}", f"uploading {state}", method="PUT",
                               body=piece, query={"offset": offset},
                               headers={"Content-Type": "application/octet-stream"})
                    if progress is not None:
                        progress.advance(len(piece))
            return upload
        except KlError as error:
            if error.code != EXIT_UNAVAILABLE or attempt == RESUME_ATTEMPTS:
                raise
            ctx.out.note(f"resuming the upload of {state}: {error.message}")
            session: Any = ctx.native_json(f"/uploads/{upload}", f"resuming {state}")
            missing = session["missing"]
            if progress is not None:
                progress.done = int(session["receivedBytes"])
    raise AssertionError("unreachable")  # pragma: no cover
