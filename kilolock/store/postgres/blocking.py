"""Large states on a blocking connection in a worker thread.

The asynchronous path (txpostgres on the reactor thread) drives libpq in
non-blocking mode, where sending a big query is quadratic: every partial
flush of the socket (a few hundred KB) moves the whole unsent rest of
libpq's output buffer to its front.  A 120 MB state costs seconds of
C{memmove} on the reactor thread that way.  In blocking mode libpq sends the
buffer in one pass.  So the store runs the transactions that move many
megabytes -- writing a large state, reading one -- as the very same
C{_x_txn} coroutines, but on a short-lived blocking connection (psycopg2's,
opened at the first statement) in a thread of the reactor's pool, where they
also get COPY and binary results:

  - L{BlockingSession.run} drives a coroutine whose every C{await
    cursor.execute(...)} completes at once (the cursor here returns a fired
    Deferred), inside one transaction: committed when it returns, rolled back
    when it raises;
  - L{BlockingCursor.select_bytea} reads one bytea with a binary result on a
    psycopg 3 connection (L{kilolock.store.postgres.binary_read}: how the
    store reads a large state): the bytes as stored, neither hex-encoded by
    the server nor decoded here;
  - L{BlockingCursor.copy_in} streams rows into a table with C{COPY ... FROM
    STDIN}: L{binary_copy} (a state's bytes go in as they are: no SQL literal
    for the server to scan, no quoted copy here) or L{text_copy} (projection
    rows, escaped as COPY's text format wants, produced a megabyte at a time);
  - L{BlockingSession.cancel} (from any thread) cancels the running statement,
    so an overall deadline holds.

The transactions themselves are L{kilolock.store.postgres.large}'s; this
module knows nothing of states.  Nothing here logs query parameters or the
connection string.
"""

from __future__ import annotations

import contextlib
import ctypes
import struct
import threading
from collections.abc import Callable, Coroutine, Iterable, Iterator
from datetime import UTC, datetime
from typing import Any, TypeVar

import psycopg2
from psycopg2.extensions import register_type
from twisted.internet.defer import Deferred, succeed

from kilolock.store.postgres import binary_read

__all__ = ["BlockingCursor", "BlockingSession", "binary_copy", "copy_chunks", "plain_copy_text",
           "text_copy", "text_field"]

T = TypeVar("T")

#: The signature that starts PostgreSQL's binary COPY format.
_COPY_SIGNATURE = b"PGCOPY\n\xff\r\n\x00"
#: Bytes handed to libpq per COPY data message.
COPY_CHUNK = 1 << 20
#: Where PostgreSQL's binary timestamps count from.
_POSTGRES_EPOCH = datetime(2000, 1, 1, tzinfo=UTC)


class BlockingCursor:
    """The cursor of a L{BlockingSession}, shaped like a txpostgres cursor:
    C{execute} runs the statement and returns a fired Deferred.

    Statements run on the session's psycopg2 connection, opened at the first
    one; L{select_bytea} instead runs on a psycopg 3 connection of its own.
    """

    def __init__(self, session: BlockingSession) -> None:
        self._session = session

    def execute(self, query: str, params: Any = None, *, commit: bool = False) -> Deferred[None]:
        """Run C{query}; C{commit} is accepted for the pool cursor's sake and
        ignored (the session commits when the transaction returns)."""
        self._session.cursor().execute(query, params)
        return succeed(None)

    def select_bytea(self, query: str, params: Any = None) -> bytes | None:
        """The single bytea column of the single row C{query} selects (None
        when it selects no row), with a binary result on a short-lived psycopg 3
        connection (autocommit: outside this session's psycopg2 transaction,
        so use it alone in a transaction)."""
        return self._session.select_bytea(query, params)

    def copy_in(self, statement: str, data: Iterable[bytes]) -> None:
        """Run C{statement} (a C{COPY ... FROM STDIN}), sending C{data}."""
        self._session.cursor().copy_expert(statement, _Reader(data), size=COPY_CHUNK)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session.cursor(), name)


class _Reader:
    """A read-only file over an iterable of byte strings (for C{copy_expert})."""

    def __init__(self, data: Iterable[bytes]) -> None:
        self._data = iter(data)

    def read(self, size: int = -1) -> bytes:
        parts: list[bytes] = []
        total = 0
        for part in self._data:
            parts.append(part)
            total += len(part)
            if 0 <= size <= total:
                break
        return b"".join(parts)

    def readline(self, size: int = -1) -> bytes:
        return self.read(size)


