"""A tenant's OIDC policy on the control API: the issuers whose CI tokens it
trusts and the rules that grant them states (see docs/ci-identity.md).

  GET     /v1/api/tenants/{tenant}/oidc-policy     the policy (404 when none)
  PUT     /v1/api/tenants/{tenant}/oidc-policy     set it: the JSON document
  DELETE  /v1/api/tenants/{tenant}/oidc-policy     remove it (404 when none)

A document is checked by the one validator (L{kilolock.auth.oidc.validation}),
which files use too, except that local files (C{jwks_file}, C{ca_file}) are
refused here: a tenant gives keys and CAs inline (C{jwks}, C{ca_pem}).  An
invalid document is a 400 listing every problem with its place; nothing is
stored.  The stored document is the validated one, in canonical form, with
every default filled in; GET answers it.
"""

from __future__ import annotations

import json
from typing import Any

from twisted.web.server import Request

from kilolock.auth.oidc.model import OidcPolicyRecord
from kilolock.auth.oidc.validation import PolicyError, validate_policy
from kilolock.core.errors import InvalidOidcPolicy, OidcPolicyNotFound
from kilolock.core.model import rfc3339
from kilolock.web.body import read_body
from kilolock.web.control import MAX_CONTROL_BODY_BYTES
from kilolock.web.control.api import ControlResource
from kilolock.web.documents import json_response
from kilolock.web.json_body import json_body_object
from kilolock.web.resource import Response, render_async

NO_POLICY = "the tenant has no OIDC policy (it accepts no CI token)"


def canonical_policy(body: bytes) -> str:
    """The canonical JSON text of the valid policy C{body} holds.

    @raise InvalidField: the body is not a JSON object.
    @raise InvalidText: it breaks a text rule (L{kilolock.core.text}).
    @raise InvalidOidcPolicy: the document breaks the policy's rules.
    """
    document = json_body_object(body, MAX_CONTROL_BODY_BYTES, ": the OIDC policy")
    try:
        policy = validate_policy(document, allow_local_files=False)
    except PolicyError as error:
        raise InvalidOidcPolicy(error.problems) from None
    return json.dumps(policy.to_document(), sort_keys=True, separators=(",", ":"))


def policy_document(record: OidcPolicyRecord) -> dict[str, Any]:
    return {"tenant": record.tenant_id, "updated_at": rfc3339(record.updated_at),
            "policy": json.loads(record.document)}


class OidcPolicyResource(ControlResource):
    """The tenant's OIDC policy: GET, PUT (set), DELETE (remove)."""

    route = "/v1/api/tenants/{tenant}/oidc-policy"

    @render_async
    async def render_GET(self, request: Request) -> Response:
        record = await self.api.store.get_oidc_policy(self.tenant)
        if record is None:
            raise OidcPolicyNotFound(NO_POLICY)
        return json_response(policy_document(record))

    @render_async
    async def render_PUT(self, request: Request) -> Response:
        document = canonical_policy(await read_body(request, self.api.reactor))
        record = await self.api.store.put_oidc_policy(self.tenant, document,
                                                      self.api.actor(request))
        return json_response(policy_document(record))

    @render_async
    async def render_DELETE(self, request: Request) -> Response:
        record = await self.api.store.delete_oidc_policy(self.tenant, self.api.actor(request))
        if record is None:
            raise OidcPolicyNotFound(NO_POLICY)
        return json_response(policy_document(record))
