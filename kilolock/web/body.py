"""Request bodies: the size limit enforced while they stream in, reading them,
checking C{Content-MD5}, and parsing states off the reactor thread."""

from __future__ import annotations

import base64
import contextlib
import gc
import hashlib
import io
import threading
from collections.abc import Callable, Iterator
from typing import IO, Any, TypeVar

from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from twisted.web.server import Request

from kilolock.core.errors import BadRequest, ChecksumMismatch, InvalidState, InvalidText
from kilolock.core.model import ParsedState, StateUpload
from kilolock.core.text import (
    MAX_LOCK_ID_LENGTH,
    MAX_LOCK_INFO_BYTES,
    TOO_LONG,
    NotJSON,
    check_text,
    decode_utf8,
    load_json,
)
from kilolock.store.upload_feed import UploadFeed
from kilolock.tfstate.parse import parse_state
from kilolock.tfstate.projection import StreamedResources
from kilolock.web.request import DEFAULT_MAX_BODY_BYTES

log = Logger()

T = TypeVar("T")

#: Bodies at least this large are read and parsed in a thread.
THREAD_THRESHOLD = 256 * 1024

__all__ = ["DEFAULT_MAX_BODY_BYTES", "check_md5", "in_thread_if_large", "parse_upload",
           "read_body", "release_after_answer", "start_upload_feed", "unlock_lock_id",
           "verify_md5"]


def _read_all(content: IO[bytes]) -> bytes:
    """The bytes of a request's C{content}; a temporary file is closed once
    read, so that its pages go back to the system here (in the reading
    thread) rather than when the answer is written (twisted.web closes the
    content as it finishes the request: ~10 ms for a 120 MB body)."""
    if isinstance(content, io.BytesIO):
        return content.getvalue()
    content.seek(0)
    body = content.read()
    content.close()
    return body


async def read_body(request: Request, reactor: Any) -> bytes:
    """The whole request body as bytes (read in a thread when it sits in a
    temporary file and there is a reactor: inline in in-memory tests).  A
    body is read once: a temporary file is closed after it."""
    content = request.content
    if content is None:
        return b""
    if isinstance(content, io.BytesIO):
        return content.getvalue()
    if reactor is None:
        return _read_all(content)
    return await deferToThreadPool(reactor, reactor.getThreadPool(), _read_all, content)


def check_md5(request: Request, body: bytes) -> None:
    """Refuse a body whose C{Content-MD5} header does not match (a truncated or
    corrupted upload is never stored)."""
    verify_md5(request.getHeader(b"Content-MD5"), body)


def verify_md5(header: bytes | None, body: bytes) -> None:
    """L{check_md5} given the header value (pure: runs in a thread for big bodies)."""
    if header is None:
        return
    _check_md5_digest(header, hashlib.md5(body).digest())  # noqa: S324 - an integrity check


def _check_md5_digest(header: bytes, digest: bytes) -> None:
    """Refuse a body whose MD5 C{digest} is not the one C{header} names."""
    try:
        expected = base64.b64decode(header.strip(), validate=True)
    except ValueError:
        raise ChecksumMismatch("Content-MD5 is not valid base64") from None
    if digest != expected:
        raise ChecksumMismatch("Content-MD5 does not match the body; nothing was stored")


def prepare_upload(body: bytes, content_md5: bytes | None = None) -> StateUpload:
    """Check, hash and parse a state body (pure; run in a thread for large bodies)."""
    verify_md5(content_md5, body)
    if not body:
        raise InvalidState("the body is empty; POST the whole state file")
    return StateUpload(raw=body, sha256=hashlib.sha256(body).hexdigest(),
                       parsed=parse_state(body))


_gc_pause_lock = threading.Lock()
_gc_pauses = 0


