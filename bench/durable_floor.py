"""The durable floor: what PostgreSQL itself costs for the write cycle.

A minimal asyncio psycopg 3 client, no HTTP, does the database work of one
LOCK -> POST -> UNLOCK cycle of Kilolock's PostgreSQL store, with the same
bytes and the same commits, on Kilolock's own schema:

  - LOCK: the lock row, and its audit event (the tenant's chain head moved);
  - POST: the state row touched, the version row (the same compressed
    payload Kilolock stores: a zstd delta against the state's first version),
    the projection left alone (Kilolock leaves unchanged tables alone too),
    the audit event;
  - UNLOCK: the lock row deleted, and its event.

Each is one transaction sent in pipeline mode (one round trip), so the
figure is the database's cost of the work plus a client as cheap as Python
gets.  Kilolock's rate divided by this one is its distance from the
database.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import psycopg

from kilolock.atrest.compression import Base, Snapshot, compress_version
from kilolock.store.schema.upgrade import ensure_schema_blocking

LOCK = ("INSERT INTO locks (state_id, lock_id, info, acquired_at, principal)"
        " VALUES (%s, %s, %s, %s, 'anonymous')")
EVENT = """
WITH head AS (
    UPDATE tenants SET chain_seq = chain_seq + 1, chain_head = %s WHERE id = 'default'
    RETURNING chain_seq)
INSERT INTO events (tenant_id, seq, kind, state_path, principal, at, lock_uuid, serial,
                    sha256_bytes, detail, hash_bytes)
SELECT 'default', head.chain_seq, %s, %s, 'anonymous', %s, %s, %s, %s, %s, %s FROM head
"""
TOUCH = "UPDATE states SET updated_at = %s WHERE id = %s"
VERSION = """
INSERT INTO state_versions (state_id, number, serial, lineage, sha256, size, payload, codec,
                            base_number, created_at, principal, projected, resource_count)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, 'anonymous', true, 50)
"""
UNLOCK = "DELETE FROM locks WHERE state_id = %s"
LOCK_DETAIL = '{"client":"127.0.0.1","operation":"OperationTypeApply","who":"bench@host"}'


def prepare_database(dsn: str) -> None:
    """Kilolock's schema in the (empty) database."""
    with psycopg.connect(dsn) as connection, connection.cursor() as cursor:
        ensure_schema_blocking(cursor)


async def _event(cursor: Any, kind: str, path: str, lock_id: str, serial: int | None,
                 sha256: str | None, detail: str) -> None:
    digest = hashlib.sha256(f"{path}{lock_id}{kind}".encode())
    await cursor.execute(EVENT, (digest.hexdigest(), kind, path, datetime.now(UTC), lock_id,
                                 serial, None if sha256 is None else bytes.fromhex(sha256),
                                 detail, digest.digest()))


#: Distinct payloads each floor client cycles through (made before the clock runs).
PAYLOADS = 100


async def client(dsn: str, name: str, template: str, ready: asyncio.Queue[None],
                 start: asyncio.Future[float], latencies: list[float]) -> int:
    """One client: its own state, the cycle from C{start} until the deadline
    it fires with; the cycles done."""
    connection = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    first = template.replace("{serial}", "0").encode()
    snapshot = Snapshot(Base(first, hashlib.sha256(first).hexdigest()), 1000, 0)
    async with connection:
        cursor = connection.cursor()
        now = datetime.now(UTC)
        await cursor.execute("INSERT INTO states (tenant_id, path, created_at, updated_at)"
                             " VALUES ('default', %s, %s, %s) RETURNING id", (name, now, now))
        row = await cursor.fetchone()
        assert row is not None
        state_id = row[0]
        full = compress_version(first, None)
        await cursor.execute(VERSION, (state_id, 1, 0, "bench", snapshot.base.sha256,
                                       len(first), full.data, full.codec.value, None, now))
        # The payloads are made before the clock runs: the floor is the
        # database's cost, not the compression's.
        payloads = []
        for serial in range(1, PAYLOADS + 1):
            raw = template.replace("{serial}", str(serial)).encode()
            payloads.append((raw, hashlib.sha256(raw).hexdigest(),
                             compress_version(raw, snapshot)))
        ready.put_nowait(None)
        deadline = await start
        cycles = 0
        number = 1
        while time.monotonic() < deadline:
            raw, sha256, stored = payloads[cycles % PAYLOADS]
            lock_id = str(uuid.uuid4())
            number += 1
            started = time.monotonic()
            for step in range(3):
                async with connection.transaction(), connection.pipeline():
                    at = datetime.now(UTC)
                    if step == 0:
                        await cursor.execute(LOCK, (state_id, lock_id, LOCK_DETAIL.encode(), at))
                        await _event(cursor, "lock_acquire", name, lock_id, None, None,
                                     LOCK_DETAIL)
                    elif step == 1:
                        await cursor.execute(TOUCH, (at, state_id))
                        await cursor.execute(VERSION, (
                            state_id, number, number, "bench", sha256, len(raw),
                            stored.data, stored.codec.value,
                            1 if stored.base_sha256 else None, at))
                        await _event(cursor, "state_write", name, lock_id, number, sha256,
                                     f'{{"client":"127.0.0.1","size":{len(raw)},'
                                     f'"version":{number}}}')
                    else:
                        await cursor.execute(UNLOCK, (state_id,))
                        await _event(cursor, "lock_release", name, lock_id, None, None,
                                     LOCK_DETAIL)
                latencies.append(time.monotonic() - started)
                started = time.monotonic()
            cycles += 1
    return cycles


async def measure(dsn: str, clients: int, seconds: float, template: str, tag: str,
                  latencies: list[float]) -> float:
    """Cycles per second of C{clients} floor clients for C{seconds} (their
    set-up, payloads included, before the clock starts)."""
    ready: asyncio.Queue[None] = asyncio.Queue()
    start: asyncio.Future[float] = asyncio.get_running_loop().create_future()
    tasks = [asyncio.ensure_future(client(dsn, f"floor-{tag}-{index}", template, ready, start,
                                          latencies)) for index in range(clients)]
    for _ in range(clients):
        await ready.get()
    started = time.monotonic()
    start.set_result(started + seconds)
    counts = await asyncio.gather(*tasks)
    return sum(counts) / (time.monotonic() - started)
