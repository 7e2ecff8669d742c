"""What every resource that reads or changes states works with: the store,
the authentication portal, the reactor and the metrics; and the way a
caller gets in (authentication, then the scope rule of L{kilolock.rules.scope}).

Every tree that addresses states uses it: the Terraform HTTP backend
(L{kilolock.web.http.states}), the native API (L{kilolock.web.native}), the TFE
lane (L{kilolock.web.tfe}) and any other lane.  So a CI job's OIDC token
(L{kilolock.auth.oidc.access}) is decided here for all of them: its tenant (from
the workspace the state's path names, in hosted mode), its grants on the
state (read, write, outputs-only), and the lock grace of an expired token
finishing its own apply (a write fenced by the lock, the unlock, or the
read-back of the state it holds locked: L{Finishing}).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from attrs import evolve, frozen
from twisted.cred.portal import Portal
from twisted.web.server import Request

from kilolock.auth.portal import authenticate
from kilolock.auth.tls import with_client_certificate
from kilolock.core.model import Access, Principal, StateKey, WriteOutcome
from kilolock.retention.policy import KEEP_EVERYTHING, RetentionPolicy
from kilolock.rules.scope import check_caller, state_key
from kilolock.server.metrics import Metrics
from kilolock.store.interfaces.states import IStateStore
from kilolock.web.context import context_of
from kilolock.web.request import client_address


@frozen
class Finishing:
    """A request that may finish locked work: a write fenced by lock
    C{lock_id} (C{POST ...?ID=}) or the release of lock C{lock_id}
    (C{access} write), or a read of the state (C{access} read, no lock id:
    Terraform reads back a state it holds locked before its first write).
    An expired CI token may still make it, within the lock grace, if the
    state's lock was taken by that very token and, to write or release, is
    the one the request names."""

    lock_id: str | None
    access: Access = Access.WRITE


#: A read of a state, which an expired CI token may make while it holds the
#: state's lock.
READ_BACK = Finishing(None, Access.READ)


@frozen
class StateLane:
    """The collaborators of the state resources.  C{reactor} runs the work
    on large bodies in its thread pool (None: inline, for in-memory tests);
    C{metrics} is where lock and write counters go (None: nowhere);
    C{retention} is the server's retention policy."""

    store: IStateStore
    portal: Portal
    reactor: Any
    metrics: Metrics | None = None
    #: The server's retention policy (what a state without an override of
    #: its own or its tenant's keeps).
    retention: RetentionPolicy = KEEP_EVERYTHING

    async def authorize(self, request: Request, write: bool = False,
                        outputs: bool = False) -> Principal:
        """The caller of a request that names no state (C{outputs}: see
        L{kilolock.rules.scope.state_key}).

        @return: (awaited) the principal, with the client's address and
            certificate for the audit trail.
        @raise Unauthorized: (401) missing, unknown or revoked credentials.
        @raise Forbidden: (403) see L{check_caller}.
        """
        principal = await self._login(request)
        check_caller(principal, write, outputs)
        return self._as_seen(request, principal)

    async def authorize_state(self, request: Request, segments: Sequence[str],
                              write: bool = False, *, outputs: bool = False,
                              finishing: Finishing | None = None,
                              ) -> tuple[Principal, StateKey]:
        """The caller of a request on the state at C{segments}, and that state.

        @param outputs: the request reads only the state's outputs (what an
            C{outputs-only} grant of a CI token allows).
        @param finishing: the request writes under a lock, releases one, or
            reads a state its caller may hold locked (see L{Finishing}).
        @return: (awaited) the principal (as L{authorize}) and the state's key.
        @raise Unauthorized: (401) missing, unknown or revoked credentials;
            a CI token that is not good (or has expired).
        @raise Forbidden: (403) see L{state_key}.
        """
        principal = await self._login(request, segments)
        key = state_key(principal, segments, write, outputs=outputs,
                        finishing=finishing is not None)
        context_of(request).key = key
        oidc = principal.oidc
        if finishing is not None and oidc is not None and oidc.expired:
            oidc.require_finishing(key.path, await self.store.get_lock(key), finishing.lock_id,
                                   finishing.access)
        return self._as_seen(request, principal), key

    async def _login(self, request: Request, segments: Sequence[str] = ()) -> Principal:
        # In hosted mode a CI token's tenant owns the workspace the path names.
        workspace = segments[0] if len(segments) == 3 else None
        principal = await authenticate(self.portal, request.getHeader(b"Authorization"),
                                       workspace=workspace)
        # Recorded before the scope rule decides: a refused request is logged
        # with its tenant too.
        context_of(request).principal = principal
        return principal

    def _as_seen(self, request: Request, principal: Principal) -> Principal:
        seen = with_client_certificate(evolve(principal, address=client_address(request)),
                                       request)
        context_of(request).principal = seen
        return seen

    def count_write(self, outcome: WriteOutcome) -> None:
        """Count a stored version (an idempotent replay stores none)."""
        if outcome.created and self.metrics is not None:
            self.metrics.writes.inc()
            self.metrics.bytes_stored.inc(outcome.version.size)
