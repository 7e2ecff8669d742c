"""A large POST over HTTP on a live server (twistd subprocess) with the
PostgreSQL store, which writes it overlapped with its parse: byte-exact,
projected, and answering in the plain path's order -- a body the parse
refuses is a 400 even while another holds the lock, a valid body meets the
lock (423) and the serial rule (409) -- with nothing stored when refused."""

from __future__ import annotations

import json
from typing import Any

import pytest

from kilolock.store.postgres.large import LARGE_TRANSFER_BYTES
from tests.support.fixtures_server import KilolockServer
from tests.support.stub_client import lock_body, state_body

POSTGRES_ONLY = pytest.mark.parametrize(
    "server_store", [pytest.param("postgres", marks=pytest.mark.postgres, id="store=postgres")],
    indirect=True)


def big(serial: int, name: str = "r") -> bytes:
    """A state just over the large-transfer threshold."""
    count = LARGE_TRANSFER_BYTES // 2100 + 10
    raw = state_body(serial, resources=[{
        "mode": "managed", "type": "terraform_data", "name": f"{name}{index}",
        "provider": 'provider["terraform.io/builtin/terraform"]',
        "instances": [{"attributes": {"id": f"{index}", "input": "x" * 2000}}],
    } for index in range(count)])
    assert len(raw) > LARGE_TRANSFER_BYTES
    return raw


def versions(server: KilolockServer) -> list[int]:
    reply = server.request("GET", "/v1/native/states/big/-/versions")
    assert reply.status == 200, reply.body
    return [version["serial"] for version in json.loads(reply.body)["versions"]]


@POSTGRES_ONLY
def test_a_large_post_answers_in_the_plain_paths_order(kilolock_server: KilolockServer,
                                                       server_store: Any) -> None:
    server = kilolock_server
    first = big(1)
    assert server.with_body("POST", "/v1/states/big", first).status == 200
    assert server.request("GET", "/v1/states/big").body == first
    resources = server.request("GET", "/v1/native/states/big/-/resources")
    assert resources.status == 200 and b'"terraform_data.r0"' in resources.body

    assert server.with_body("LOCK", "/v1/states/big", lock_body("holder")).status == 200
    refused = server.with_body("POST", "/v1/states/big?ID=other", big(2)[:-3])
    assert (refused.status, json.loads(refused.body)["error"]["code"]) \
        == (400, "invalid_state")
    assert server.with_body("POST", "/v1/states/big?ID=other", big(2)).status == 423
    assert server.with_body("POST", "/v1/states/big?ID=holder", big(1, "s")).status == 409
    assert versions(server) == [1]
    assert server.request("GET", "/v1/states/big").body == first
    assert server.with_body("POST", "/v1/states/big?ID=holder", big(2)).status == 200
    assert sorted(versions(server)) == [1, 2]
    # The refused write's transaction rolled back quietly: no outage noted.
    assert "stopped answering" not in server.log_text()
