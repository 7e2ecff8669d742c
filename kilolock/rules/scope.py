"""What a caller may address: the token-scope rule, decided from the
principal and the URL alone, before any storage read.

A principal without a workspace (the open and static auth modes) addresses
its tenant's states by their path as given: one segment or three.  A token
of hosted mode is scoped to one workspace/environment:

  - presented as Basic credentials, the username must be the token's
    workspace id (else 403);
  - a three-segment address must lie in the token's workspace/environment
    (else 403);
  - a one-segment name is a state of the token's workspace/environment:
    C{prod} is C{{workspace_id}/{env_public_id}/prod}.

A read-only token may only read (403 on anything that writes).  An
outputs-only token may only read TFE workspaces and their non-sensitive
outputs: every other request is 403 (a request names what it needs with
C{outputs=True}).  The checks run in that order: the username, the
address, then the scope.

A CI job's OIDC token (L{kilolock.auth.oidc.access}) addresses its tenant's
states as given, and its rules' grants decide, state by state, whether it
may read, write or only read outputs (403 otherwise); an expired one (within
the lock grace) may only finish the work it locked (write, unlock, or read
back the state it holds locked), which the lane checks against the state's
lock (C{finishing}).

Every refusal names its reason (C{wrong_basic_username}, C{wrong_environment},
C{read_only}, C{oidc_...}): the access log says why.

Pure: no Twisted, no I/O.  Both state lanes (L{kilolock.web.http.states} and
L{kilolock.web.native}) call it.
"""

from __future__ import annotations

from collections.abc import Sequence

from kilolock.core.errors import Forbidden
from kilolock.core.model import Access, Principal, StateKey
from kilolock.rules.hosted import OUTPUTS_SCOPE

__all__ = ["check_admin", "check_caller", "in_scope", "scope_prefix", "state_key"]


def _check_username(principal: Principal) -> None:
    if (principal.workspace_id is not None and principal.basic_username is not None
            and principal.basic_username != principal.workspace_id):
        raise Forbidden("the Basic username must be the token's workspace_id",
                        reason="wrong_basic_username")


def _check_scope(principal: Principal, write: bool, outputs: bool) -> None:
    if principal.scope == OUTPUTS_SCOPE and not outputs:
        raise Forbidden("this token may only read TFE workspaces and non-sensitive outputs",
                        reason="outputs_only")
    if write and not principal.can_write:
        raise Forbidden("this token is read-only", reason="read_only")


def state_key(principal: Principal, segments: Sequence[str], write: bool, *,
              outputs: bool = False, access: Access | None = None,
              finishing: bool = False) -> StateKey:
    """The caller's state at the validated path C{segments} (one or three).

    @param outputs: the request reads nothing but the workspace and its
        non-sensitive outputs (an outputs-only token may make it).
    @param access: what an OIDC token's grants must allow (default: write
        for C{write}, else read; C{outputs-only} for a read of outputs).
    @param finishing: the request writes under a lock, releases one, or
        reads a state its caller may hold locked: an expired OIDC token
        passes here, and the caller checks that it holds the lock
        (L{kilolock.auth.oidc.access.OidcAccess.require_finishing}).
    @raise Forbidden: a Basic username that is not the token's workspace, an
        address outside the token's workspace/environment, a write with a
        read-only token, or anything but C{outputs} with an outputs-only one;
        an OIDC token whose grants do not allow C{access} (L{kilolock.core.errors.Denied},
        401 for an expired one).
    """
    _check_username(principal)
    path = "/".join(segments)
    if principal.workspace_id is not None:
        scope = (principal.workspace_id, principal.env_public_id or "")
        if len(segments) == 1:
            path = "/".join((*scope, segments[0]))
        elif tuple(segments[:2]) != scope:
            raise Forbidden("this token does not grant access to that workspace/environment",
                            reason="wrong_environment")
    _check_scope(principal, write, outputs)
    oidc = principal.oidc
    if oidc is not None and not (finishing and oidc.expired):
        oidc.require(path, access or (Access.WRITE if write else
                                      Access.OUTPUTS_ONLY if outputs else Access.READ))
    return StateKey(principal.tenant, path)


def check_caller(principal: Principal, write: bool, outputs: bool = False) -> None:
    """The rules of L{state_key} for a request that names no state (a
    listing, a search): the Basic username, then the scope.

    @raise Forbidden: when either rule refuses; an expired OIDC token is
        refused too (it may only finish locked work).
    """
    _check_username(principal)
    _check_scope(principal, write, outputs)
    if principal.oidc is not None:
        principal.oidc.require_fresh()


def scope_prefix(principal: Principal) -> str | None:
    """The path prefix (C{ws/env/}) a scoped token's states share, or None
    for a principal that sees its whole tenant."""
    if principal.workspace_id is None:
        return None
    return f"{principal.workspace_id}/{principal.env_public_id}/"


def in_scope(principal: Principal, path: str | None) -> bool:
    """Whether the state at C{path} is one the principal may see in a listing
    (an event about no state is outside every token's scope; an OIDC token
    sees the states its grants let it read)."""
    if principal.oidc is not None:
        return path is not None and principal.oidc.allows(path, Access.READ)
    prefix = scope_prefix(principal)
    return prefix is None or (path is not None and path.startswith(prefix))


def check_admin(principal: Principal, tenant_wide: bool = False) -> None:
    """Purging a version and setting retention are for tenant admins
    (L{Principal.is_admin}); the tenant's own default (C{tenant_wide}) is
    not for a token scoped to one workspace/environment.

    @raise Forbidden: C{not_admin}, or C{wrong_environment} for a scoped
        token's tenant-wide change.
    """
    if not principal.is_admin:
        raise Forbidden("purging versions and setting retention need a tenant admin: a token"
                        " of scope admin (the static token, in the static auth mode)",
                        reason="not_admin")
    if tenant_wide and principal.workspace_id is not None:
        raise Forbidden("a token scoped to one workspace/environment sets retention per state;"
                        " the tenant's default is set on the control API",
                        reason="wrong_environment")
