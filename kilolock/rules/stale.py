"""When a held lock is stale: the one definition the dashboard (the states
page's badge and filter, a state's lock) and the stores (the listing's
C{lock=stale} filter) use.

A lock is stale when it was taken more than L{STALE_LOCK_AFTER} ago: the
runs that hold locks (a plan, an apply) take minutes, so an hour-old lock is
most likely one a crashed run left behind.  Pure; no I/O.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from kilolock.core.model import HeldLock

#: How long a lock is held before it counts as stale.
STALE_LOCK_AFTER = timedelta(hours=1)


def stale_before(now: datetime) -> datetime:
    """The moment before which a lock taken is stale at C{now}: the
    definition of a stale lock, in one place."""
    return now - STALE_LOCK_AFTER


def is_stale(lock: HeldLock, now: datetime) -> bool:
    """Whether C{lock} is stale at C{now} (L{stale_before})."""
    return lock.acquired_at < stale_before(now)
