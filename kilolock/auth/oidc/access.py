"""What a CI job's OIDC token may do, decided on state paths: the bridge
between the verification core (L{kilolock.auth.oidc}) and the lanes.

A principal that logged in with an OIDC token carries an L{OidcAccess}: the
accepted decision (its grants, its audit detail), the token's digest (which
a lock it takes records) and how its tenant addresses states.  The scope
rule (L{kilolock.rules.scope}) asks it about every state a request names; a
refusal becomes a L{Denied} error that carries the refusal's reason code
and log fields (the access log and the server log say why; the token never
appears anywhere).

How a path is read:

  - static mode: the grant's C{states} patterns match the whole path
    (C{prod-network}, or C{env/prod/network} for three segments);
  - hosted mode: a state is C{{workspace_id}/{env_public_id}/{state_name}};
    the patterns match the state's name and the grant's workspace and
    environment (ids, see L{kilolock.auth.oidc.places}) must be the path's.
"""

from __future__ import annotations

from attrs import field, frozen

from kilolock.auth.oidc import grace
from kilolock.auth.oidc.decision import Accepted, Refusal
from kilolock.auth.oidc.refusal import Reason
from kilolock.core.errors import Denied, Forbidden, Unauthorized
from kilolock.core.model import Access, HeldLock

#: The reason codes the access log gives OIDC refusals start with this.
REASON_PREFIX = "oidc_"

_MESSAGES = {
    Reason.NO_RULE_MATCHED: "no rule of this tenant matches the token's claims",
    Reason.STATE_NOT_GRANTED: "the token's rules do not grant this state",
    Reason.READ_ONLY: "the token's rules grant only reading this state",
    Reason.LOCK_GRACE_DENIED: "the token has expired; it may only finish the work it locked",
}


def denial(refusal: Refusal) -> Denied:
    """The error a refusal answers: 401 when the token is not good, 403 when
    its rules do not allow the request.  The message names the reason (and
    the short detail of a token that did not verify); the rules evaluated
    only go to the server log (L{Refusal.log_fields})."""
    reason = refusal.reason
    message = f"OIDC token refused ({reason.value}): " + _MESSAGES.get(
        reason, refusal.detail or reason.value)
    error = Unauthorized if refusal.status == 401 else Forbidden
    return error(message, reason=REASON_PREFIX + reason.value,
                 log_fields=refusal.log_fields())


@frozen
class OidcAccess:
    """An accepted OIDC token as the lanes use it.

    @ivar accepted: the decision (grants, audit detail, expiry).
    @ivar token_digest: L{grace.token_digest} of the token.
    @ivar hosted: the tenant's states are C{workspace/environment/name}.
    """

    accepted: Accepted
    token_digest: str = field(repr=False)
    hosted: bool = False

    @property
    def expired(self) -> bool:
        """Past C{exp}, within the lock grace: it may only finish locked work."""
        return self.accepted.expired

    def _place(self, path: str) -> tuple[str, str | None, str | None] | Refusal:
        """(state, workspace, environment) as grants name them, or the
        refusal of a path that is no hosted address."""
        if not self.hosted:
            return path, None, None
        segments = path.split("/")
        if len(segments) != 3:
            return self.accepted.refusal(
                Reason.STATE_NOT_GRANTED, "a hosted state is addressed as"
                " {workspace_id}/{env_public_id}/{state_name}")
        workspace, environment, state = segments
        return state, workspace, environment

    def _check(self, path: str, need: Access) -> Refusal | None:
        place = self._place(path)
        if isinstance(place, Refusal):
            return place
        state, workspace, environment = place
        return self.accepted.check(state, need, workspace=workspace, environment=environment)

    def allows(self, path: str, need: Access) -> bool:
        """Whether the token's grants allow C{need} on the state at C{path}."""
        return self._check(path, need) is None

    def require(self, path: str, need: Access) -> None:
        """@raise Denied: unless the token's grants allow C{need} on C{path}."""
        refusal = self._check(path, need)
        if refusal is not None:
            raise denial(refusal)

    def require_fresh(self) -> None:
        """@raise Denied: (401) when the token has expired (within the
        grace, it may only finish locked work: never list or search)."""
        if self.expired:
            raise denial(self.accepted.refusal(
                Reason.LOCK_GRACE_DENIED, "an expired token may only finish the work it locked"))

    def require_finishing(self, path: str, held: HeldLock | None,
                          lock_id: str | None, need: Access = Access.WRITE) -> None:
        """A write fenced by lock C{lock_id} or an unlock of it (C{need}
        write), or the read-back of a locked state (C{need} read): a token
        within its validity needs a grant of C{need}; an expired one (within
        the grace) also needs the state's lock C{held} to have been taken by
        this very token and, to write or unlock, to be the one the request
        names (see L{kilolock.auth.oidc.grace}).

        @raise Denied: unless allowed."""
        if not self.expired:
            self.require(path, need)
            return
        place = self._place(path)
        if isinstance(place, Refusal):
            raise denial(place)
        state, workspace, environment = place
        holder = None if held is None else grace.HeldLock(held.info.id, held.token_digest)
        refusal = grace.finishing_refusal(self.accepted, self.token_digest, holder, lock_id,
                                          state, need=need, workspace=workspace,
                                          environment=environment)
        if refusal is not None:
            raise denial(refusal)

    def audit_detail(self) -> dict[str, str]:
        """What the audit trail records of the token (issuer, sub, repository,
        ref, run, sha, ...)."""
        return dict(self.accepted.audit)
