"""Conditions as visible state (ADR 0018 rule 5).

A condition list is the only stored truth; C{ready} is always derived from
it.  L{ConditionTracker} keeps each condition's C{lastTransitionTime}: it
moves only when the status changes, not on every probe.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime

from attrs import define, evolve, field

from kilolock.model import Condition, utcnow

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
