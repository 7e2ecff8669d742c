"""Encrypted versions in the PostgreSQL store: compressed then sealed under a
data key of their own, read back byte for byte, opaque to whoever reads
the database, bound to their row, and refused at start with the wrong key.

The memory store keeps raw bytes in memory and does not encrypt (there is
no "at rest" there): these tests are PostgreSQL's only.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_twisted

from kilolock.atrest.errors import AuthenticationFailed, StoredVersionUnreadable
from kilolock.core.errors import EncryptionKeysRefused
from kilolock.core.model import DEFAULT_TENANT, Principal, StateKey
from kilolock.store.postgres import large
from kilolock.store.postgres.reads import UNREADABLE
from kilolock.store.postgres.runner import KEYS_REFUSED
from kilolock.store.postgres.store import PostgresStateStore
from tests.support.at_rest_support import (
    execute,
    provider,
    query,
    secret,
    state_with,
    upload,
    version_rows,
)
from tests.support.awaiting import failure_of
from tests.support.log_events import logged

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

pytestmark = pytest.mark.postgres

ALICE = Principal(DEFAULT_TENANT, "alice")
KEY = StateKey(DEFAULT_TENANT, "secrets")
OTHER = StateKey(DEFAULT_TENANT, "other")
KEYS = {"2026-12": secret()}
MARKER = "kl-plain-marker-" + os.urandom(6).hex()
SENSITIVE = "kl-sensitive-marker-" + os.urandom(6).hex()


def make_store(dsn: str, keys: dict[str, bytes] | None = None,
               active: str = "2026-12") -> PostgresStateStore:
    from twisted.internet import reactor

    return PostgresStateStore(dsn, reactor, pool_size=2,
                              key_provider=None if keys is None else provider(active, keys))


@pytest_twisted.async_yield_fixture
async def store(postgres_dsn: str) -> AsyncIterator[PostgresStateStore]:
    built = make_store(postgres_dsn, KEYS)
    await built.start()
    yield built
    await built.stop()


async def write(store: Any, key: StateKey, raw: bytes) -> None:
    await store.write_state(key, upload(raw), None, ALICE)


@pytest_twisted.ensureDeferred
async def test_encrypted_versions_read_back_byte_for_byte(store: Any, postgres_dsn: str) -> None:
    """Snapshots and deltas are sealed (a data key per row, wrapped under the
    active key) and every version reads back exactly as written."""
    bodies = [state_with(serial, MARKER, SENSITIVE) for serial in range(1, 6)]
    for body in bodies:
        await write(store, KEY, body)
    for number, body in enumerate(bodies, 1):
        assert await store.read_version(KEY, number) == body
    assert await store.read_current(KEY) == bodies[-1]
    rows = version_rows(postgres_dsn)
    assert {codec for _, codec, *_ in rows} == {"zstd", "zstd-delta"}
    assert all(kek_id == "2026-12" and data_key is not None for *_, data_key, kek_id in rows)
    assert len({data_key for *_, data_key, _ in rows}) == len(rows)


@pytest_twisted.ensureDeferred
async def test_a_large_state_is_encrypted_on_the_blocking_path(
        store: Any, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write and a read on the large path (COPY, binary read) seal and open
    the payload too."""
    monkeypatch.setattr(large, "LARGE_TRANSFER_BYTES", 1)
    body = state_with(1, MARKER, SENSITIVE, count=200)
    await write(store, KEY, body)
    assert await store.read_current(KEY) == body
    [(_, codec, payload, data_key, kek_id)] = version_rows(postgres_dsn)
    assert (codec, kek_id) == ("zstd", "2026-12") and data_key is not None
    assert MARKER.encode() not in payload


@pytest_twisted.ensureDeferred
async def test_the_ciphertext_holds_no_plaintext(postgres_dsn: str) -> None:
    """Inspected with SQL: an encrypted payload holds no marker of the state
    and is no zstd frame; the same state written without keys decompresses
    to the marker (so the inspection would see one)."""
    body = state_with(1, MARKER, SENSITIVE)
    plain = make_store(postgres_dsn)
    await plain.start()
    try:
        await write(plain, OTHER, body)
    finally:
        await plain.stop()
    encrypted = make_store(postgres_dsn, KEYS)
    await encrypted.start()
    try:
        await write(encrypted, KEY, body)
    finally:
        await encrypted.stop()
    rows = dict(query(postgres_dsn, "SELECT s.path, v.payload FROM state_versions v"
                                    " JOIN states s ON s.id = v.state_id"))
    clear, sealed = bytes(rows["other"]), bytes(rows["secrets"])
    assert MARKER.encode() in zstd.decompress(clear)
    for marker in (MARKER, SENSITIVE, "aws_db_instance", "serial"):
        assert marker.encode() not in sealed
    with pytest.raises(zstd.ZstdError):
        zstd.decompress(sealed)
    found = query(postgres_dsn, "SELECT count(*) FROM state_versions WHERE"
                                " position(convert_to(%s, 'UTF8') in payload) > 0", (MARKER,))
    assert found == [(0,)]


