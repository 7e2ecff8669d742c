"""The chunks of upload sessions in the PostgreSQL store (schema 19): with
encryption keys each chunk is sealed as versions are (bound to its session
and offset), opened at the commit, and its row deleted once the session is
committed or abandoned; kilolock-migrate's key jobs rewrap, seal and open
the chunks of sessions in progress too.  (What the data directory and a
pg_dump hold: test_at_rest_disk.py.)"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import psycopg2
import pytest
import pytest_twisted
from twisted.internet.threads import deferToThread

from kilolock.atrest.chunks import SEAL_OVERHEAD
from kilolock.atrest.errors import ChunkUnauthentic, StoredVersionUnreadable
from kilolock.atrest.keyring import KeyEncryptionKey, KeyRing
from kilolock.core.model import DEFAULT_TENANT, utcnow
from kilolock.migrate.rows import JOBS, run_job
from kilolock.stateops.model import Owner, UploadSession
from kilolock.store.postgres.store import PostgresStateStore
from tests.support.at_rest_support import execute, provider, query, secret
from tests.support.awaiting import failure_of
from tests.support.fixtures_postgres import upgrade_schema

pytestmark = pytest.mark.postgres

OWNER = Owner(DEFAULT_TENANT, "token:t1")
OLD = {"2025-06": secret()}
NEW = {"2026-12": secret()}
MARKER = b"chunk-secret-" + os.urandom(12).hex().encode()
RAW = MARKER + b"-" + os.urandom(3000).hex().encode() + b"-" + MARKER


@contextlib.asynccontextmanager
async def running(dsn: str, keys: dict[str, bytes] | None = None,
                  active: str = "2026-12") -> AsyncIterator[PostgresStateStore]:
    """A started store (a Kilolock process), stopped when the block ends."""
    from twisted.internet import reactor

    store = PostgresStateStore(dsn, reactor, pool_size=2, key_provider=None if keys is None
                               else provider(active, keys))
    await store.start()
    try:
        yield store
    finally:
        await store.stop()


def session(upload_id: str, raw: bytes = RAW) -> UploadSession:
    now = utcnow()
    return UploadSession(id=upload_id, owner=OWNER, state_path="big", size=len(raw),
                         sha256=hashlib.sha256(raw).hexdigest(), created_at=now,
                         expires_at=now + timedelta(hours=1))


async def put(store: Any, upload_id: str, offset: int, data: bytes) -> None:
    now = utcnow()
    await store.put_chunk(OWNER, upload_id, offset, data, now, now + timedelta(hours=1))


async def upload_in_pieces(store: Any, upload_id: str, raw: bytes = RAW,
                           size: int = 1000) -> None:
    await store.open_upload(session(upload_id, raw), 8)
    for offset in range(0, len(raw), size):
        await put(store, upload_id, offset, raw[offset:offset + size])


def chunk_rows(dsn: str, upload_id: str) -> list[tuple[int, int, bytes, str | None]]:
    return [(offset, length, bytes(data), kek_id) for offset, length, data, kek_id in query(
        dsn, 'SELECT "offset", length, data, kek_id FROM upload_chunks WHERE session_id = %s'
             ' ORDER BY "offset"', (upload_id,))]


@pytest_twisted.ensureDeferred
async def test_sealed_chunks_open_at_the_commit_and_go_with_it(postgres_dsn: str) -> None:
    """With keys: every chunk row holds ciphertext (29 bytes more than the
    chunk, its data key under the active key), the commit reads the exact
    bytes, and a committed or an abandoned session leaves no chunk row."""
    async with running(postgres_dsn, NEW) as store:
        await upload_in_pieces(store, "up_commit")
        rows = chunk_rows(postgres_dsn, "up_commit")
        assert [offset for offset, *_ in rows] == list(range(0, len(RAW), 1000))
        for _, length, data, kek_id in rows:
            assert (len(data), kek_id) == (length + SEAL_OVERHEAD, "2026-12")
            assert MARKER not in data and MARKER[:16] not in data
        assert await store.upload_bytes(OWNER, "up_commit", utcnow()) == RAW
        assert await store.finish_upload(OWNER, "up_commit", 1) is True
        assert chunk_rows(postgres_dsn, "up_commit") == []
        committed = await store.find_upload(OWNER, "up_commit", utcnow())
        assert committed is not None and committed.complete
        await upload_in_pieces(store, "up_abandon")
        assert await store.finish_upload(OWNER, "up_abandon", None) is True
        assert query(postgres_dsn, "SELECT count(*) FROM upload_chunks") == [(0,)]


@pytest_twisted.ensureDeferred
async def test_chunks_moved_between_sessions_fail_authentication(postgres_dsn: str) -> None:
    """Two sessions' chunks at the same offset and length swapped in the
    database: the commit's read fails with a typed 502 error, never the
    other session's bytes."""
    other = RAW.replace(MARKER, b"x" * len(MARKER))
    async with running(postgres_dsn, NEW) as store:
        await upload_in_pieces(store, "up_a")
        await upload_in_pieces(store, "up_b", other)
        execute(postgres_dsn, """
            UPDATE upload_chunks c SET data = o.data, data_key = o.data_key
            FROM upload_chunks o WHERE o."offset" = c."offset" AND o.session_id <> c.session_id
            AND c."offset" = 0""")
        for upload_id in ("up_a", "up_b"):
            error = await failure_of(store.upload_bytes(OWNER, upload_id, utcnow()),
                                     ChunkUnauthentic)
            assert error.status == 502 and "offset 0" in error.message


