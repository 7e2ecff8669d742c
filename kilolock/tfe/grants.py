"""Upload capabilities ("grants"): the URLs a pending state version's bytes
are PUT to.

go-tfe PUTs the state to the URL the create answer names, without
credentials, so the URL itself is the credential.  A grant is:

  - 256 random bits (URL-safe text), stored only as its SHA-256;
  - bound to one pending version (its id is in the URL too);
  - single use per part (the raw state, the JSON state);
  - valid for L{GRANT_LIFETIME} from its creation;
  - bound to the MD5 announced at creation: other bytes are refused;
  - bound to its creator still holding the lock it held (checked by the
    state store's lock matrix when the bytes are written).

L{check_claim} is the rule a claim must pass, decided here for both stores.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import datetime, timedelta

from kilolock.core.errors import ChecksumMismatch, NotFound
from kilolock.tfe.model import JSON_PART, PENDING, STATE_PART, PendingVersion

#: How long a grant may be used after the version is announced.
GRANT_LIFETIME = timedelta(minutes=10)
#: Pending versions are forgotten this long after their grant expired.
PENDING_RETENTION = timedelta(days=1)

#: What every refused claim answers (unknown id, wrong grant, expired, used):
#: one message, so a caller learns nothing about which.
NO_SUCH_UPLOAD = "no such upload (the URL is unknown, used or expired)"


def new_grant() -> str:
    """A fresh capability: 256 random bits, URL-safe."""
    return secrets.token_urlsafe(32)


def grant_hash(grant: str) -> str:
    """The SHA-256 (hex) of a capability: what the stores keep."""
    return hashlib.sha256(grant.encode("utf-8", "replace")).hexdigest()


def check_claim(pending: PendingVersion | None, presented_hash: str, part: str,
                body_md5: str | None, now: datetime) -> None:
    """May bytes PUT with a grant whose SHA-256 is C{presented_hash} be
    taken as C{part} of C{pending} at C{now}?  Returns when they may.

    @param body_md5: the MD5 (hex) of the body (the raw state part only).
    @raise NotFound: no such pending version, another grant, expired, or
        the part already received (one answer for all).
    @raise ChecksumMismatch: the raw state's MD5 is not the announced one
        (nothing is taken: the grant stays usable).
    """
    if pending is None or not hmac.compare_digest(pending.grant_hash, presented_hash):
        raise NotFound(NO_SUCH_UPLOAD)
    if now >= pending.expires_at:
        raise NotFound(NO_SUCH_UPLOAD)
    if part == STATE_PART:
        if pending.status != PENDING:
            raise NotFound(NO_SUCH_UPLOAD)
        if body_md5 != pending.md5:
            raise ChecksumMismatch("the uploaded state's MD5 is not the one announced when"
                                   " the state version was created; nothing was stored")
    elif part == JSON_PART:
        if pending.json_received:
            raise NotFound(NO_SUCH_UPLOAD)
    else:
        raise NotFound(NO_SUCH_UPLOAD)