@pytest_twisted.ensureDeferred
async def test_swapped_ciphertexts_fail_authentication(store: Any, postgres_dsn: str) -> None:
    """A payload (with its wrapped key) copied into another row fails
    authentication: a typed 502 error, never the other row's bytes."""
    await write(store, KEY, state_with(1, MARKER, SENSITIVE))
    await write(store, OTHER, state_with(1, "other-marker", "other-secret"))
    execute(postgres_dsn, """
        WITH a AS (SELECT v.id, v.payload, v.data_key FROM state_versions v
                   JOIN states s ON s.id = v.state_id WHERE s.path = 'secrets'),
             b AS (SELECT v.id, v.payload, v.data_key FROM state_versions v
                   JOIN states s ON s.id = v.state_id WHERE s.path = 'other')
        UPDATE state_versions v
           SET payload = CASE WHEN v.id = a.id THEN b.payload ELSE a.payload END,
               data_key = CASE WHEN v.id = a.id THEN b.data_key ELSE a.data_key END
        FROM a, b WHERE v.id IN (a.id, b.id)""")
    with logged(UNREADABLE) as events:
        for key in (KEY, OTHER):
            error = await failure_of(store.read_current(key), AuthenticationFailed)
            assert error.status == 502 and error.code == "stored_version_unauthentic"
    assert [(event["path"], event["code"]) for event in events] == [
        ("secrets", "stored_version_unauthentic"), ("other", "stored_version_unauthentic")]


@pytest_twisted.ensureDeferred
async def test_plain_rows_stay_readable_once_encryption_is_on(postgres_dsn: str) -> None:
    """Versions written before the keys were configured are read as they are;
    new versions are encrypted."""
    plain = make_store(postgres_dsn)
    await plain.start()
    try:
        await write(plain, KEY, state_with(1, MARKER, SENSITIVE))
    finally:
        await plain.stop()
    encrypted = make_store(postgres_dsn, KEYS)
    await encrypted.start()
    try:
        await write(encrypted, KEY, state_with(2, MARKER, SENSITIVE))
        assert await encrypted.read_version(KEY, 1) == state_with(1, MARKER, SENSITIVE)
        assert await encrypted.read_version(KEY, 2) == state_with(2, MARKER, SENSITIVE)
    finally:
        await encrypted.stop()
    assert [kek_id for *_, kek_id in version_rows(postgres_dsn)] == [None, "2026-12"]


async def written_with_keys(dsn: str) -> None:
    first = make_store(dsn, KEYS)
    await first.start()
    try:
        await write(first, KEY, state_with(1, MARKER, SENSITIVE))
    finally:
        await first.stop()


@pytest.mark.parametrize(("keys", "active", "names"), [
    ({"2026-12": secret()}, "2026-12", "cannot open the data keys"),
    ({"2027-06": secret()}, "2027-06", "'2026-12' cannot open"),
    (None, "", "no encryption keys are configured"),
], ids=["other-secret-same-id", "unknown-id", "no-keys"])
@pytest_twisted.ensureDeferred
async def test_the_wrong_keys_are_refused_at_start(
        postgres_dsn: str, keys: dict[str, bytes] | None, active: str, names: str) -> None:
    """A store whose keys cannot open the database's data keys does not
    start: a clear error in the log naming the key id and the fix, 503 to
    every call, nothing read."""
    await written_with_keys(postgres_dsn)
    wrong = make_store(postgres_dsn, keys, active)
    try:
        with logged(KEYS_REFUSED) as events:
            error = await failure_of(wrong.start(), EncryptionKeysRefused)
        assert names in error.detail and error.status == 503
        assert "--encryption-keys" in error.detail or "key file" in error.detail
        text = "\n".join(str(event.get("detail", "")) for event in events)
        assert names in text
        await failure_of(wrong.read_current(KEY), EncryptionKeysRefused)
        probe = await wrong.probe()
        assert not probe.reachable
    finally:
        await wrong.stop()


@pytest_twisted.ensureDeferred
async def test_a_key_file_with_the_old_key_too_starts(postgres_dsn: str) -> None:
    """After a rotation's first step (a new active key, the old one kept),
    the store starts, reads the old rows and wraps new ones under the new key."""
    await written_with_keys(postgres_dsn)
    rotated = make_store(postgres_dsn, {"2027-06": secret(), **KEYS}, "2027-06")
    await rotated.start()
    try:
        await write(rotated, KEY, state_with(2, MARKER, SENSITIVE))
        assert await rotated.read_version(KEY, 1) == state_with(1, MARKER, SENSITIVE)
    finally:
        await rotated.stop()
    assert [kek_id for *_, kek_id in version_rows(postgres_dsn)] == ["2026-12", "2027-06"]


@pytest_twisted.ensureDeferred
async def test_a_damaged_wrapped_key_is_a_typed_error(store: Any, postgres_dsn: str) -> None:
    """A data key altered in the database cannot be unwrapped: a typed 502
    error naming the check, not a 500."""
    await write(store, KEY, state_with(1, MARKER, SENSITIVE))
    execute(postgres_dsn, "UPDATE state_versions SET data_key ="
                          " overlay(data_key placing '\\x00'::bytea from 20 for 1)")
    error = await failure_of(store.read_current(KEY), StoredVersionUnreadable)
    assert error.status == 502 and error.code == "data_key_unwrap_failed"
