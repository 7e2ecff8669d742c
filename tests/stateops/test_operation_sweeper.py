"""The background sweep of abandoned state operations, on task.Clock: an
operation whose process stopped renewing its lease is failed and its locks
released by the next sweep, without anyone looking at it; a failed sweep
is logged and the next one runs on time."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from twisted.internet.task import Clock
from twisted.logger import globalLogPublisher

from kilolock.core.model import StateKey
from kilolock.stateops.model import FAILED, RUNNING, OperationRecord, Owner
from kilolock.stateops.runner import LEASE_SECONDS, OperationRunner, operation_lock
from kilolock.stateops.sweeper import SWEEP_SECONDS, OperationSweeper
from tests.support.native_support import PRINCIPALS, NativeSite, fired
from tests.support.stub_client import lock_body


def abandoned(site: NativeSite, operation_id: str = "op_dead") -> str:
    """A running operation of another process holding the lock of mono,
    its lease running out LEASE_SECONDS from now; @return: its lock ID."""
    ann = PRINCIPALS["ann"]
    now = site.clock()
    info = operation_lock(operation_id, "rm", ann, now)
    assert fired(site.store.acquire_lock(StateKey("acme", "mono"), info, ann)) is True
    fired(site.store.create_operation(OperationRecord(
        id=operation_id, owner=Owner.of(ann), kind="rm", request="{}", status=RUNNING,
        created_at=now, updated_at=now, runner="another-process",
        lease_expires_at=now + timedelta(seconds=LEASE_SECONDS), locks=(("mono", info.id),))))
    return info.id


def status(site: NativeSite, operation_id: str = "op_dead") -> str:
    record = fired(site.store.find_operation(Owner.of(PRINCIPALS["ann"]), operation_id))
    assert record is not None
    return str(record.status)


def test_a_sweep_fails_an_abandoned_operation_and_frees_its_locks() -> None:
    """Before its lease ends a sweep leaves it running; the first sweep after
    fails it as abandoned and Terraform can lock the state again."""
    site, reactor = NativeSite(), Clock()
    abandoned(site)
    sweeper = OperationSweeper(site.runner, reactor)
    sweeper.startService()
    site.clock.advance(LEASE_SECONDS - 1)
    reactor.advance(SWEEP_SECONDS)
    assert status(site) == RUNNING
    assert site.lock("mono", lock_body("terraform")).status == 423
    site.clock.advance(1)
    reactor.advance(SWEEP_SECONDS)
    assert status(site) == FAILED
    assert site.lock("mono", lock_body("terraform")).status == 200
    fired(sweeper.stopService())
    assert not reactor.getDelayedCalls()


class FailingOnce(OperationRunner):
    """A runner whose first sweep fails as an unreachable database would."""

    failures = 1

    async def sweep(self) -> None:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("database unreachable")
        await super().sweep()


def test_a_failed_sweep_is_logged_and_the_next_one_runs() -> None:
    """A failed sweep is logged by its kind, the loop keeps going, and the
    next sweep does the work."""
    site, reactor = NativeSite(runner=FailingOnce), Clock()
    abandoned(site)
    site.clock.advance(LEASE_SECONDS)
    logged: list[dict[str, Any]] = []
    globalLogPublisher.addObserver(logged.append)
    try:
        sweeper = OperationSweeper(site.runner, reactor)
        sweeper.startService()
        reactor.advance(SWEEP_SECONDS)
    finally:
        globalLogPublisher.removeObserver(logged.append)
    assert [event["kind"] for event in logged if "sweeping" in event.get("log_format", "")] == [
        "ConnectionError"]
    assert status(site) == RUNNING
    reactor.advance(SWEEP_SECONDS)
    assert status(site) == FAILED
    fired(sweeper.stopService())


def test_the_server_sweeps_in_the_background() -> None:
    """`twistd kilolock` runs the sweeper beside the store: it is among the
    store service's background services."""
    from kilolock.server.tap import Settings, make_service_from_settings

    service = make_service_from_settings(Settings(store="memory"), Clock())
    background = service.store_service.background
    assert background is not None
    assert isinstance(background.getServiceNamed("operation-sweeper"), OperationSweeper)
