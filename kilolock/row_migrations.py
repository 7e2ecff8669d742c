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

Blocking code, for the command line only; nothing printed holds a secret.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import IO, Any

from attrs import field, frozen

from kilolock.atrest.compression import Codec, compress_version
from kilolock.atrest.envelope import VersionColumns, WrappedKey
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


Transform = Callable[[Row, Callable[[], bytes], KeyRing | None], "Change | None"]


@frozen
class Job:
    """A migration: the rows it changes (C{where}, on C{v}), how many per
    transaction, and the change of one row (None: nothing to change)."""

    name: str
    what: str
    where: str
    transform: Transform
    needs_keys: bool
    batch: int = 500


@frozen
class JobReport:
    changed: int = 0
    unchanged: int = 0
    failed: tuple[tuple[str, str, int, str], ...] = field(default=())
    remaining: int = 0


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


#: The jobs, by command name.  C{%(active)s} is the active key id.
JOBS = {
    "rotate-keys": Job("rotate-keys", "rewrapping data keys",
                       "v.kek_id IS NOT NULL AND v.kek_id <> %(active)s", _rotate, True, 1000),
    "encrypt-versions": Job("encrypt-versions", "encrypting versions",
                            "v.data_key IS NULL AND v.codec <> 'pruned'", _encrypt, True, 200),
    "decrypt-versions": Job("decrypt-versions", "decrypting versions",
                            "v.data_key IS NOT NULL", _decrypt, True, 200),
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


def count_rows(cursor: Any, job: Job, active: str | None) -> int:
    cursor.execute(_COUNT.format(where=job.where), {"active": active})
    return int(cursor.fetchone()[0])


def run_job(connection: Any, job: Job, keys: KeyRing | None,
            progress: RowProgress | None = None, batch: int | None = None) -> JobReport:
    """Run C{job} on a psycopg2 C{connection} (not in autocommit), one
    committed transaction per batch.  @return: its L{JobReport}."""
    active = None if keys is None else keys.active_key_id
    after, changed, unchanged = 0, 0, 0
    failed: list[tuple[str, str, int, str]] = []
    size = batch or job.batch
    while True:
        with connection, connection.cursor() as cursor:
            cursor.execute(_BATCH.format(where=job.where),
                           {"after": after, "batch": size, "active": active})
            rows = [_row(values) for values in cursor.fetchall()]
            for row in rows:
                change = _change(cursor, job, row, keys, failed)
                if change is None:
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
    with connection, connection.cursor() as cursor:
        remaining = count_rows(cursor, job, active) - sum(
            1 for _ in failed)
    return JobReport(changed, unchanged, tuple(failed), max(remaining, 0))


def _row(values: Any) -> Row:
    (row_id, tenant, path, number, serial, sha256, size, codec, data_key,
     base_sha256) = values
    return Row(tenant, path, number, serial, sha256, size, codec,
               None if data_key is None else bytes(data_key), base_sha256, id=row_id)


def _change(cursor: Any, job: Job, row: Row, keys: KeyRing | None,
            failed: list[tuple[str, str, int, str]]) -> Change | None:
    """One row's change; a row whose bytes cannot be opened is reported
    (tenant, path, number, why) and left as it is."""

    def payload() -> bytes:
        cursor.execute(_PAYLOAD, (row.id,))
        return bytes(cursor.fetchone()[0])

    try:
        return job.transform(row, payload, keys)
    except StoredVersionUnreadable as error:
        failed.append((row.tenant, row.path, row.number, f"{error.code}: {error.message}"))
        return None
