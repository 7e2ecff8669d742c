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

from twisted.internet.defer import Deferred, ensureDeferred
from twisted.logger import Logger

from kilolock.server.background import PeriodicWork
from kilolock.stateops.runner import LEASE_SECONDS, OperationRunner

__all__ = ["SWEEP_SECONDS", "OperationSweeper"]

log = Logger()

#: Seconds between two sweeps (a lease's length).
SWEEP_SECONDS = LEASE_SECONDS


class OperationSweeper(PeriodicWork):
    """Runs C{runner}'s sweep every C{interval} seconds on C{clock} (an
    C{IReactorTime}); one sweep at a time; a failed sweep (the database
    unreachable) is logged and the next one runs on time."""

    name = "operation-sweeper"

    def __init__(self, runner: OperationRunner, clock: Any,
                 interval: float = SWEEP_SECONDS) -> None:
        super().__init__(clock, interval)
        self.runner = runner

    def run_once(self) -> Deferred[None]:
        return self.sweep()

    def sweep(self) -> Deferred[None]:
        """One sweep.  @return: a Deferred firing with None when it is
        done; a failure is logged (its kind only), never passed on."""

        def failed(failure: Any) -> None:
            log.error("sweeping abandoned state operations failed: {kind}",
                      kind=failure.type.__name__ if failure.type else "?")

        return self.watch(ensureDeferred(self.runner.sweep())).addErrback(failed)
