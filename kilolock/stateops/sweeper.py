"""The background sweep of abandoned state operations.

An operation's process renews its lease while it runs; when that process
stops, the lease expires and the operation's locks would stay held until
someone looked at it (a GET of it, or the start of another operation:
L{OperationRunner.sweep} runs then too).  L{OperationSweeper} looks every
L{SWEEP_SECONDS} as well, so a Terraform run blocked by the locks of a
stopped process waits at most a lease and a sweep.
"""

from __future__ import annotations

from typing import Any

from twisted.application.service import Service
from twisted.internet.defer import Deferred, ensureDeferred, succeed
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from kilolock.stateops.runner import LEASE_SECONDS, OperationRunner

__all__ = ["SWEEP_SECONDS", "OperationSweeper"]

log = Logger()

#: Seconds between two sweeps (a lease's length).
SWEEP_SECONDS = LEASE_SECONDS


class OperationSweeper(Service):
    """Runs C{runner}'s sweep every C{interval} seconds on C{clock} (an
    C{IReactorTime}); one sweep at a time; a failed sweep (the database
    unreachable) is logged and the next one runs on time."""

    name = "operation-sweeper"

    def __init__(self, runner: OperationRunner, clock: Any,
                 interval: float = SWEEP_SECONDS) -> None:
        self.runner = runner
        self.clock = clock
        self.interval = interval
        self._loop: LoopingCall | None = None
        self._running: Deferred[None] | None = None

    def startService(self) -> None:
        super().startService()
        self._loop = LoopingCall(self._tick)
        self._loop.clock = self.clock
        self._loop.start(self.interval, now=False)

    def stopService(self) -> Deferred[None]:
        """Stop the loop; fires once a sweep in progress has finished."""
        super().stopService()
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        running = self._running
        if running is None:
            return succeed(None)
        finished: Deferred[None] = Deferred()
        running.addBoth(lambda _: finished.callback(None))
        return finished

    def _tick(self) -> None:
        """The loop's call: start a sweep unless one still runs (the loop
        itself never fails, so it never stops)."""
        if self._running is None:
            self.sweep()

    def sweep(self) -> Deferred[None]:
        """One sweep.  @return: a Deferred firing with None when it is
        done; a failure is logged (its kind only), never passed on."""
        self._running = running = ensureDeferred(self.runner.sweep())

        def failed(failure: Any) -> None:
            log.error("sweeping abandoned state operations failed: {kind}",
                      kind=failure.type.__name__ if failure.type else "?")

        def done(result: None) -> None:
            self._running = None

        return running.addErrback(failed).addBoth(done)