def binary_copy(rows: Iterable[Iterable[tuple[str, Any]]]) -> Iterator[bytes]:
    """Rows in PostgreSQL's binary COPY format, a piece at a time.

    A row is a sequence of (type, value) fields, the types being C{int8},
    C{int4}, C{bool}, C{text}, C{timestamptz} (an aware datetime) and
    C{bytea} (any bytes-like value, sent in L{COPY_CHUNK} slices without a
    copy of the whole); a None value is NULL.
    """
    yield _COPY_SIGNATURE + struct.pack("!II", 0, 0)
    for row in rows:
        fields = list(row)
        yield struct.pack("!h", len(fields))
        for kind, value in fields:
            if value is None:
                yield struct.pack("!i", -1)
                continue
            if kind == "bytea":
                view = memoryview(value).cast("B")
                yield struct.pack("!i", len(view))
                for start in range(0, len(view), COPY_CHUNK):
                    yield bytes(view[start:start + COPY_CHUNK])
                continue
            data = _binary_field(kind, value)
            yield struct.pack("!i", len(data)) + data
    yield struct.pack("!h", -1)


def _binary_field(kind: str, value: Any) -> bytes:
    if kind == "int8":
        return struct.pack("!q", value)
    if kind == "int4":
        return struct.pack("!i", value)
    if kind == "bool":
        return b"\x01" if value else b"\x00"
    if kind == "text":
        return str(value).encode("utf-8")
    if kind == "timestamptz":
        delta = value - _POSTGRES_EPOCH
        return struct.pack("!q", (delta.days * 86400 + delta.seconds) * 1_000_000
                           + delta.microseconds)
    raise ValueError(f"no binary COPY encoding for {kind}")


def text_copy(rows: Iterable[Iterable[Any]]) -> Iterator[bytes]:
    """Rows in COPY's text format (tab-separated, backslash escapes, C{\\N}
    for NULL; str, int and bool values), UTF-8, about L{COPY_CHUNK} bytes
    a piece."""
    return copy_chunks("\t".join(text_field(value) for value in row) + "\n" for row in rows)


def copy_chunks(lines: Iterable[str]) -> Iterator[bytes]:
    """Lines of COPY text (each a whole row, its newline included), UTF-8,
    about L{COPY_CHUNK} bytes a piece."""
    pending: list[str] = []
    size = 0
    for line in lines:
        pending.append(line)
        size += len(line)
        if size >= COPY_CHUNK:
            yield "".join(pending).encode("utf-8")
            pending.clear()
            size = 0
    if pending:
        yield "".join(pending).encode("utf-8")


def text_field(value: Any) -> str:
    """One value in COPY's text format: C{\\N} for None, C{t}/C{f}, else its
    text with backslash, tab, line feed and carriage return escaped."""
    if value is None:
        return "\\N"
    if value is True or value is False:
        return "t" if value else "f"
    text = str(value)
    if "\\" in text:
        text = text.replace("\\", "\\\\")
    if "\t" in text or "\n" in text or "\r" in text:
        text = text.replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    return text


def plain_copy_text(text: str, tabs: int = 0) -> bool:
    """Whether C{text} -- C{tabs + 1} text fields joined by tabs -- needs no
    escape in COPY's text format (no backslash, line break, or tab of its
    own): one scan for several fields."""
    return ("\\" not in text and "\n" not in text and "\r" not in text
            and text.count("\t") == tabs)


