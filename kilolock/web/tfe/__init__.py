"""The TFE lane: the state part of the TFE API under C{/api/v2/}, for
Terraform's C{cloud {}} block and C{remote} backend in local execution
mode, and C{GET /.well-known/terraform.json}.

  GET     /.well-known/terraform.json
  GET     /api/v2/ping
  GET     /api/v2/organizations
  GET     /api/v2/organizations/{org}
  GET     /api/v2/organizations/{org}/entitlement-set
  GET     /api/v2/organizations/{org}/workspaces   ?search[name]= search[tags]=
          search[exclude-tags]= search[wildcard-name]= filter[tagged][i][key|value]=
          page[number]= page[size]=
  POST    /api/v2/organizations/{org}/workspaces
  GET     /api/v2/organizations/{org}/workspaces/{name}[?include=outputs]
  DELETE  /api/v2/organizations/{org}/workspaces/{name}
  POST    /api/v2/organizations/{org}/workspaces/{name}/actions/safe-delete
  GET     /api/v2/workspaces/{ws-id}[?include=outputs]
  PATCH   /api/v2/workspaces/{ws-id}
  DELETE  /api/v2/workspaces/{ws-id}
  POST    /api/v2/workspaces/{ws-id}/actions/safe-delete
  POST    /api/v2/workspaces/{ws-id}/actions/lock|unlock|force-unlock
  GET     /api/v2/workspaces/{ws-id}/current-state-version
  GET     /api/v2/workspaces/{ws-id}/current-state-version-outputs
  POST    /api/v2/workspaces/{ws-id}/state-versions
  GET     /api/v2/workspaces/{ws-id}/tag-bindings
  PATCH   /api/v2/workspaces/{ws-id}/tag-bindings
  GET     /api/v2/workspaces/{ws-id}/relationships/tags
  POST    /api/v2/workspaces/{ws-id}/relationships/tags
  GET     /api/v2/state-versions/{sv-id}
  GET     /api/v2/state-versions/{sv-id}/download
  GET     /api/v2/state-version-outputs/{wsout-id}
  PUT     /api/v2/state-version-uploads/{sv-id}/state?grant=...       (no credentials)
  PUT     /api/v2/state-version-uploads/{sv-id}/json-state?grant=...  (no credentials)

Every answer carries C{TFP-API-Version}; every error is a JSON:API error
document; every other route (or method) of the TFE API is a JSON:API 404,
logged once per route template as unimplemented.  The modules:
L{jsonapi} (documents out, errors), L{lane} (what every resource works
with: authentication, organizations, workspaces by name and id),
L{documents} (the resources' JSON), L{base} (the base resource, the error
page and the unimplemented routes), L{tree} (routing), L{workspaces},
L{actions}, L{versions}, L{uploads}, L{outputs} (the resources) and
L{discovery}.
"""

#: Where the API is served, as discovery advertises it.
API_PATH = "/api/v2/"
#: The TFE API version this lane speaks (Terraform wants 2.5 or later).
API_VERSION = b"2.5"
#: The route template of every request to a route this lane does not serve.
UNIMPLEMENTED_ROUTE = "/api/v2/{unimplemented}"