@contextlib.contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a large state is parsed.

    Parsing a 100 MB state creates millions of objects; each full collection
    then walks them all with the GIL held (~150 ms measured), stalling the
    reactor thread.  JSON documents hold no reference cycles, so pausing the
    collector for the parse frees nothing late.  Nested pauses from parallel
    parses are counted.
    """
    global _gc_pauses
    with _gc_pause_lock:
        _gc_pauses += 1
        if _gc_pauses == 1:
            gc.disable()
    try:
        yield
    finally:
        with _gc_pause_lock:
            _gc_pauses -= 1
            if _gc_pauses == 0:
                gc.enable()


def _prepare_large_upload(body: bytes, content_md5: bytes | None,
                          streamed: StreamedResources | None = None) -> StateUpload:
    """L{prepare_upload} of a large body, its digests computed beside the
    parse: hashlib lets go of the GIL on large buffers, so the MD5 and
    SHA-256 of a 120 MB body (~0.4 s) cost no time on a second core.  The
    answers are L{prepare_upload}'s, in its order: a wrong C{Content-MD5}
    first, then what the parse refuses."""
    digests: dict[str, bytes] = {}

    def digest() -> None:
        if content_md5 is not None:
            digests["md5"] = hashlib.md5(body).digest()  # noqa: S324 - an integrity check
        digests["sha256"] = hashlib.sha256(body).digest()

    worker = threading.Thread(target=digest, name="kilolock-upload-digests", daemon=True)
    worker.start()
    parsed: ParsedState | None = None
    try:
        with _cyclic_gc_paused():
            parsed = parse_state(body, streamed) if body else None
    finally:
        worker.join()
        if content_md5 is not None:
            _check_md5_digest(content_md5, digests["md5"])
    if parsed is None:
        raise InvalidState("the body is empty; POST the whole state file")
    return StateUpload(raw=body, sha256=digests["sha256"].hex(), parsed=parsed)


async def parse_upload(request: Request, body: bytes, reactor: Any) -> StateUpload:
    """L{prepare_upload} of a request's body (its C{Content-MD5} checked), off
    the reactor thread for bodies over the threshold.

    @return: (awaited) the L{StateUpload}.
    """
    content_md5 = request.getHeader(b"Content-MD5")
    if len(body) < THREAD_THRESHOLD or reactor is None:
        return prepare_upload(body, content_md5)
    return await deferToThreadPool(reactor, reactor.getThreadPool(), _prepare_large_upload,
                                   body, content_md5)


def start_upload_feed(body: bytes, content_md5: bytes | None, reactor: Any) -> UploadFeed:
    """Start L{prepare_upload} of a large body (C{content_md5} the request's
    C{Content-MD5}) in a thread, its rows fed to a store as they come
    (L{kilolock.store.upload_feed}); the answers and their order are
    L{parse_upload}'s.

    @return: the L{UploadFeed}, whose C{parsed()} fires with the upload."""
    feed = UploadFeed(len(body))
    feed.watch(deferToThreadPool(reactor, reactor.getThreadPool(), feed.parse_with,
                                 lambda streamed: _prepare_large_upload(body, content_md5,
                                                                        streamed)))
    return feed


def release_after_answer(reactor: Any, *held: object) -> None:
    """Keep C{held} (e.g. a large upload: its body, parse and projection)
    alive until the reactor has been through its I/O once more, so that the
    answer written now is on the socket before they are freed (a 120 MB
    state's objects take ~30 ms to free, in the reactor thread, when the
    handler's frame ends).

    A transport sends what it was given when the reactor next polls, after
    the delayed calls due now; a delayed call made by one of those runs
    only after that poll: hence two hops."""
    reactor.callLater(0, reactor.callLater, 0, _release, held)


def _release(held: tuple[object, ...]) -> None:
    """Nothing: C{held} is freed when the delayed call that carried it ends."""


async def in_thread_if_large(reactor: Any, size: int, function: Callable[..., T],
                             *args: Any) -> T:
    """C{function(*args)}, in the reactor's thread pool when C{size} bytes are
    involved beyond the threshold (inline without a reactor: in-memory tests).

    @return: (awaited) what C{function} returns.
    """
    if reactor is None or size < THREAD_THRESHOLD:
        return function(*args)
    result: T = await deferToThreadPool(reactor, reactor.getThreadPool(), function, *args)
    return result


def unlock_lock_id(body: bytes, query_id: str | None, allow_plain: bool) -> str | None:
    """The lock ID an unlock request names, or None for a force release.

    Accepted: LockInfo JSON (an empty or absent C{ID} means force), an empty
    body (force, or the C{?ID=} query value when given), a JSON string, and on
    the C{/v1/state-unlock} alias also a plain lock-id string.  The body
    follows the text rules of L{kilolock.core.text} like a LOCK body.
    """
    if not body.strip():
        return query_id or None
    if len(body) > MAX_LOCK_INFO_BYTES:
        raise InvalidText(TOO_LONG, f"the unlock body is larger than {MAX_LOCK_INFO_BYTES}"
                                    " bytes")
    try:
        doc = load_json(body, "the unlock body")
    except NotJSON:
        if allow_plain:
            text = check_text(decode_utf8(body, "the unlock body").strip(), "the lock ID",
                              max_length=MAX_LOCK_ID_LENGTH)
            if text.isprintable() and " " not in text:
                return text
        raise BadRequest("the unlock body is not valid JSON (send the LockInfo, or nothing"
                         " to force-unlock)") from None
    if isinstance(doc, dict):
        doc = doc.get("ID", "")
        if doc is None:
            return None
        if not isinstance(doc, str):
            raise BadRequest("LockInfo ID must be a string")
    if isinstance(doc, str):
        return check_text(doc, "the lock ID", "ID", MAX_LOCK_ID_LENGTH) or None
    raise BadRequest("the unlock body must be LockInfo JSON, a lock ID string, or empty")