class BlockingSession:
    """One transaction on its own blocking connection, run in a worker thread.

    The psycopg2 connection is opened at the transaction's first statement;
    a transaction that only calls L{BlockingCursor.select_bytea} opens a
    psycopg 3 connection instead (see L{kilolock.store.postgres.binary_read}).

    @param dsn: the libpq connection string (with Kilolock's session settings:
        statement timeout, connect timeout, ...).
    @param prepare_connection: called with each new psycopg2 connection (e.g.
        to register the store's type casters).
    """

    def __init__(self, dsn: str, prepare_connection: Callable[[Any], None]) -> None:
        self._dsn = dsn
        self._prepare_connection = prepare_connection
        self._connection: Any = None
        self._cursor: Any = None
        #: The cancel of each connection open now (psycopg2's or psycopg 3's).
        self._cancels: dict[int, Callable[[], None]] = {}
        self._cancelled = False
        self._mutex = threading.Lock()

    def run(self, txn: Callable[..., Coroutine[Any, Any, T]], args: tuple[Any, ...]) -> T:
        """Run C{txn(cursor, *args)} as one transaction (blocking: call it in
        a thread): committed when it returns, rolled back when it raises.
        @return: its result."""
        release_free_memory()
        if self._cancelled:
            raise psycopg2.extensions.QueryCanceledError("cancelled before it started")
        try:
            try:
                result = _drive(txn(BlockingCursor(self), *args))
            except BaseException:
                self._end(commit=False)
                raise
            self._end(commit=True)
            return result
        finally:
            self._close()

    def cursor(self) -> Any:
        """The psycopg2 cursor of this session's transaction (connecting at
        the first call)."""
        if self._cursor is None:
            connection = psycopg2.connect(self._dsn)
            try:
                self._watch(connection, lambda: _cancel_psycopg2(connection))
                self._prepare_connection(connection)
                cursor = connection.cursor()
            except BaseException:
                self._unwatch(connection)
                connection.close()
                raise
            self._connection, self._cursor = connection, cursor
        return self._cursor

    def select_bytea(self, query: str, params: Any = None) -> bytes | None:
        """See L{BlockingCursor.select_bytea}: psycopg 3's errors are raised
        as psycopg2's (L{binary_read.psycopg2_errors})."""
        with binary_read.psycopg2_errors():
            connection = binary_read.open_read_connection(self._dsn)
            try:
                self._watch(connection, lambda: binary_read.cancel_read(connection))
                return binary_read.select_single_bytea(connection, query, params)
            finally:
                self._unwatch(connection)
                connection.close()

    def cancel(self) -> None:
        """Cancel the running statement, if any (from any thread); a session
        not started yet fails as soon as it starts or connects."""
        with self._mutex:
            self._cancelled = True
            cancels = list(self._cancels.values())
        for cancel in cancels:
            cancel()

    def _watch(self, connection: Any, cancel: Callable[[], None]) -> None:
        """Let L{cancel} reach C{connection} with C{cancel} (which raises
        nothing); fail if the session was cancelled already."""
        with self._mutex:
            if self._cancelled:
                raise psycopg2.extensions.QueryCanceledError("cancelled before it started")
            self._cancels[id(connection)] = cancel

    def _unwatch(self, connection: Any) -> None:
        with self._mutex:
            self._cancels.pop(id(connection), None)

    def _end(self, commit: bool) -> None:
        """Commit or roll back the psycopg2 transaction, if one was opened."""
        if self._connection is None:
            return
        if commit:
            self._cursor.close()
            self._connection.commit()
        else:
            self._connection.rollback()

    def _close(self) -> None:
        connection, self._connection, self._cursor = self._connection, None, None
        if connection is not None:
            self._unwatch(connection)
            connection.close()


def _cancel_psycopg2(connection: Any) -> None:
    """Cancel a psycopg2 connection's running statement; errors are ignored
    (the statement timeout still bounds it)."""
    with contextlib.suppress(psycopg2.Error):
        connection.cancel()


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim  # glibc only
    except (OSError, AttributeError):
        return None
    return trim


_MALLOC_TRIM = _malloc_trim()


def release_free_memory() -> None:
    """Hand the C heap's free pages back to the system (glibc's
    C{malloc_trim}; nothing elsewhere).

    A large state leaves tens of megabytes of freed but fragmented heap
    behind (its projection is made of many medium-sized strings); without
    this the next large transfer starts from that higher resident size, and
    the process's peak grows with every large state it has handled.
    """
    if _MALLOC_TRIM is not None:
        _MALLOC_TRIM(0)


def _drive(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine whose every await completes at once; its result."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        result: T = done.value
        return result
    coroutine.close()
    raise TypeError("a transaction step waited for something other than its blocking cursor")


def register_casters(*casters: Any) -> Callable[[Any], None]:
    """A C{prepare_connection} that registers psycopg2 type casters."""

    def prepare(connection: Any) -> None:
        for caster in casters:
            register_type(caster, connection)

    return prepare
