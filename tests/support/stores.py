"""Values carried out of tests.contract.test_store_contract."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from kilolock.core.model import DEFAULT_TENANT, LockInfo, Principal, StateKey, StateUpload
from kilolock.tfstate.parse import parse_state
from tests.support.stub_client import lock_body

ALICE = Principal(DEFAULT_TENANT, "alice")


BOB = Principal(DEFAULT_TENANT, "bob")


KEY = StateKey(DEFAULT_TENANT, "prod")


ENVELOPE = json.dumps({
    "serial": 4,
    "lineage": "5a1c7f3e-0000-4000-8000-00000000000e",
    "meta": {"key_provider.pbkdf2.main": "eyJzYWx0IjoiIn0="},
    "encrypted_data": "c2VjcmV0IGJ5dGVz",
    "encryption_version": "v0",
}).encode()


class FakeClock:
    """A clock the test moves; every store call reads it."""

    def __init__(self) -> None:
        self.now = datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def upload(raw: bytes) -> StateUpload:
    return StateUpload(raw=raw, sha256=hashlib.sha256(raw).hexdigest(), parsed=parse_state(raw))


def lock(lock_id: str, who: str = "alice@laptop") -> LockInfo:
    return LockInfo.from_bytes(lock_body(lock_id, who=who))


def postgres_store(dsn: str, **options: Any) -> Any:
    from twisted.internet import reactor

    from kilolock.store.postgres.store import PostgresStateStore

    options.setdefault("pool_size", 4)
    return PostgresStateStore(dsn, reactor, **options)


async def write(store: Any, raw: bytes, key: StateKey = KEY, lock_id: str | None = None,
                principal: Principal = ALICE) -> Any:
    return await store.write_state(key, upload(raw), lock_id, principal)


async def kinds_of_events(store: Any, tenant: str = DEFAULT_TENANT) -> list[str]:
    return [event.kind for event in await store.list_events(tenant)]
