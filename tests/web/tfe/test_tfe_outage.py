
"""The TFE lane while PostgreSQL is out of reach: every answer is a JSON:API
503 with Retry-After (never a 500), nothing half-stored; once the database
is back, the same upload URL takes the same bytes.  And, in memory, an
upload whose write met an unreachable database stays usable."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
from attrs import define
from twisted.internet.defer import Deferred, fail

from kilolock.core.errors import ServiceUnavailable
from kilolock.core.model import DEFAULT_TENANT, StateKey
from kilolock.store.memory.store import MemoryStateStore
from tests.server.test_durability import (
    assert_clean_log,
    start_server,
    stop_postmaster,
)
from tests.support.fixtures_server import KilolockServer, poll_until
from tests.support.stub_client import state_body
from tests.support.tfe_support import ORG, TFEStub, url_path, version_document, workspace_document

JSONAPI = {"Content-Type": "application/vnd.api+json"}


def call(server: KilolockServer, method: str, path: str, document: Any = None,
         body: bytes | None = None) -> Any:
    if document is not None:
        body = json.dumps(document).encode()
    return server.request(method, path, body=body, headers=JSONAPI)


@pytest.mark.postgres
def test_an_outage_is_a_jsonapi_503_and_the_upload_survives_it(
        request: pytest.FixtureRequest, tmp_path: Path, private_cluster: Any) -> None:
    """Reads, locks and an upload during an outage: 503 JSON:API documents
    with Retry-After; afterwards the upload URL announced before the outage
    still takes the announced bytes, which become the current version."""
    server = start_server(request, tmp_path, "kilolock", private_cluster.start_blocking())
    created = call(server, "POST", f"{ORG}/workspaces", workspace_document("app"))
    workspace_id = created.json()["data"]["id"]
    assert call(server, "POST", f"/api/v2/workspaces/{workspace_id}/actions/lock").status == 200
    raw = state_body(1)
    pending = call(server, "POST", f"/api/v2/workspaces/{workspace_id}/state-versions",
                   version_document(raw, 1)).json()["data"]
    upload = url_path(pending["attributes"]["hosted-state-upload-url"])

    stop_postmaster(private_cluster, signal.SIGINT)
    for method, path, body in (("GET", f"{ORG}/workspaces", None),
                               ("GET", f"/api/v2/workspaces/{workspace_id}", None),
                               ("PUT", upload, raw)):
        reply = server.request(method, path, body=body)
        assert reply.status == 503, (method, path, reply.body)
        assert reply.header(b"retry-after") == b"5"
        assert reply.json()["errors"][0]["status"] == "503"
        assert reply.header(b"tfp-api-version") == b"2.5"

    private_cluster.start_blocking()
    answers: list[Any] = []

    def put_until_answered() -> bool:
        answers.append(server.request("PUT", upload, body=raw))
        return bool(answers[-1].status != 503)

    poll_until(put_until_answered, 60, "the upload to be answered after the outage",
               interval=0.5)
    assert answers[-1].status == 200, answers[-1]
    assert server.request("GET", "/v1/states/app").body == raw
    assert_clean_log(server)


@define
class OnceUnreachable(MemoryStateStore):  # type: ignore[misc]
    """The memory store, whose next write finds the database unreachable
    (the outage a PostgreSQL store answers with ServiceUnavailable)."""

    outage: bool = True

    def write_state(self, *args: Any, **kwargs: Any) -> Deferred[Any]:
        if self.outage:
            self.outage = False
            return fail(ServiceUnavailable())
        return super().write_state(*args, **kwargs)


def test_an_upload_that_met_an_outage_can_be_sent_again() -> None:
    """An upload whose write found the database unreachable answers 503 and
    leaves its version pending, so go-tfe's retry of the same bytes is
    stored."""
    tfe = TFEStub(OnceUnreachable)
    workspace = tfe.create("app")
    assert tfe.lock(workspace["id"]).status == 200
    raw = state_body(1)
    pending = tfe.ok("POST", f"/api/v2/workspaces/{workspace['id']}/state-versions",
                     version_document(raw, 1), 201)["data"]
    upload = url_path(pending["attributes"]["hosted-state-upload-url"])
    first = tfe.request("PUT", upload, body=raw, token=None)
    assert (first.status, first.header(b"retry-after")) == (503, b"5")
    assert tfe.request("PUT", upload, body=raw, token=None).status == 200
    assert tfe.store.read_current(StateKey(DEFAULT_TENANT, "app")).result == raw
