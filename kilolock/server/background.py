"""Work a Kilolock process does on its own, every so often: the shape
shared by pruning (L{kilolock.retention.service}) and the sweep of
abandoned operations (L{kilolock.stateops.sweeper})."""

from __future__ import annotations

from typing import Any, TypeVar

from twisted.application.service import Service
from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import LoopingCall

__all__ = ["PeriodicWork"]

T = TypeVar("T")


class PeriodicWork(Service):
    """Calls L{run_once} every C{interval} seconds on C{clock} (an
    C{IReactorTime}), never two runs at once; L{stopService} stops the loop
    and fires once a run in progress has finished.  L{stopping} tells a
    long run to end early.  The loop never fails (a run's failure is the
    run's to log), so it never stops on its own."""

    def __init__(self, clock: Any, interval: float) -> None:
        self.clock = clock
        self.interval = interval
        #: True from L{stopService} on.
        self.stopping = False
        self._loop: LoopingCall | None = None
        self._running: Deferred[Any] | None = None

    def run_once(self) -> Deferred[Any]:
        """One run; subclasses say what it does (and pass it to L{watch})."""
        raise NotImplementedError

    def watch(self, run: Deferred[T]) -> Deferred[T]:
        """Note C{run} as the run in progress until it fires.

        @return: C{run}."""
        self._running = run

        def finished(result: T) -> T:
            self._running = None
            return result

        return run.addBoth(finished)

    def startService(self) -> None:
        super().startService()
        self.stopping = False
        self._loop = LoopingCall(self._tick)
        self._loop.clock = self.clock
        self._loop.start(self.interval, now=False)

    def stopService(self) -> Deferred[None]:
        super().stopService()
        self.stopping = True
        if self._loop is not None and self._loop.running:
            self._loop.stop()
        running = self._running
        if running is None:
            return succeed(None)
        finished: Deferred[None] = Deferred()
        running.addBoth(lambda _: finished.callback(None))
        return finished

    def _tick(self) -> None:
        if self._running is None:
            self.run_once()
