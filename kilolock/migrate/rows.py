"""Migrations of version rows, online: rotating key-encryption keys,
encrypting an unencrypted database (and the reverse), compressing rows
written before compression.  What C{kilolock-migrate rotate-keys},
C{encrypt-versions}, C{decrypt-versions} and C{compress-versions} run.

Each job walks C{state_versions} in id order, a batch per transaction:
the batch's rows are locked C{FOR UPDATE SKIP LOCKED} (a row a running
Kilolock is changing -- a purge re-encoding it, a prune -- is skipped, and
Kilolock never waits for the job: it only ever adds rows, which the job
does not touch, or locks its state's row first), changed, committed.  A
batch that fails rolls back alone.  So a job runs next to live servers,
can be interrupted at any time, and run again: it picks up the rows that
still match (the key id that is not the active one, no data key, a data
key, the C{identity} codec).  A job ends by counting what still matches
(rows busy during the run, or written meanwhile by a server with an older
configuration): the command says so and exits non-zero until none does.

Rotation rewraps data keys only (a few dozen bytes per row): payloads are
untouched, so PostgreSQL keeps their TOAST as it is.  Encrypting and
decrypting seal or open the compressed payload as it is, never
recompressing.  Compressing writes a full zstd snapshot (sealed again under
a fresh data key when the row was encrypted).

Rotating, encrypting and decrypting then do the same to the chunks of the
upload sessions in progress (C{upload_chunks}, in (session, offset) order,
sealed as versions are: L{kilolock.atrest.chunks}), so that after a
rotation no data key is wrapped under the old key anywhere, and after
decrypting a server without keys can commit every session.

Blocking code, for the command line only; nothing printed holds a secret.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import IO, Any

from attrs import field, frozen

from kilolock.atrest.chunks import StoredChunk, open_chunk, seal_chunk
from kilolock.atrest.compression import Codec, compress_version
from kilolock.atrest.envelope import ChunkIdentity, VersionColumns, WrappedKey
from kilolock.atrest.errors import StoredVersionUnreadable
from kilolock.atrest.keyring import KeyRing
from kilolock.atrest.stored import StoredPayload, decode_version, decrypt_stored, encrypt_stored

__all__ = ["JOBS", "Job", "JobReport", "RowProgress", "run_job"]


@frozen
class Row(VersionColumns):
    """A candidate row: its id, where it is and what identifies its bytes."""

    data_key: bytes | None
    base_sha256: str | None
    id: int = field(kw_only=True)


@frozen
class Change:
    """The columns a job sets on a row."""

    codec: str
    payload: bytes | None  # None: the payload stays as it is
    data_key: bytes | None
    kek_id: str | None


@frozen
class ChunkRow:
    """A candidate chunk of an upload session: what it is bound to, and its
    wrapped data key (None: not sealed)."""

    identity: ChunkIdentity
    data_key: bytes | None


@frozen
class ChunkChange:
    """The columns a job sets on a chunk (C{data} None: it stays as it is)."""

    data: bytes | None
    data_key: bytes | None
    kek_id: str | None


Transform = Callable[[Row, Callable[[], bytes], KeyRing | None], "Change | None"]
ChunkTransform = Callable[[ChunkRow, Callable[[], bytes], KeyRing], ChunkChange]


@frozen
class Job:
    """A migration: the rows it changes (C{where}, on C{v}), how many per
    transaction, and the change of one row (None: nothing to change); the
    chunks of upload sessions it changes (C{chunk_where}, on C{c}; None:
    none) and the change of one."""

    name: str
    what: str
    where: str
    transform: Transform
    needs_keys: bool
    batch: int = 500
    chunk_where: str | None = None
    chunk_transform: ChunkTransform | None = None


@frozen
class JobReport:
    """What a job did: version rows changed, and left as they were (nothing
    to change); C{failed}: what could not be read (which row or chunk, and
    why); chunks changed; rows and chunks still to do."""

    changed: int = 0
    unchanged: int = 0
    failed: tuple[tuple[str, str], ...] = field(default=())
    remaining: int = 0
    chunks_changed: int = 0


class RowProgress:
    """Rows done out of a total, on C{stream}: a bar redrawn in place on a
    terminal, a line every 10 % elsewhere."""

    WIDTH = 30

    def __init__(self, total: int, stream: IO[str], label: str) -> None:
        self.total = max(total, 1)
        self.stream = stream
        self.label = label
        self.done = 0
        self._shown = -1.0
        self._tty = getattr(stream, "isatty", lambda: False)()

    def advance(self, count: int) -> None:
        self.done += count
        fraction = min(1.0, self.done / self.total)
        step = 0.01 if self._tty else 0.1
        if fraction - self._shown < step and fraction < 1.0:
            return
        self._shown = fraction
        filled = int(fraction * self.WIDTH)
        line = (f"kilolock-migrate: {self.label} {self.done}/{self.total} rows"
                f" [{'#' * filled}{'.' * (self.WIDTH - filled)}] {fraction * 100:3.0f}%")
        self.stream.write(f"\r{line}" if self._tty else f"{line}\n")
        self.stream.flush()

    def finish(self) -> None:
        if self._tty:
            self.stream.write("\n")
            self.stream.flush()


def _ring(keys: KeyRing | None) -> KeyRing:
    assert keys is not None
    return keys


def _rotate(row: Row, payload: Callable[[], bytes], keys: KeyRing | None) -> Change | None:
    assert row.data_key is not None
    wrapped = _ring(keys).rewrap(WrappedKey.from_bytes(row.data_key))
    return Change(row.codec, None, wrapped.to_bytes(), wrapped.key_id)


def _encrypt(row: Row, payload: Callable[[], bytes], keys: KeyRing | None) -> Change | None:
    ring = _ring(keys)
    sealed = encrypt_stored(StoredPayload(Codec(row.codec), payload()), row.identity,
                            row.base_sha256, ring.generate())
    return Change(row.codec, sealed.payload, sealed.data_key, sealed.key_id)


def _decrypt(row: Row, payload: Callable[[], bytes], keys: KeyRing | None) -> Change | None:
    assert row.data_key is not None
    data_key = _ring(keys).unwrap(WrappedKey.from_bytes(row.data_key))
    opened = decrypt_stored(StoredPayload(Codec(row.codec), payload(), row.data_key),
                            row.identity, row.base_sha256, data_key)
    return Change(row.codec, opened.payload, None, None)


def _compress(row: Row, payload: Callable[[], bytes], keys: KeyRing | None) -> Change | None:
    data_key = None
    if row.data_key is not None:
        data_key = _ring(keys).unwrap(WrappedKey.from_bytes(row.data_key))
    raw = decode_version(StoredPayload(Codec.IDENTITY, payload(), row.data_key), row.identity,
                         None, data_key)
    compressed = compress_version(raw, None)
    if compressed.codec is Codec.IDENTITY:
        return None  # zstd does not shrink it (an encrypted envelope): it stays
    if row.data_key is None:
        return Change(compressed.codec.value, compressed.data, None, None)
    sealed = encrypt_stored(StoredPayload(compressed.codec, compressed.data), row.identity,
                            None, _ring(keys).generate())
    return Change(compressed.codec.value, sealed.payload, sealed.data_key, sealed.key_id)


def _rotate_chunk(row: ChunkRow, data: Callable[[], bytes], keys: KeyRing) -> ChunkChange:
    assert row.data_key is not None
    wrapped = keys.rewrap(WrappedKey.from_bytes(row.data_key))
    return ChunkChange(None, wrapped.to_bytes(), wrapped.key_id)


def _encrypt_chunk(row: ChunkRow, data: Callable[[], bytes], keys: KeyRing) -> ChunkChange:
    sealed = seal_chunk(open_chunk(StoredChunk(data()), row.identity, None), row.identity,
                        keys.generate())
    return ChunkChange(sealed.data, sealed.data_key, sealed.key_id)


def _decrypt_chunk(row: ChunkRow, data: Callable[[], bytes], keys: KeyRing) -> ChunkChange:
    assert row.data_key is not None
    data_key = keys.unwrap(WrappedKey.from_bytes(row.data_key))
    return ChunkChange(bytes(open_chunk(StoredChunk(data(), row.data_key), row.identity,
                                        data_key)), None, None)


#: The jobs, by command name.  C{%(active)s} is the active key id.
JOBS = {
    "rotate-keys": Job("rotate-keys", "rewrapping data keys",
                       "v.kek_id IS NOT NULL AND v.kek_id <> %(active)s", _rotate, True, 1000,
                       "c.kek_id IS NOT NULL AND c.kek_id <> %(active)s", _rotate_chunk),
    "encrypt-versions": Job("encrypt-versions", "encrypting versions",
                            "v.data_key IS NULL AND v.codec <> 'pruned'", _encrypt, True, 200,
                            "c.data_key IS NULL", _encrypt_chunk),
    "decrypt-versions": Job("decrypt-versions", "decrypting versions",
                            "v.data_key IS NOT NULL", _decrypt, True, 200,
                            "c.data_key IS NOT NULL", _decrypt_chunk),
    "compress-versions": Job("compress-versions", "compressing versions",
                             "v.codec = 'identity'", _compress, False, 100),
}

_BATCH = """
SELECT v.id, s.tenant_id, s.path, v.number, v.serial, v.sha256, v.size, v.codec, v.data_key,
       b.sha256
