"""The dashboard's sign-in throttle: failed sign-ins counted per client
address over a sliding window.

The rule: once an address has C{limit} failed sign-ins (a token that was
not accepted) within the last C{window} seconds, every sign-in from it is
refused, a good token included, until the oldest of those failures is
C{window} seconds old.  A success does not clear the count: an attacker
holding one valid token must not be able to reset it between guesses.

The address is the one L{kilolock.web.request.client_address} resolves
(behind a trusted proxy, the client's own from C{X-Forwarded-For}; else
the connection's peer).  Time comes from C{clock} (the reactor, or a
L{twisted.internet.task.Clock} in tests).  At most C{max_addresses}
addresses are remembered; beyond that the address that failed longest ago
is forgotten first, so spraying from many addresses costs bounded memory.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque

from attrs import define, field
from prometheus_client import Counter
from twisted.internet.interfaces import IReactorTime

#: Failed sign-ins one address may make per window (KL_UI_SIGN_IN_FAILURES).
DEFAULT_SIGN_IN_FAILURES = 10
#: The window, in seconds.
SIGN_IN_WINDOW = 300.0
#: Addresses remembered at most.
MAX_ADDRESSES = 10_000


@define
class SignInThrottle:
    """Failed sign-ins per address; L{retry_after} says when one may try again."""

    clock: IReactorTime
    limit: int = DEFAULT_SIGN_IN_FAILURES
    window: float = SIGN_IN_WINDOW
    max_addresses: int = MAX_ADDRESSES
    #: Counts refusals by reason: C{throttled}, and C{bad_token} (a failure).
    counter: Counter | None = None
    _failures: OrderedDict[str, deque[float]] = field(factory=OrderedDict, init=False)

    def _recent(self, address: str) -> deque[float]:
        """The address's failures within the window (older ones dropped)."""
        times = self._failures.get(address)
        if times is None:
            return deque()
        horizon = self.clock.seconds() - self.window
        while times and times[0] <= horizon:
            times.popleft()
        if not times:
            del self._failures[address]
        return times

    def retry_after(self, address: str) -> int | None:
        """Whole seconds until C{address} may sign in again (at least 1), or
        None when it may now.  A refusal is counted."""
        times = self._recent(address)
        if len(times) < self.limit:
            return None
        if self.counter is not None:
            self.counter.labels("throttled").inc()
        wait = times[-self.limit] + self.window - self.clock.seconds()
        return max(1, math.ceil(wait))

    def failed(self, address: str) -> None:
        """Record a failed sign-in from C{address}."""
        times = self._recent(address)
        times.append(self.clock.seconds())
        self._failures[address] = times
        self._failures.move_to_end(address)
        while len(self._failures) > self.max_addresses:
            self._failures.popitem(last=False)
        if self.counter is not None:
            self.counter.labels("bad_token").inc()

    def addresses(self) -> int:
        """How many addresses are remembered."""
        return len(self._failures)
