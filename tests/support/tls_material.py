"""TLS material for tests: a throw-away CA and a server certificate for
127.0.0.1/localhost (made with ``cryptography``), and an http backend block
with Terraform's TLS settings."""

from __future__ import annotations

import datetime
import ipaddress
from pathlib import Path

from attrs import frozen
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.support.terraform import HttpBackend, hcl_string


@frozen
class Certificates:
    """A CA and a server certificate it signed, as PEM files."""

    ca_pem: str
    ca_path: Path
    key_path: Path
    cert_path: Path
    cert_der: bytes


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _make_ca(common_name: str,
             now: datetime.datetime) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A self-signed CA key and certificate, valid for a day."""
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder()
          .subject_name(_name(common_name)).issuer_name(_name(common_name))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5))
          .not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False,
                                       data_encipherment=False, key_agreement=False,
                                       encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                         critical=False)
          .sign(ca_key, hashes.SHA256()))
    return ca_key, ca


def make_certificates(directory: Path) -> Certificates:
    """A self-signed CA and a server certificate for 127.0.0.1 and localhost
    (subject alternative names, as Go requires), valid for a day."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key, ca = _make_ca("Kilolock test CA", now)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(_name("localhost")).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"),
                x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    directory.mkdir(parents=True, exist_ok=True)
    ca_pem = ca.public_bytes(serialization.Encoding.PEM)
    paths = {name: directory / name for name in ("ca.pem", "server-key.pem", "server-cert.pem")}
    paths["ca.pem"].write_bytes(ca_pem)
    paths["server-key.pem"].write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    paths["server-key.pem"].chmod(0o600)
    paths["server-cert.pem"].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return Certificates(ca_pem.decode(), paths["ca.pem"], paths["server-key.pem"],
                        paths["server-cert.pem"], cert.public_bytes(serialization.Encoding.DER))


@frozen
class ClientCertificate:
    """A client certificate, its key and the CA that signed it, as PEM text
    and files."""

    common_name: str
    ca_path: Path
    cert_pem: str
    key_pem: str
    cert_path: Path
    key_path: Path


def make_client_certificate(directory: Path, common_name: str,
                            ca_name: str = "Kilolock client CA") -> ClientCertificate:
    """A fresh client CA (C{ca_name}) and a client certificate for
    C{common_name} it signed (extended key usage: client auth), valid for a
    day."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key, ca = _make_ca(ca_name, now)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (x509.CertificateBuilder()
            .subject_name(_name(common_name)).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    directory.mkdir(parents=True, exist_ok=True)
    cert_pem = cert.public_bytes(serialization.Encoding.PEM).decode()
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
    ca_path, cert_path, key_path = (directory / name for name in (
        "client-ca.pem", "client-cert.pem", "client-key.pem"))
    ca_path.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_path.write_text(cert_pem)
    key_path.write_text(key_pem)
    key_path.chmod(0o600)
    return ClientCertificate(common_name, ca_path, cert_pem, key_pem, cert_path, key_path)


def endpoint_value(text: str) -> str:
    """C{text} escaped for a Twisted endpoint string (C{:} and C{\\})."""
    return text.replace("\\", "\\\\").replace(":", "\\:")


@frozen
class TlsHttpBackend(HttpBackend):
    """An http backend block with Terraform's TLS settings."""

    client_ca_certificate_pem: str | None = None
    skip_cert_verification: bool | None = None
    client_certificate_pem: str | None = None
    client_private_key_pem: str | None = None

    def hcl(self) -> str:
        block = HttpBackend.hcl(self)
        extra = []
        if self.client_ca_certificate_pem is not None:
            extra.append(f"    client_ca_certificate_pem = "
                         f"{hcl_string(self.client_ca_certificate_pem)}")
        for name in ("client_certificate_pem", "client_private_key_pem"):
            value = getattr(self, name)
            if value is not None:
                extra.append(f"    {name} = {hcl_string(value)}")
        if self.skip_cert_verification is not None:
            extra.append(f"    skip_cert_verification = "
                         f"{'true' if self.skip_cert_verification else 'false'}")
        head, closing = block.rsplit("  }\n", 1)
        return head + "".join(line + "\n" for line in extra) + "  }\n" + closing