FROM state_versions v JOIN states s ON s.id = v.state_id
LEFT JOIN state_versions b ON b.state_id = v.state_id AND b.number = v.base_number
WHERE v.id > %(after)s AND {where}
ORDER BY v.id LIMIT %(batch)s
FOR UPDATE OF v SKIP LOCKED
"""
_COUNT = "SELECT count(*) FROM state_versions v WHERE {where}"
_PAYLOAD = "SELECT payload FROM state_versions WHERE id = %s"
_UPDATE = ("UPDATE state_versions SET codec = %(codec)s, data_key = %(data_key)s,"
           " kek_id = %(kek_id)s{payload} WHERE id = %(id)s")

_CHUNK_BATCH = """
SELECT c.session_id, c."offset", c.length, c.sha256, c.data_key, s.tenant_id, s.principal
FROM upload_chunks c JOIN upload_sessions s ON s.id = c.session_id
WHERE (c.session_id, c."offset") > (%(session)s, %(offset)s) AND {where}
ORDER BY c.session_id, c."offset" LIMIT %(batch)s
FOR UPDATE OF c SKIP LOCKED
"""
_CHUNK_COUNT = "SELECT count(*) FROM upload_chunks c WHERE {where}"
_CHUNK_DATA = 'SELECT data FROM upload_chunks WHERE session_id = %s AND "offset" = %s'
_CHUNK_UPDATE = ("UPDATE upload_chunks SET data_key = %(data_key)s, kek_id = %(kek_id)s{data}"
                 ' WHERE session_id = %(session)s AND "offset" = %(offset)s')


def count_rows(cursor: Any, job: Job, active: str | None) -> int:
    """The version rows and chunks C{job} would change now."""
    cursor.execute(_COUNT.format(where=job.where), {"active": active})
    count = int(cursor.fetchone()[0])
    if job.chunk_where is not None:
        cursor.execute(_CHUNK_COUNT.format(where=job.chunk_where), {"active": active})
        count += int(cursor.fetchone()[0])
    return count


def run_job(connection: Any, job: Job, keys: KeyRing | None,
            progress: RowProgress | None = None, batch: int | None = None) -> JobReport:
    """Run C{job} on a psycopg2 C{connection} (not in autocommit), one
    committed transaction per batch: the version rows, then the chunks.
    @return: its L{JobReport}."""
    active = None if keys is None else keys.active_key_id
    after, changed, unchanged = 0, 0, 0
    failed: list[tuple[str, str]] = []
    size = batch or job.batch
    while True:
        with connection, connection.cursor() as cursor:
            cursor.execute(_BATCH.format(where=job.where),
                           {"after": after, "batch": size, "active": active})
            rows = [_row(values) for values in cursor.fetchall()]
            for row in rows:
                failures = len(failed)
                change = _change(cursor, job, row, keys, failed)
                if change is None:
                    if len(failed) == failures:
                        unchanged += 1
                    continue
                cursor.execute(_UPDATE.format(payload="" if change.payload is None
                                              else ", payload = %(payload)s"),
                               {"codec": change.codec, "data_key": change.data_key,
                                "kek_id": change.kek_id, "payload": change.payload,
                                "id": row.id})
                changed += 1
        if progress is not None:
            progress.advance(len(rows))
        if len(rows) < size:
            break
        after = rows[-1].id
    chunks_changed = _run_chunks(connection, job, keys, progress, size, failed)
    with connection, connection.cursor() as cursor:
        remaining = count_rows(cursor, job, active) - len(failed)
    return JobReport(changed, unchanged, tuple(failed), max(remaining, 0), chunks_changed)


def _run_chunks(connection: Any, job: Job, keys: KeyRing | None,
                progress: RowProgress | None, size: int,
                failed: list[tuple[str, str]]) -> int:
    """The chunks of C{job}, a batch per transaction.  @return: how many changed."""
    if job.chunk_where is None or job.chunk_transform is None:
        return 0
    transform = job.chunk_transform
    ring = _ring(keys)
    after: tuple[str, int] = ("", -1)
    changed = 0
    while True:
        with connection, connection.cursor() as cursor:
            cursor.execute(_CHUNK_BATCH.format(where=job.chunk_where), {
                "session": after[0], "offset": after[1], "batch": size,
                "active": ring.active_key_id})
            rows = [ChunkRow(ChunkIdentity(session_id, tenant, principal, int(offset),
                                           int(length), sha256),
                             None if data_key is None else bytes(data_key))
                    for session_id, offset, length, sha256, data_key, tenant, principal
                    in cursor.fetchall()]
            for row in rows:
                identity = row.identity

                def data(identity: ChunkIdentity = identity) -> bytes:
                    cursor.execute(_CHUNK_DATA, (identity.session_id, identity.offset))
                    return bytes(cursor.fetchone()[0])

                try:
                    change = transform(row, data, ring)
                except StoredVersionUnreadable as error:
                    failed.append((f"tenant {identity.tenant} upload {identity.session_id}"
                                   f" chunk at offset {identity.offset}",
                                   f"{error.code}: {error.message}"))
                    continue
                cursor.execute(_CHUNK_UPDATE.format(data="" if change.data is None
                                                    else ", data = %(data)s"),
                               {"data_key": change.data_key, "kek_id": change.kek_id,
                                "data": change.data, "session": identity.session_id,
                                "offset": identity.offset})
                changed += 1
        if progress is not None:
            progress.advance(len(rows))
        if len(rows) < size:
            return changed
        after = (rows[-1].identity.session_id, rows[-1].identity.offset)


def _row(values: Any) -> Row:
    (row_id, tenant, path, number, serial, sha256, size, codec, data_key,
     base_sha256) = values
    return Row(tenant, path, number, serial, sha256, size, codec,
               None if data_key is None else bytes(data_key), base_sha256, id=row_id)


def _change(cursor: Any, job: Job, row: Row, keys: KeyRing | None,
            failed: list[tuple[str, str]]) -> Change | None:
    """One row's change; a row whose bytes cannot be opened is reported
    (which row, and why) and left as it is."""

    def payload() -> bytes:
        cursor.execute(_PAYLOAD, (row.id,))
        return bytes(cursor.fetchone()[0])

    try:
        return job.transform(row, payload, keys)
    except StoredVersionUnreadable as error:
        failed.append((f"tenant {row.tenant} state {row.path} version {row.number}",
                       f"{error.code}: {error.message}"))
        return None
