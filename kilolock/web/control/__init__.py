"""The control API of hosted mode (C{KL_AUTH_MODE=database}), on its own
listener (C{--control-listen}, default C{tcp:8090}).

Every route but C{/healthz} needs C{Authorization: Bearer <KL_CONTROL_TOKEN>}
(compared in constant time); anything else is 401 before the path is even
looked at.  Answers are JSON; errors are the JSON error document, and a bad
field of a body or query names it (C{"field"}).  HEAD is not answered.

  GET     /v1/api/tenants[?deleted=true]
  POST    /v1/api/tenants                              {"slug", "name"}
  GET     /v1/api/tenants/{tenant}
  DELETE  /v1/api/tenants/{tenant}[?states=delete]
  GET     /v1/api/tenants/{tenant}/states
  GET     /v1/api/tenants/{tenant}/workspaces
  POST    /v1/api/tenants/{tenant}/workspaces          {"name"}
  GET     /v1/api/tenants/{tenant}/workspaces/{ws}
  DELETE  /v1/api/tenants/{tenant}/workspaces/{ws}
  GET     /v1/api/tenants/{tenant}/workspaces/{ws}/environments
  POST    /v1/api/tenants/{tenant}/workspaces/{ws}/environments   {"name"}
  GET     /v1/api/tenants/{tenant}/workspaces/{ws}/environments/{env}
  DELETE  /v1/api/tenants/{tenant}/workspaces/{ws}/environments/{env}
  GET     /v1/api/tenants/{tenant}/tokens
  POST    /v1/api/tenants/{tenant}/tokens
          {"name", "environment", "workspace"?, "scope"?, "state"?}
  GET     /v1/api/tenants/{tenant}/tokens/{token_id}
  DELETE  /v1/api/tenants/{tenant}/tokens/{token_id}   (revoke)
  GET     /v1/api/tenants/{tenant}/oidc-policy
  PUT     /v1/api/tenants/{tenant}/oidc-policy         the policy document (JSON)
  DELETE  /v1/api/tenants/{tenant}/oidc-policy
  GET     /v1/api/tenants/{tenant}/terraform-workspaces?environment=[&workspace=]
  POST    /v1/api/tenants/{tenant}/terraform-workspaces
          {"name", "environment", "workspace"?, "tags"?}
  GET     /v1/api/tenants/{tenant}/events[?state=&kind=&since=&until=]
  GET     /v1/api/tenants/{tenant}/events/verify[?head=SEQ:HASH]
  GET     /v1/api/tenants/{tenant}/retention[?state=PATH]
  PUT     /v1/api/tenants/{tenant}/retention[?state=PATH]   {"versions", "days"}
  DELETE  /v1/api/tenants/{tenant}/retention[?state=PATH]
  POST    /v1/api/tenants/{tenant}/version-purges     {"state", "version", "reason"}

C{{tenant}} is a live tenant's slug or any tenant's id (C{tn_...}: deleted
tenants stay readable, their audit trail above all); C{{ws}} and C{{env}} are
ids or names.  Every segment after C{/v1/api} follows the path rules of
L{kilolock.rules.paths} (a bad one is a 400 wherever it stands).

The modules: L{tree} (the listener's tree and its token gate), L{api} (what
every resource works with), L{tenants}, L{workspaces} and L{tokens} (the
resources), L{oidc} (the tenant's CI-token policy), L{retention}
(retention policies and purges), L{documents} (the JSON they answer).
"""

#: The route template every control request no resource answered is counted as.
API_ROUTE = "/v1/api"
#: Largest control request body (they are small JSON objects).
MAX_CONTROL_BODY_BYTES = 64 * 1024
