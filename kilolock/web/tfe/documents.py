"""The JSON:API resources the TFE lane answers with, in the shapes go-tfe
decodes strictly: exact C{type}s, RFC 3339 UTC timestamps, booleans as
booleans, lists with C{meta.pagination}.

Every workspace is in local execution mode (C{operations: false},
C{execution-mode: "local"}, C{terraform-version: "latest"}: Terraform then
plans and applies on the caller's machine, never asks for runs, and any
Terraform version may read it), with the caller's C{permissions}
(C{can-force-delete} present: Terraform deletes through
C{actions/safe-delete}).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from attrs import frozen

from kilolock.core.model import Principal, StateSummary, StateVersion, rfc3339
from kilolock.rules.hosted import READ_SCOPE
from kilolock.tfe.model import PendingVersion, Tag, TFEWorkspace
from kilolock.tfe.names import output_id, version_id
from kilolock.tfe.outputs import OutputView
from kilolock.web.tfe import API_PATH

WORKSPACES = "workspaces"
STATE_VERSIONS = "state-versions"
ORGANIZATIONS = "organizations"

#: The permissions the TFE API names, and which scope grants each.
_WRITE_PERMISSIONS = ("can-destroy", "can-force-unlock", "can-lock", "can-unlock",
                      "can-update", "can-force-delete")
_RUN_PERMISSIONS = ("can-queue-apply", "can-queue-destroy", "can-queue-run",
                    "can-read-variable", "can-update-variable", "can-manage-run-tasks",
                    "can-read-settings")


@frozen
class Page:
    """C{page[number]} and C{page[size]} of a listing."""

    number: int = 1
    size: int = 20

    def of(self, items: Sequence[Any]) -> Sequence[Any]:
        start = (self.number - 1) * self.size
        return items[start:start + self.size]

    def meta(self, total: int) -> dict[str, Any]:
        pages = max(1, math.ceil(total / self.size))
        return {"pagination": {
            "current-page": self.number,
            "prev-page": self.number - 1 if self.number > 1 else None,
            "next-page": self.number + 1 if self.number < pages else None,
            "total-pages": pages,
            "total-count": total,
            "page-size": self.size,
        }}


def permissions(principal: Principal) -> dict[str, bool]:
    """What the caller may do with a workspace, by its scope."""
    write = principal.can_write
    granted = {name: write for name in _WRITE_PERMISSIONS}
    granted.update({name: False for name in _RUN_PERMISSIONS})
    granted["can-read-state-versions"] = principal.can_write or principal.scope == READ_SCOPE
    return granted


def workspace_resource(workspace: TFEWorkspace, organization: str,
                       summary: StateSummary | None, principal: Principal,
                       outputs: Sequence[tuple[str, OutputView]] | None = None
                       ) -> dict[str, Any]:
    """A workspace; with C{outputs} (ids and views), its C{outputs}
    relationship (the views themselves go to C{included})."""
    current = summary.current if summary is not None else None
    relationships: dict[str, Any] = {
        "organization": {"data": {"type": ORGANIZATIONS, "id": organization}},
    }
    if current is not None:
        relationships["current-state-version"] = {"data": {
            "type": STATE_VERSIONS, "id": version_id(workspace.id, current.number)}}
    if outputs is not None:
        relationships["outputs"] = {"data": [{"type": "workspace-outputs", "id": output}
                                             for output, _ in outputs]}
    updated = summary.updated_at if summary is not None else workspace.created_at
    return {
        "id": workspace.id,
        "type": WORKSPACES,
        "attributes": {
            "name": workspace.name,
            "created-at": rfc3339(workspace.created_at),
            "updated-at": rfc3339(updated),
            "execution-mode": "local",
            "operations": False,
            "terraform-version": "latest",
            "locked": summary is not None and summary.lock is not None,
            "resource-count": summary.resource_count if summary is not None else 0,
            "tag-names": [tag.key for tag in workspace.tags],
            "description": "",
            "environment": "default",
            "auto-apply": False,
            "allow-destroy-plan": True,
            "file-triggers-enabled": False,
            "queue-all-runs": False,
            "speculative-enabled": False,
            "structured-run-output-enabled": False,
            "global-remote-state": False,
            "working-directory": "",
            "trigger-prefixes": [],
            "trigger-patterns": [],
            "actions": {"is-destroyable": True},
            "permissions": permissions(principal),
        },
        "relationships": relationships,
        "links": {"self": f"{API_PATH}workspaces/{workspace.id}"},
    }


def workspace_output_resource(identifier: str, view: OutputView) -> dict[str, Any]:
    """An output as C{?include=outputs} shows it (C{tfe_outputs}); the
    value of a sensitive one is null."""
    return {"id": identifier, "type": "workspace-outputs", "attributes": {
        "name": view.name, "sensitive": view.sensitive, "output-type": view.type_name,
        "value": None if view.sensitive else view.value}}


def state_version_output_resource(identifier: str, view: OutputView,
                                  reveal: bool = False) -> dict[str, Any]:
    """A state version output: with its C{detailed-type} when the state has
    one (without it Terraform reads the whole state instead); its value null
    when sensitive, unless C{reveal}."""
    attributes: dict[str, Any] = {
        "name": view.name, "sensitive": view.sensitive, "type": view.type_name,
        "value": view.value if reveal or not view.sensitive else None}
    if view.detailed_type is not None:
        attributes["detailed-type"] = view.detailed_type
    return {"id": identifier, "type": "state-version-outputs", "attributes": attributes}


def output_entries(workspace_id: str, number: int,
                   views: Sequence[OutputView]) -> list[tuple[str, OutputView]]:
    """The outputs of version C{number} with their ids."""
    return [(output_id(workspace_id, number, index), view) for index, view in enumerate(views)]


def download_url(base: str, identifier: str) -> str:
    return f"{base}{API_PATH}state-versions/{identifier}/download"


def state_version_resource(identifier: str, version: StateVersion,
                           base: str) -> dict[str, Any]:
    """A stored version (finalized): where to download it."""
    return {"id": identifier, "type": STATE_VERSIONS, "attributes": {
        "created-at": rfc3339(version.created_at),
        "serial": version.serial,
        "lineage": version.lineage,
        "size": version.size,
        "status": "finalized",
        "state-version": 4,
        "resources-processed": True,
        "hosted-state-download-url": download_url(base, identifier),
    }}


def pending_version_resource(pending: PendingVersion, status: str, base: str,
                             grant: str | None = None) -> dict[str, Any]:
    """A pending version: with C{grant} (only in the answer to its
    creation), the two upload URLs."""
    attributes: dict[str, Any] = {
        "created-at": rfc3339(pending.created_at),
        "serial": pending.serial,
        "lineage": pending.lineage,
        "status": status,
        "state-version": 4,
        "resources-processed": status == "finalized",
    }
    if pending.version is not None:
        attributes["hosted-state-download-url"] = download_url(
            base, version_id(pending.workspace_id, pending.version))
    if grant is not None:
        uploads = f"{base}{API_PATH}state-version-uploads/{pending.id}"
        attributes["hosted-state-upload-url"] = f"{uploads}/state?grant={grant}"
        attributes["hosted-json-state-upload-url"] = f"{uploads}/json-state?grant={grant}"
    return {"id": pending.id, "type": STATE_VERSIONS, "attributes": attributes}


def organization_resource(name: str) -> dict[str, Any]:
    return {"id": name, "type": ORGANIZATIONS, "attributes": {"name": name}}


def entitlement_resource(name: str) -> dict[str, Any]:
    """No operations (Terraform runs locally), state storage only."""
    return {"id": name, "type": "entitlement-sets", "attributes": {
        "operations": False, "state-storage": True, "private-module-registry": False,
        "sentinel": False, "teams": False, "vcs-integrations": False,
        "cost-estimation": False, "run-tasks": False, "audit-logging": False,
        "agents": False, "sso": False, "configuration-designer": False,
        "global-run-tasks": False, "module-tests-generation": False}}


def tag_binding_resources(workspace: TFEWorkspace) -> list[dict[str, Any]]:
    return [{"id": f"tb-{workspace.id.removeprefix('ws-')}-{index}", "type": "tag-bindings",
             "attributes": {"key": tag.key, "value": tag.value}}
            for index, tag in enumerate(workspace.tags)]


def tag_resources(tags: Sequence[Tag]) -> list[dict[str, Any]]:
    return [{"id": tag.key, "type": "tags", "attributes": {"name": tag.key}} for tag in tags]
