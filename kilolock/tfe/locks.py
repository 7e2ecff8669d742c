"""The lock a TFE-lane client takes: one lock per state across both lanes.

The TFE API's lock names no lock ID (the holder is the authenticated
principal), so Kilolock takes an ordinary state lock with a LockInfo it
makes itself: a fresh ID, C{Who} the principal, C{Operation}
L{TFE_OPERATION}.  The HTTP lane then answers a LOCK with that LockInfo
(423), which Terraform prints; C{kl lock status} shows it like any other.

The rules of the TFE lane, on top of the state lane's lock matrix:
  - C{actions/lock} answers 409 whenever the state is locked, by anyone
    (the same principal included: a fresh ID never replays);
  - C{actions/unlock} releases only a lock taken through this lane by the
    same principal (L{owns});
  - writes need a lock of this lane held by the writer (L{owns}).
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime

import kilolock
from kilolock.core.model import HeldLock, LockInfo, Principal, rfc3339
from kilolock.core.text import clean_text
from kilolock.stateops.model import OPERATION_LOCK

#: The C{Operation} of every TFE-lane lock: how the lane recognises its locks.
TFE_OPERATION = "locked through the TFE lane"
#: The lanes C{kl lock status} tells apart.
TFE_LANE = "tfe"
HTTP_LANE = "http"
OPERATION_LANE = "operation"
#: The longest lock reason kept in the LockInfo.
MAX_REASON = 200


def who(principal: Principal) -> str:
    """The C{Who} of a lock: the principal, and its address when known
    (a forwarded address is the proxy's text: what a database cannot hold
    in it is U+FFFD)."""
    return clean_text(principal.name + (f"@{principal.address}" if principal.address else ""))


def tfe_lock_info(principal: Principal, path: str, reason: str, now: datetime) -> LockInfo:
    """A fresh LockInfo for a TFE-lane lock on the state at C{path}."""
    body = json.dumps({
        "ID": str(uuid.uuid4()),
        "Path": path,
        "Operation": TFE_OPERATION,
        "Who": who(principal),
        "Version": f"kilolock {kilolock.__version__}",
        "Created": rfc3339(now),
        "Info": "".join(char for char in reason[:MAX_REASON] if char.isprintable()),
    }, separators=(",", ":")).encode()
    return LockInfo.from_bytes(body)


def lane_of(info: LockInfo) -> str:
    """Which lane took a lock: L{TFE_LANE}, L{OPERATION_LANE} (a state
    operation of the native lane) or L{HTTP_LANE}."""
    if info.operation == TFE_OPERATION:
        return TFE_LANE
    if info.operation is not None and OPERATION_LOCK.fullmatch(info.operation):
        return OPERATION_LANE
    return HTTP_LANE


def owns(held: HeldLock | None, principal: Principal) -> bool:
    """Whether C{held} is a TFE-lane lock of C{principal}."""
    return (held is not None and lane_of(held.info) == TFE_LANE
            and held.principal == principal.name)
