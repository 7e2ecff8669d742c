"""Which secrets go to the OIDC verifier, and how a long apply finishes
after its CI token expired (the lock grace), on a task.Clock."""

from __future__ import annotations

import pytest

from kilolock.auth.oidc.credential import OidcCredential, looks_like_jwt, oidc_credential
from kilolock.auth.oidc.decision import Accepted, Refusal
from kilolock.auth.oidc.grace import (
    DEFAULT_GRACE,
    MAX_GRACE,
    HeldLock,
    checked_grace,
    finishing_refusal,
    token_digest,
)
from kilolock.auth.oidc.refusal import Reason
from kilolock.core.model import Access
from tests.support.oidc_issuer import (
    Harness,
    github_claims,
    github_pull_request_claims,
    unsigned_token,
)

# -- routing credentials --------------------------------------------------------


def test_jwt_shaped_secrets_are_routed_to_the_verifier() -> None:
    """A JWT as a Bearer token or a Basic password (any username) goes to
    OIDC; so does anything with the Basic username oidc; Kilolock tokens
    and other secrets do not."""
    token = Harness().issuer.github().encode()
    assert looks_like_jwt(token)
    assert oidc_credential(None, token) == OidcCredential(token, None)
    assert oidc_credential(b"terraform", token) == OidcCredential(token, b"terraform")
    assert oidc_credential(b"oidc", b"garbage") == OidcCredential(b"garbage", b"oidc")
    unsigned = unsigned_token({"alg": "none"}, {"sub": "x"}).encode()
    assert oidc_credential(None, unsigned) is not None
    for secret in (b"kl_" + b"A" * 43, b"static-token", b"a.b.c", b"eyJ.", b"eyJa.b.c.d",
                   b"eyJ" + b"a" * 20000 + b".b.c"):
        assert oidc_credential(None, secret) is None
        assert oidc_credential(b"ws_1234", secret) is None


def test_the_credential_repr_hides_the_token() -> None:
    assert "secret" not in repr(OidcCredential(b"eyJsecret.x.y", b"oidc"))


# -- the lock grace -------------------------------------------------------------


@pytest.fixture
def harness() -> Harness:
    return Harness()


def test_a_token_expiring_mid_apply_may_write_and_unlock_its_lock(harness: Harness) -> None:
    """The apply's story: the token takes the lock while valid; 20 minutes
    later (it expired after 5) the same token writes with the lock id and
    unlocks; it may not read, take a new lock, or write elsewhere."""
    token = harness.issuer.github()
    locking = harness.decide(token, grace=DEFAULT_GRACE)
    assert isinstance(locking, Accepted) and not locking.expired
    assert locking.check("prod/network", Access.WRITE) is None  # LOCK allowed
    held = HeldLock(lock_id="8f3c-lock", token_digest=token_digest(token.encode()))

    harness.clock.advance(20 * 60)
    late = harness.decide(token, grace=DEFAULT_GRACE)
    assert isinstance(late, Accepted) and late.expired
    digest = token_digest(token.encode())
    assert finishing_refusal(late, digest, held, "8f3c-lock", "prod/network") is None
    for refusal in (late.check("prod/network", Access.READ),
                    late.check("prod/network", Access.WRITE)):
        assert refusal is not None and refusal.reason is Reason.LOCK_GRACE_DENIED
        assert refusal.status == 401
    elsewhere = finishing_refusal(late, digest, held, "8f3c-lock", "staging/network")
    assert elsewhere is not None and elsewhere.reason is Reason.STATE_NOT_GRANTED
    without_grace = harness.decide(token)
    assert isinstance(without_grace, Refusal) and without_grace.reason is Reason.EXPIRED


