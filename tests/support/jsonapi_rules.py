"""The decoding rules of go-tfe (hashicorp/jsonapi) for the documents the
TFE lane answers, written out so a test can hold every answer to them.

hashicorp/jsonapi refuses a resource whose C{type} is not the one the Go
struct names, an attribute whose JSON kind does not fit the field (a string
for a bool, a number for a string), a timestamp that is not RFC 3339, and
relationship data of another type.  Lists carry C{meta.pagination} with
integers (or null for the absent previous/next page).  These schemas list
the fields of go-tfe v1.105.0's structs that the lane fills in.
"""

from __future__ import annotations

import re
from typing import Any

ISO8601 = "iso8601"
_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?Z$")

#: Attribute kinds: a Python type, a tuple of them, ISO8601, "any", or a
#: nested schema (a dict) for struct attributes.
WORKSPACE = {
    "type": "workspaces",
    "attributes": {
        "name": str, "created-at": ISO8601, "updated-at": ISO8601, "execution-mode": str,
        "operations": bool, "terraform-version": str, "locked": bool,
        "resource-count": int, "tag-names": [str], "description": str, "environment": str,
        "auto-apply": bool, "allow-destroy-plan": bool, "file-triggers-enabled": bool,
        "queue-all-runs": bool, "speculative-enabled": bool,
        "structured-run-output-enabled": bool, "global-remote-state": bool,
        "working-directory": str, "trigger-prefixes": [str], "trigger-patterns": [str],
        "actions": {"is-destroyable": bool},
        "permissions": {name: bool for name in (
            "can-destroy", "can-force-unlock", "can-lock", "can-unlock", "can-update",
            "can-force-delete", "can-queue-apply", "can-queue-destroy", "can-queue-run",
            "can-read-variable", "can-update-variable", "can-manage-run-tasks",
            "can-read-settings", "can-read-state-versions")},
    },
    "required": ("name", "execution-mode", "operations", "terraform-version", "permissions"),
    "relationships": {"organization": "organizations", "current-state-version": "state-versions",
                      "outputs": "workspace-outputs"},
}
STATE_VERSION = {
    "type": "state-versions",
    "attributes": {
        "created-at": ISO8601, "serial": int, "lineage": str, "size": int, "status": str,
        "state-version": int, "resources-processed": bool,
        "hosted-state-download-url": str, "hosted-state-upload-url": str,
        "hosted-json-state-upload-url": str,
    },
    "required": ("status", "serial"),
    "relationships": {},
}
STATE_VERSION_OUTPUT = {
    "type": "state-version-outputs",
    "attributes": {"name": str, "sensitive": bool, "type": str, "value": "any",
                   "detailed-type": "any"},
    "required": ("name", "sensitive", "type", "value"),
    "relationships": {},
}
WORKSPACE_OUTPUT = {
    "type": "workspace-outputs",
    "attributes": {"name": str, "sensitive": bool, "output-type": str, "value": "any"},
    "required": ("name", "sensitive", "output-type", "value"),
    "relationships": {},
}
ORGANIZATION = {"type": "organizations", "attributes": {"name": str}, "required": ("name",),
                "relationships": {}}
ENTITLEMENTS = {
    "type": "entitlement-sets",
    "attributes": {name: bool for name in (
        "operations", "state-storage", "private-module-registry", "sentinel", "teams",
        "vcs-integrations", "cost-estimation", "run-tasks", "audit-logging", "agents", "sso",
        "configuration-designer", "global-run-tasks", "module-tests-generation")},
    "required": ("operations", "state-storage"),
    "relationships": {},
}
TAG_BINDING = {"type": "tag-bindings", "attributes": {"key": str, "value": str},
               "required": ("key", "value"), "relationships": {}}
TAG = {"type": "tags", "attributes": {"name": str}, "required": ("name",),
       "relationships": {}}


def _check_value(value: Any, kind: Any, where: str) -> None:
    if kind == "any":
        return
    if kind == ISO8601:
        assert isinstance(value, str) and _TIME.match(value), f"{where}: not RFC 3339 UTC"
        return
    if isinstance(kind, list):
        assert isinstance(value, list), f"{where}: not a list"
        for position, item in enumerate(value):
            _check_value(item, kind[0], f"{where}[{position}]")
        return
    if isinstance(kind, dict):
        assert isinstance(value, dict), f"{where}: not an object"
        for name, item in value.items():
            assert name in kind, f"{where}.{name}: not a field of the struct"
            _check_value(item, kind[name], f"{where}.{name}")
        return
    if kind is int:
        assert isinstance(value, int) and not isinstance(value, bool), f"{where}: not an int"
        return
    assert isinstance(value, kind), f"{where}: {type(value).__name__} is not {kind}"


def check_resource(resource: Any, schema: dict[str, Any]) -> None:
    """Fail unless C{resource} decodes into the struct C{schema} describes."""
    assert isinstance(resource, dict), "a resource object must be an object"
    assert resource.get("type") == schema["type"], f"type {resource.get('type')!r}"
    assert isinstance(resource.get("id"), str) and resource["id"], "id must be a string"
    attributes = resource.get("attributes", {})
    for name in schema["required"]:
        assert name in attributes, f"attribute {name} missing"
    for name, value in attributes.items():
        if name in schema["attributes"] and value is not None:
            _check_value(value, schema["attributes"][name], f"{schema['type']}.{name}")
    for name, relationship in resource.get("relationships", {}).items():
        assert name in schema["relationships"], f"relationship {name} is not decoded"
        data = relationship["data"]
        for item in data if isinstance(data, list) else [data]:
            assert item["type"] == schema["relationships"][name], f"relationship {name} type"
            assert isinstance(item["id"], str)


def check_document(document: Any, schema: dict[str, Any], many: bool = False) -> None:
    """Fail unless C{document} is a JSON:API document of C{schema}
    resources (a list with pagination meta when C{many})."""
    data = document["data"]
    if many:
        assert isinstance(data, list)
        for resource in data:
            check_resource(resource, schema)
        pagination = document["meta"]["pagination"]
        for name in ("current-page", "total-pages", "total-count", "page-size"):
            _check_value(pagination[name], int, f"pagination.{name}")
        for name in ("prev-page", "next-page"):
            assert pagination[name] is None or isinstance(pagination[name], int)
    else:
        check_resource(data, schema)
    for included in document.get("included", []):
        check_resource(included, WORKSPACE_OUTPUT)