@pytest_twisted.ensureDeferred
async def test_a_session_begun_before_encryption_was_on_commits_after(
        postgres_dsn: str) -> None:
    """Chunks received plain by a server without keys and sealed by one with
    keys read back as one state; a server without keys cannot open the
    sealed ones (502, typed)."""
    half = len(RAW) // 2
    async with running(postgres_dsn) as plain:
        await plain.open_upload(session("up_mixed"), 8)
        await put(plain, "up_mixed", 0, RAW[:half])
    async with running(postgres_dsn, NEW) as keyed:
        await put(keyed, "up_mixed", half, RAW[half:])
        assert [kek for *_, kek in chunk_rows(postgres_dsn, "up_mixed")] == [None, "2026-12"]
        assert await keyed.upload_bytes(OWNER, "up_mixed", utcnow()) == RAW
    async with running(postgres_dsn) as plain:
        await failure_of(plain.upload_bytes(OWNER, "up_mixed", utcnow()),
                         StoredVersionUnreadable)


def ring(active: str, keys: dict[str, bytes]) -> KeyRing:
    return KeyRing([KeyEncryptionKey(key_id, material) for key_id, material in keys.items()],
                   active)


async def job(dsn: str, name: str, keys: KeyRing) -> Any:
    def run() -> Any:
        connection = psycopg2.connect(dsn)
        try:
            return run_job(connection, JOBS[name], keys)
        finally:
            connection.close()

    return await deferToThread(run)


@pytest_twisted.ensureDeferred
async def test_the_key_jobs_rewrap_open_and_seal_pending_chunks(postgres_dsn: str) -> None:
    """A session in progress under the old key: rotate-keys rewraps its
    chunks' data keys (their ciphertext unchanged), decrypt-versions opens
    them (a server without keys then commits it), encrypt-versions seals
    them again; the exact bytes read back at every step."""
    both = {**NEW, **OLD}
    async with running(postgres_dsn, OLD, "2025-06") as old:
        await upload_in_pieces(old, "up_pending")
    sealed = chunk_rows(postgres_dsn, "up_pending")
    rotated = await job(postgres_dsn, "rotate-keys", ring("2026-12", both))
    assert (rotated.chunks_changed, rotated.remaining) == (len(sealed), 0)
    after = chunk_rows(postgres_dsn, "up_pending")
    assert [row[:3] for row in after] == [row[:3] for row in sealed]
    assert {kek for *_, kek in after} == {"2026-12"}
    async with running(postgres_dsn, NEW) as keyed:
        assert await keyed.upload_bytes(OWNER, "up_pending", utcnow()) == RAW
    opened = await job(postgres_dsn, "decrypt-versions", ring("2026-12", NEW))
    assert (opened.chunks_changed, opened.remaining) == (len(sealed), 0)
    assert b"".join(data for _, _, data, _ in chunk_rows(postgres_dsn, "up_pending")) == RAW
    async with running(postgres_dsn) as plain:
        assert await plain.upload_bytes(OWNER, "up_pending", utcnow()) == RAW
    resealed = await job(postgres_dsn, "encrypt-versions", ring("2026-12", NEW))
    assert resealed.chunks_changed == len(sealed)
    assert all(MARKER not in data for _, _, data, _ in chunk_rows(postgres_dsn, "up_pending"))
    async with running(postgres_dsn, NEW) as keyed:
        assert await keyed.upload_bytes(OWNER, "up_pending", utcnow()) == RAW


@pytest.mark.parametrize("database_at_schema", [18], indirect=True)
@pytest_twisted.ensureDeferred
async def test_the_upgrade_deletes_the_chunk_rows_of_committed_sessions(
        database_at_schema: str) -> None:
    """Before schema 19 a commit emptied its chunks' data and kept the rows;
    the upgrade deletes those rows, and keeps the chunks of a session in
    progress, which then commits."""
    dsn = database_at_schema
    half = len(RAW) // 2
    for upload_id, committed in (("up_done", 1), ("up_open", None)):
        execute(dsn, "INSERT INTO upload_sessions (id, tenant_id, principal, state_path, size,"
                     " sha256, created_at, expires_at, committed_version) VALUES (%s, %s, %s,"
                     " 'big', %s, %s, now(), now() + interval '1 hour', %s)",
                (upload_id, OWNER.tenant, OWNER.principal, len(RAW),
                 hashlib.sha256(RAW).hexdigest(), committed))
        for offset, data in ((0, RAW[:half]), (half, RAW[half:])):
            execute(dsn, 'INSERT INTO upload_chunks (session_id, "offset", length, sha256, data)'
                         " VALUES (%s, %s, %s, %s, %s)",
                    (upload_id, offset, len(data), hashlib.sha256(data).hexdigest(),
                     b"" if committed else data))
    upgrade_schema(dsn)
    assert query(dsn, "SELECT DISTINCT session_id FROM upload_chunks") == [("up_open",)]
    async with running(dsn, NEW) as store:
        assert await store.upload_bytes(OWNER, "up_open", utcnow()) == RAW
        done = await store.find_upload(OWNER, "up_done", utcnow())
        assert done is not None and done.committed_version == 1 and done.complete
