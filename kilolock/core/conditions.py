"""Conditions as visible state: what a client may rely on about a state or
the server is a list of conditions, each with a status and a reason.

A condition list is the only stored truth; C{ready} is always derived from
it.  L{ConditionTracker} keeps each condition's C{lastTransitionTime}: it
moves only when the status changes, not on every probe.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime

from attrs import define, evolve, field

from kilolock.core.model import Condition, StateSummary, utcnow

TRUE = "True"
FALSE = "False"
UNKNOWN = "Unknown"


def is_ready(conditions: Iterable[Condition]) -> bool:
    """Ready when every condition is C{True}."""
    return all(condition.status == TRUE for condition in conditions)


@define
class ConditionTracker:
    """Remembers the last status of each condition type to keep transition times."""

    clock: Callable[[], datetime] = utcnow
    _last: dict[str, Condition] = field(factory=dict, init=False)

    def observe(self, type: str, status: str, reason: str, message: str,
                observed_generation: int) -> Condition:
        """Record a probe result; return the condition with its transition time."""
        previous = self._last.get(type)
        if previous is not None and previous.status == status:
            condition = evolve(previous, reason=reason, message=message,
                               observed_generation=observed_generation)
        else:
            condition = Condition(type=type, status=status, reason=reason, message=message,
                                  observed_generation=observed_generation,
                                  last_transition_time=self.clock())
        self._last[type] = condition
        return condition


# -- the conditions of one state (the KL-native lane) ---------------------------

#: The condition types of a state, and the status each must have for the
#: state to be ready (a Terraform run can start now).  C{Projected} informs
#: and never blocks: an encrypted state is still usable by OpenTofu.
STATE_READY_WHEN = {"Locked": FALSE}


def state_conditions(summary: StateSummary, now: datetime,
                     unlocked_since: datetime | None = None) -> list[Condition]:
    """C{Locked} and C{Projected} of a state.

    C{observedGeneration} is the state's version count.  C{Locked}'s
    C{lastTransitionTime} is when the lock was taken, or C{unlocked_since}
    (the last release) when free, else the last write; C{Projected}'s is when
    the current version was written (each write re-establishes it).
    """
    generation = summary.version_count
    lock = summary.lock
    if lock is not None:
        age = max(0, int((now - lock.acquired_at).total_seconds()))
        operation = lock.info.operation or "an operation"
        who = lock.info.who or lock.principal
        locked = Condition("Locked", TRUE, "LockHeld",
                           f"held by {who} for {operation} since"
                           f" {lock.acquired_at:%Y-%m-%d %H:%M:%S}Z ({age} s); ID {lock.info.id}",
                           generation, lock.acquired_at)
    else:
        locked = Condition("Locked", FALSE, "Unlocked", "no lock is held", generation,
                           unlocked_since or summary.updated_at)
    current = summary.current
    if current is None:
        projected = Condition("Projected", UNKNOWN, "NoVersion",
                              "no version has been written yet", generation,
                              summary.updated_at)
    elif current.projected:
        projected = Condition("Projected", TRUE, "Projected",
                              f"{summary.resource_count} resource instances of version"
                              f" {current.number} are queryable", generation,
                              current.created_at)
    else:
        projected = Condition("Projected", FALSE, "EncryptedState",
                              f"version {current.number} is an OpenTofu encrypted state:"
                              " stored byte-for-byte, not projected", generation,
                              current.created_at)
    return [locked, projected]


def state_ready(conditions: Iterable[Condition]) -> bool:
    """Ready when every condition listed in L{STATE_READY_WHEN} has its ready
    status (derived from the list, never stored)."""
    return all(condition.status == STATE_READY_WHEN[condition.type]
               for condition in conditions if condition.type in STATE_READY_WHEN)
