"""Pruning in the background: L{RetentionService}.

Every C{interval} seconds (a L{LoopingCall} on the reactor, or on the
C{task.Clock} a test gives it) one pass walks the states, a page of
L{STATES_PER_PAGE} at a time, and prunes each in its own short transaction
(L{IRetentionStore.prune_state}: at most L{VERSIONS_PER_STATE} versions;
a state being written is skipped until the next pass).  Nothing here
waits on a request, and a request never waits for more than one state's
transaction.  Passes never overlap; a pass that fails is logged and the
next one starts on time.  What each pass did goes to C{/metrics}:
C{kilolock_versions_pruned}, C{kilolock_version_bytes_pruned},
C{kilolock_retention_last_run_timestamp_seconds} and
C{kilolock_retention_last_run_duration_seconds}.

Several processes on one database may each run passes: a state is pruned
by whichever locks its row first.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from attrs import frozen
from twisted.internet.defer import Deferred, ensureDeferred
from twisted.logger import Logger

from kilolock.core.model import StateKey
from kilolock.retention.policy import RetentionPolicy
from kilolock.server.background import PeriodicWork
from kilolock.server.metrics import Metrics
from kilolock.store.interfaces.retention import IRetentionStore

__all__ = ["PassReport", "RetentionService"]

log = Logger()

#: States asked for per page of a pass, and versions pruned per state per
#: transaction (a state with more comes back at the next pass).
STATES_PER_PAGE = 100
VERSIONS_PER_STATE = 500

#: What is logged when a pass fails.
PRUNING_FAILED = "a retention pass failed; the next one starts in {interval} s"


@frozen
class PassReport:
    """What one pass did."""

    states: int = 0
    versions: int = 0
    bytes_freed: int = 0


class RetentionService(PeriodicWork):
    """Prunes every C{interval} seconds by C{policy} (the server's default;
    tenants and states may override it), on C{clock} (an C{IReactorTime})."""

    name = "retention"

    def __init__(self, store: IRetentionStore, policy: RetentionPolicy, clock: Any,
                 interval: float, metrics: Metrics | None = None) -> None:
        super().__init__(clock, interval)
        self.store = store
        self.policy = policy
        self.metrics = metrics

    def run_once(self) -> Deferred[PassReport]:
        return self.run_pass()

    def run_pass(self) -> Deferred[PassReport]:
        """One pass over every state (see the module).

        @return: a Deferred firing with its L{PassReport}; a failure is
            logged (and the report says what was done until then)."""
        started = self.clock.seconds()
        running = self.watch(ensureDeferred(self._pass(started)))

        def done(report: PassReport) -> PassReport:
            if self.metrics is not None:
                self.metrics.retention_last_run.set(self.clock.seconds())
                self.metrics.retention_duration.set(self.clock.seconds() - started)
            if report.versions:
                log.info("retention pruned {versions} versions of {states} states"
                         " ({bytes} stored bytes)", versions=report.versions,
                         states=report.states, bytes=report.bytes_freed)
            return report

        return running.addCallback(done)

    async def _pass(self, started: float) -> PassReport:
        now = datetime.fromtimestamp(started, UTC)
        everywhere = not self.policy.keeps_everything
        after: StateKey | None = None
        states = versions = freed = 0
        try:
            while not self.stopping:
                page = await self.store.retention_candidates(after, STATES_PER_PAGE,
                                                             everywhere)
                for key in page:
                    outcome = await self.store.prune_state(key, self.policy, now,
                                                           VERSIONS_PER_STATE)
                    if outcome.pruned:
                        states += 1
                        versions += len(outcome.pruned)
                        freed += outcome.bytes_freed
                        self._count(len(outcome.pruned), outcome.bytes_freed)
                if len(page) < STATES_PER_PAGE:
                    break
                after = page[-1]
        except Exception:
            log.failure(PRUNING_FAILED, interval=self.interval)
        return PassReport(states, versions, freed)

    def _count(self, versions: int, freed: int) -> None:
        if self.metrics is not None:
            self.metrics.versions_pruned.inc(versions)
            self.metrics.version_bytes_pruned.inc(freed)
