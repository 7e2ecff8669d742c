"""Values carried out of tests.contract.test_store_contract."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_twisted

from kilolock.store.memory.store import MemoryStateStore
from tests.support.stores import FakeClock, postgres_store


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=["memory", "postgres"])
def store_backend(request: pytest.FixtureRequest) -> tuple[str, str | None]:
    """Which store to build, and the DSN of a fresh database for postgres."""
    if request.param == "memory":
        return "memory", None
    return "postgres", request.getfixturevalue("postgres_dsn")


@pytest_twisted.async_yield_fixture
async def store(store_backend: tuple[str, str | None], clock: FakeClock) -> AsyncIterator[Any]:
    """A started store of each kind, stopped after the test."""
    kind, dsn = store_backend
    if kind == "memory":
        built: Any = MemoryStateStore(clock=clock)
    else:
        assert dsn is not None
        built = postgres_store(dsn, clock=clock)
    await built.start()
    yield built
    await built.stop()
