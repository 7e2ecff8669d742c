"""What a starting server says about where it is: the address it really
bound (a port of 0 resolved; one interface or every one) and the URLs a
user needs -- the http backend's state lane, the dashboard, the cloud {}
block's TFE lane, kl's KL_URL, the control API in hosted mode."""

from __future__ import annotations

import re
import ssl
import subprocess
from pathlib import Path

import pytest

from tests.support.fixtures_server import ServerFactory
from tests.support.hosted_support import start_hosted_server
from tests.support.tls_material import endpoint_value, make_certificates

memory_server = pytest.mark.parametrize("server_store", ["memory"], indirect=True)


def announced(log: str) -> list[str]:
    """The lines the server logged about where it is."""
    return re.findall(r"\[kilolock\.server\.services#info\] (.*)", log)


@memory_server
def test_a_loopback_server_names_its_address_and_urls(
        kilolock_server_factory: ServerFactory) -> None:
    """Listening on port 0 of 127.0.0.1: the real port, "this interface
    only", and every URL with that address."""
    server = kilolock_server_factory()
    base = f"http://127.0.0.1:{server.port}"
    assert announced(server.log_text()) == [
        f"listening on 127.0.0.1:{server.port} (this interface only)",
        f'Terraform http backend: address = "{base}/v1/states/NAME"',
        f"dashboard: {base}/ui/",
        "cloud {} block: plain HTTP, which Terraform's discovery does not use: a CLI host"
        f" block naming {base}/api/v2/ (docs/tfe-lane.md, the local quick start)",
        f"kl: export KL_URL={base}",
    ]
    assert server.request("GET", "/ui/", headers={"Accept": "text/html"}).status == 200


@memory_server
def test_every_interface_in_the_open_mode_is_said_and_warned_of(
        kilolock_server_factory: ServerFactory) -> None:
    """tcp:0 binds every interface: the log says so, warns that the open
    mode lets anyone reach every state, and gives URLs a client on this
    machine can use (localhost); without the dashboard, no dashboard line."""
    server = kilolock_server_factory(listen="tcp:0", args=("--ui", "off"))
    lines = announced(server.log_text())
    assert lines[0] == (f"listening on 0.0.0.0:{server.port}"
                        " (every interface: other machines can reach it)")
    assert lines[1].startswith("authentication is off (KL_AUTH_MODE=open) and every interface"
                               " is bound")
    assert f"kl: export KL_URL=http://localhost:{server.port}" in lines
    assert not any(line.startswith("dashboard:") for line in lines)


@memory_server
def test_a_tls_server_names_https_urls_and_the_cloud_hostname(
        kilolock_server_factory: ServerFactory, tmp_path: Path) -> None:
    """An ssl: listener: https URLs, and the cloud {} block's hostname
    (Terraform discovers the lane itself over HTTPS); a static token
    server is not warned about."""
    certificates = make_certificates(tmp_path / "tls")
    context = ssl.create_default_context(cafile=str(certificates.ca_path))
    server = kilolock_server_factory(
        env={"KL_AUTH_MODE": "static", "KL_AUTH_TOKEN": "kl_startup-log-test-token-0123456789"},
        listen=f"ssl:0:interface=127.0.0.1:privateKey={endpoint_value(str(certificates.key_path))}"
               f":certKey={endpoint_value(str(certificates.cert_path))}",
        tls=context)
    lines = announced(server.log_text())
    base = f"https://127.0.0.1:{server.port}"
    assert f"dashboard: {base}/ui/" in lines
    assert (f'cloud {{}} block: hostname = "127.0.0.1:{server.port}"'
            f" (discovery {base}/.well-known/terraform.json)") in lines
    assert not any("authentication is off" in line for line in lines)


@memory_server
def test_a_hosted_server_names_its_control_api(kilolock_server_factory: ServerFactory) -> None:
    """Hosted mode: the control API's listener is named too, with the
    variable kl reads it from."""
    hosted = start_hosted_server(kilolock_server_factory)
    lines = announced(hosted.server.log_text())
    control = [line for line in lines if line.startswith("control API")]
    assert control == [f"control API (hosted mode): {hosted.control_url}/v1/api/"
                       f" (kl: export KL_CONTROL_URL={hosted.control_url})"]


def test_a_daemon_on_a_taken_port_exits_at_once_saying_why(tmp_path: Path) -> None:
    """twistd without -n (the README's run command): a port another
    process holds ends the start with status 1 and the reason on the
    terminal (twistd's parent would otherwise wait forever), the whole
    line in twistd.log."""
    import socket
    import sys

    twistd = Path(sys.executable).parent / "twistd"
    if not twistd.exists():
        pytest.skip(f"twistd is not installed next to {sys.executable}")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [str(twistd), "kilolock", "--store", "memory", "--listen",
             f"tcp:{port}:interface=127.0.0.1"],
            cwd=tmp_path, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert f"port {port} of 127.0.0.1: Address already in use" in done.stderr
    log = (tmp_path / "twistd.log").read_text()
    assert f"kilolock: cannot listen on 127.0.0.1:{port}: Address already in use" in log
    assert not (tmp_path / "twistd.pid").exists()
