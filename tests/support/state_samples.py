"""Sample states for the native-lane and kl tests."""

from __future__ import annotations

import json
from typing import Any

from tests.support.stub_client import state_body

LINEAGE = "7b1d5c1e-0000-4000-8000-000000000001"
ENVELOPE = json.dumps({
    "serial": 9, "lineage": LINEAGE, "meta": {"key_provider.pbkdf2.main": "e30="},
    "encrypted_data": "c2VjcmV0", "encryption_version": "v0"}).encode()


def item(name: str, attributes: dict[str, Any], index_key: Any = None,
         sensitive: tuple[str, ...] = (), module: str | None = None,
         deposed: str | None = None) -> dict[str, Any]:
    """One resource with one instance object."""
    instance: dict[str, Any] = {
        "schema_version": 0, "attributes": attributes,
        "sensitive_attributes": [[{"type": "get_attr", "value": path}] for path in sensitive]}
    if index_key is not None:
        instance["index_key"] = index_key
    if deposed is not None:
        instance["deposed"] = deposed
    resource: dict[str, Any] = {"mode": "managed", "type": "terraform_data", "name": name,
                                "provider": 'provider["terraform.io/builtin/terraform"]',
                                "instances": [instance]}
    if module is not None:
        resource["module"] = module
    return resource


def generation(serial: int, colour: str, secret: str, extra: bool = False,
               lineage: str = LINEAGE) -> bytes:
    """A state whose values depend on C{colour} and C{secret}; C{extra} adds a resource."""
    resources = [
        item("app", {"id": "app", "input": colour, "tags": {"Name": f"app-{colour}",
                                                            "team": "core"},
                     "password": secret}, sensitive=("password",)),
        item("db", {"id": "db", "size": 10}, module="module.data"),
    ]
    if extra:
        resources.append(item("cache", {"id": "cache", "input": "redis"}, index_key=0))
    outputs = {"colour": {"value": colour, "type": "string"},
               "secret": {"value": secret, "type": "string", "sensitive": True}}
    return state_body(serial, lineage=lineage, resources=resources, outputs=outputs)
