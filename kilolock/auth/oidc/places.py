"""Hosted mode: grants that name a workspace or an environment, by id or by
name, turned into grants on ids.

A state of a hosted tenant is addressed as C{{workspace_id}/{env_public_id}/
{state_name}}, while a rule may name its workspace and environment either
way (C{environment = "{environment}"} renders a GitHub environment's
*name*).  L{resolve_places} replaces every such grant by one grant per
(workspace id, environment id) pair it names, so that
L{kilolock.auth.oidc.decision.Accepted.check} compares ids only.  Environment
names are unique within a workspace, not within a tenant: a grant naming
the environment C{prod} without a workspace covers every workspace's
C{prod}.  A grant naming nothing that exists covers nothing and is dropped.

Pure: the caller passes the tenant's workspaces and environments.
"""

from __future__ import annotations

from collections.abc import Iterable

from attrs import evolve

from kilolock.auth.oidc.decision import Accepted, GrantedAccess

#: (id, name) of a workspace.
WorkspaceName = tuple[str, str]
#: (id, workspace id, name) of an environment.
EnvironmentName = tuple[str, str, str]


def _resolved(grant: GrantedAccess, workspaces: list[WorkspaceName],
              environments: list[EnvironmentName]) -> list[GrantedAccess]:
    if grant.workspace is None and grant.environment is None:
        return [grant]
    in_workspaces = None if grant.workspace is None else {
        id_ for id_, name in workspaces if grant.workspace in (id_, name)}
    if grant.environment is None:
        return [evolve(grant, workspace=id_) for id_ in sorted(in_workspaces or ())]
    return [evolve(grant, workspace=workspace, environment=id_)
            for id_, workspace, name in sorted(environments)
            if grant.environment in (id_, name)
            and (in_workspaces is None or workspace in in_workspaces)]


def resolve_places(accepted: Accepted, workspaces: Iterable[WorkspaceName],
                   environments: Iterable[EnvironmentName]) -> Accepted:
    """C{accepted} with every grant's workspace and environment given as
    ids (see the module docstring)."""
    known_workspaces = list(workspaces)
    known_environments = list(environments)
    grants = tuple(resolved for grant in accepted.grants
                   for resolved in _resolved(grant, known_workspaces, known_environments))
    return evolve(accepted, grants=grants)
