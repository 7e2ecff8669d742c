"""The native API: C{/v1/native}, what the C{kl} command talks to.

Same authentication, tenant rules and state path segments as the Terraform
lane (L{kilolock.web.lane}, L{kilolock.rules.scope}): a state is one segment
(C{{name}}) or three (C{{workspace_id}/{env_public_id}/{state_name}}), each
validated by L{kilolock.rules.paths}; a token scoped to a workspace/environment
maps a one-segment name into its scope and gets 403 outside it.  What belongs
to a state follows the segment C{-} (GitLab's convention), so no state name
ever needs encoding and no route is ambiguous:

  GET   /v1/native                                   the lane (unauthenticated)
  GET   /v1/native/states                            the tenant's states
  GET   /v1/native/states/{state}                    one state's summary
  GET   /v1/native/states/{state}/-/versions         its version history
  GET   /v1/native/states/{state}/-/versions/{n}     version n, byte-for-byte
  GET   /v1/native/states/{state}/-/diff?from=&to=   resource-level diff
  GET   /v1/native/states/{state}/-/outputs[?version=n]
  GET   /v1/native/states/{state}/-/resources?type=&address=&module=&attribute=
  GET   /v1/native/states/{state}/-/lock             the lock, with its age
  GET   /v1/native/states/{state}/-/events           the state's audit events
  POST  /v1/native/states/{state}/-/rollback[?ID=]   restore a version ({"version": n})
  POST  /v1/native/states/{state}/-/versions/{n}/purge   delete its bytes ({"reason": "..."})
  GET PUT DELETE /v1/native/states/{state}/-/retention  the state's retention policy
  GET PUT DELETE /v1/native/retention                   the tenant's retention policy
  GET   /v1/native/resources?type=&address=&module=&attribute=&state=&limit=
  GET   /v1/native/events?state=&kind=&since=&until=&after=&limit=&last=
  GET   /v1/native/events/verify[?head=SEQ:HASH]     the tenant's hash chain, checked
  GET   /v1/native/events/head                       its head, to pin elsewhere

Every answer is JSON except a version's bytes; every error is the JSON error
document, lock conflicts included (with the holder under C{"lock"}).  A state
of another tenant is simply a state this tenant does not have: 404, the same
bytes as for a name nobody uses.

The modules: L{tree} (the root and the list of states), L{state} (one state
and what follows its C{-}), L{history} (versions, diff, outputs, rollback),
L{search} (resources from the projection), L{events} (the audit trail),
L{retention} (retention policies and purges),
L{resource} (what their resources share), L{documents} and L{parameters}
(the JSON they answer, the query parameters they read).
"""

#: The name and version of this lane in the discovery document.
LANE_NAME = "kilolock-native"
LANE_VERSION = "v1"
BASE_PATH = "/v1/native"
#: The segment between a state's address and what belongs to it.
MARKER = "-"