def test_an_expired_token_reads_back_only_the_state_its_lock_holds(harness: Harness) -> None:
    """Terraform reads back a new state before its first write, naming no
    lock: an expired token may read exactly the state its own lock holds,
    while held; no lock, another credential's lock, or a state its rules do
    not name: refused."""
    token = harness.issuer.github()
    digest = token_digest(token.encode())
    mine = HeldLock(lock_id="8f3c-lock", token_digest=digest)
    harness.clock.advance(20 * 60)
    late = harness.decide(token, grace=DEFAULT_GRACE)
    assert isinstance(late, Accepted) and late.expired
    assert finishing_refusal(late, digest, mine, None, "prod/network", need=Access.READ) is None
    for held, why in ((None, "the state is not locked"),
                      (HeldLock("8f3c-lock", None), "taken by another credential"),
                      (HeldLock("8f3c-lock", "0" * 64), "taken by another credential")):
        refusal = finishing_refusal(late, digest, held, None, "prod/network", need=Access.READ)
        assert refusal is not None and refusal.reason is Reason.LOCK_GRACE_DENIED
        assert why in refusal.detail
    elsewhere = finishing_refusal(late, digest, mine, None, "staging/network", need=Access.READ)
    assert elsewhere is not None and elsewhere.reason is Reason.STATE_NOT_GRANTED


@pytest.mark.parametrize(("held", "lock_id", "why"), [
    (None, "8f3c-lock", "the state is not locked"),
    (HeldLock("8f3c-lock", None), "8f3c-lock", "taken by another credential"),
    (HeldLock("8f3c-lock", "0" * 64), "8f3c-lock", "taken by another credential"),
    ("mine", "other-lock", "does not name the held lock"),
    ("mine", None, "does not name the held lock"),
])
def test_an_expired_token_finishes_only_its_own_lock(
        harness: Harness, held: HeldLock | str | None, lock_id: str | None, why: str) -> None:
    """After expiry: no lock, a lock of another credential (or of another
    token), or another lock id: refused with lock_grace_denied."""
    token = harness.issuer.github()
    digest = token_digest(token.encode())
    if held == "mine":
        held = HeldLock("8f3c-lock", digest)
    assert not isinstance(held, str)
    harness.clock.advance(20 * 60)
    late = harness.decide(token, grace=DEFAULT_GRACE)
    assert isinstance(late, Accepted)
    refusal = finishing_refusal(late, digest, held, lock_id, "prod/network")
    assert refusal is not None and refusal.reason is Reason.LOCK_GRACE_DENIED
    assert why in refusal.detail


def test_the_grace_has_a_hard_end(harness: Harness) -> None:
    """Past exp + leeway + grace the token is simply expired."""
    token = harness.issuer.github()
    harness.clock.advance(300 - 10 + 30 + DEFAULT_GRACE - 1)
    late = harness.decide(token, grace=DEFAULT_GRACE)
    assert isinstance(late, Accepted) and late.expired
    harness.clock.advance(2)
    gone = harness.decide(token, grace=DEFAULT_GRACE)
    assert isinstance(gone, Refusal) and gone.reason is Reason.EXPIRED
    assert checked_grace(MAX_GRACE) == MAX_GRACE
    for wrong in (-1, MAX_GRACE + 1):
        with pytest.raises(ValueError, match="0 to 21600 seconds"):
            checked_grace(wrong)


def test_a_read_only_token_cannot_finish_by_grace(harness: Harness) -> None:
    """The grace never widens a grant: an expired pull-request token still
    only reads, so it cannot write even under its (impossible) lock."""
    token = harness.issuer.mint(github_pull_request_claims(harness.issuer.url))
    digest = token_digest(token.encode())
    harness.clock.advance(20 * 60)
    late = harness.decide(token, grace=DEFAULT_GRACE)
    assert isinstance(late, Accepted)
    refusal = finishing_refusal(late, digest, HeldLock("l", digest), "l", "prod/network")
    assert refusal is not None and refusal.reason is Reason.READ_ONLY


def test_a_valid_token_finishes_with_its_grant_alone(harness: Harness) -> None:
    """Before expiry, finishing needs only the grant: write to write, read
    to read (a pull request's token reads any state its rule names, locked
    or not, and writes none)."""
    late = harness.decide(harness.issuer.mint(github_claims(harness.issuer.url)))
    assert isinstance(late, Accepted)
    assert finishing_refusal(late, "x", None, None, "prod/network") is None
    reader = harness.decide(harness.issuer.mint(github_pull_request_claims(harness.issuer.url)))
    assert isinstance(reader, Accepted)
    assert finishing_refusal(reader, "x", None, None, "prod/network", need=Access.READ) is None
    refusal = finishing_refusal(reader, "x", None, None, "prod/network")
    assert refusal is not None and refusal.reason is Reason.READ_ONLY
