"""Long applies finish: an expired CI token may end the locked work it began.

CI tokens live minutes (GitHub's five, GitLab's the job's timeout), while
Terraform sends the same password from the lock to the final write and the
unlock.  When an OIDC principal takes a lock, the store records the SHA-256
of the token with it (L{token_digest}).  Afterwards a token that is past its
C{exp} by at most the grace (L{DEFAULT_GRACE}, never more than L{MAX_GRACE})
is still verified (signature, issuer, audience: everything but the expiry)
and may do exactly three things, and only while its lock is held:

- write the locked state with the lock's id (C{POST ...?ID=<lock id>});
- unlock that lock;
- read back the locked state (C{GET} of it).  Terraform reads a state it is
  about to create just before its first write (to find one that appeared
  meanwhile), with the same password and without naming the lock: without
  this read the first apply of a new state that outlived its token could
  not save it.

It may not take a lock, read any other state, read after its lock is gone,
or touch any other state; its rules must still grant what the request does
(write, or read for the read-back: a rule removed meanwhile stops it too).
Anything else is refused with C{lock_grace_denied}.
"""

from __future__ import annotations

import hashlib
import hmac

from attrs import evolve, frozen

from kilolock.auth.oidc.decision import Accepted, Refusal
from kilolock.auth.oidc.refusal import Reason
from kilolock.core.model import Access

#: The grace after C{exp}, by default and at most, in seconds.
DEFAULT_GRACE = 3600.0
MAX_GRACE = 6 * 3600.0


def checked_grace(seconds: float) -> float:
    """C{seconds} if it is a valid grace.

    @raise ValueError: negative or over L{MAX_GRACE}."""
    if not 0 <= seconds <= MAX_GRACE:
        raise ValueError(f"the OIDC lock grace must be 0 to {MAX_GRACE:.0f} seconds")
    return seconds


def token_digest(token: bytes) -> str:
    """What the lock records of the token that took it."""
    return hashlib.sha256(token).hexdigest()


@frozen
class HeldLock:
    """The current lock of the state, as far as the grace needs it."""

    lock_id: str
    #: L{token_digest} of the OIDC token that took it (None for any other principal).
    token_digest: str | None


def finishing_refusal(accepted: Accepted, presented_digest: str, held: HeldLock | None,
                      request_lock_id: str | None, state: str, *,
                      need: Access = Access.WRITE, workspace: str | None = None,
                      environment: str | None = None) -> Refusal | None:
    """Whether C{accepted} may finish its locked work on C{state}: write it
    or unlock it with this lock id (C{need} write), or read it back (C{need}
    read: the request names no lock, as Terraform's GET does not).

    A token within its validity only needs a grant of C{need}.  An expired
    one (within the grace) also needs the state's lock to be held by this
    very token and, to write or unlock, under the id the request gives.

    @return: None when allowed, else the refusal."""
    if not accepted.expired:
        return accepted.check(state, need, workspace=workspace, environment=environment)

    def denied(why: str) -> Refusal:
        return accepted.refusal(Reason.LOCK_GRACE_DENIED, f"expired token: {why}")

    if held is None:
        return denied("the state is not locked")
    if held.token_digest is None or not hmac.compare_digest(held.token_digest,
                                                            presented_digest):
        return denied("the lock was taken by another credential")
    if need is not Access.READ and (
            request_lock_id is None
            or not hmac.compare_digest(held.lock_id.encode(), request_lock_id.encode())):
        return denied("the request does not name the held lock")
    return evolve(accepted, expired=False).check(state, need, workspace=workspace,
                                                 environment=environment)
