"""C{kl dev-cert}: TLS for a try-out on one machine, without openssl.

It writes a server key and certificate for C{localhost}, C{127.0.0.1} and
C{::1} (and any C{--host}), signed by a throwaway CA whose private key is
never written: trusting that CA trusts this one certificate and nothing
else, and no one can sign another with it.  It prints the C{--listen}
endpoint that serves the certificate and what to export so that Terraform
(any Go program on Linux) and C{kl} trust it.
"""

from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
import re
from pathlib import Path

from kilolock.kl.arguments import CommandTree, positive_int
from kilolock.kl.context import Context
from kilolock.kl.exits import EXIT_OK, EXIT_USAGE, KlError

#: Where the files go unless C{--dir} says otherwise.
DEFAULT_DIR = "kilolock-dev-cert"
#: How long the certificate is valid unless C{--days} says otherwise.
DEFAULT_DAYS = 30
#: The longest validity asked for (browsers refuse longer ones).
MAX_DAYS = 397
#: The names every certificate holds.
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
#: The file holding the CA alone: the directory of C{SSL_CERT_DIR} (Go reads
#: every file of it as trusted CAs, so nothing else may be there).
TRUST_DIR = "trust"
CA_FILE = "ca.pem"


def register(tree: CommandTree) -> None:
    command = tree.command("dev-cert", cmd_dev_cert,
                           "write a throwaway CA and a localhost certificate for a TLS"
                           " try-out, and print how to serve and trust them")
    command.add_argument("--dir", default=DEFAULT_DIR,
                         help=f"where to write them (default ./{DEFAULT_DIR})")
    command.add_argument("--host", dest="hosts", action="append", default=[],
                         help="another name or address the certificate is for (repeatable)")
    command.add_argument("--days", type=positive_int, default=DEFAULT_DAYS,
                         help=f"how long it is valid (default {DEFAULT_DAYS}, at most"
                              f" {MAX_DAYS})")
    command.add_argument("--port", type=positive_int, default=8443,
                         help="the port of the --listen line printed (default 8443)")
    command.add_argument("--force", action="store_true",
                         help="replace the files of an earlier run")


_HOST_NAME = re.compile(r"^(?=.{1,253}$)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
                        r"(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*$")


def _names(hosts: list[str]) -> list[str]:
    """The certificate's names: the loopback ones, then C{hosts}.

    @raise KlError: a host that is neither an address nor a host name."""
    names = list(LOOPBACK_NAMES)
    for host in hosts:
        host = host.strip().lower()
        if not (_is_address(host) or _HOST_NAME.match(host)):
            raise KlError(EXIT_USAGE, f"--host {host!r} is not a host name or an address")
        if host not in names:
            names.append(host)
    return names


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def write_dev_cert(directory: Path, names: list[str], days: int,
                   now: datetime.datetime) -> tuple[Path, Path, Path]:
    """Write the key (mode 0600), the certificate and the CA's certificate
    into C{directory}; return their paths (key, certificate, CA)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    def name(common_name: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])

    start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = name(f"Kilolock dev CA {now:%Y-%m-%d %H:%M:%S} (throwaway)")
    no_usage = dict(content_commitment=False, key_encipherment=False, data_encipherment=False,
                    key_agreement=False, encipher_only=False, decipher_only=False)
    ca = (x509.CertificateBuilder()
          .subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(start).not_valid_after(end)
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                       crl_sign=True, **no_usage), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()),
                         critical=False)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    alternatives: list[x509.GeneralName] = [
        x509.IPAddress(ipaddress.ip_address(entry)) if _is_address(entry)
        else x509.DNSName(entry) for entry in names]
    cert = (x509.CertificateBuilder()
            .subject_name(name(names[0])).issuer_name(ca_name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(start).not_valid_after(end)
            .add_extension(x509.SubjectAlternativeName(alternatives), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(
                ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    (directory / TRUST_DIR).mkdir(parents=True, exist_ok=True)
    key_path, cert_path = directory / "key.pem", directory / "cert.pem"
    ca_path = directory / TRUST_DIR / CA_FILE
    descriptor = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "wb") as out:
        out.write(key.private_bytes(serialization.Encoding.PEM,
                                    serialization.PrivateFormat.PKCS8,
                                    serialization.NoEncryption()))
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    ca_path.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    return key_path, cert_path, ca_path


def _endpoint_value(path: Path) -> str:
    """A path escaped for a Twisted endpoint string."""
    return str(path).replace("\\", "\\\\").replace(":", "\\:")


def cmd_dev_cert(ctx: Context, args: argparse.Namespace) -> int:
    if args.days > MAX_DAYS:
        raise KlError(EXIT_USAGE, f"--days is at most {MAX_DAYS}")
    names = _names(args.hosts)
    directory = Path(args.dir)
    existing = [path for path in (directory / "key.pem", directory / "cert.pem",
                                  directory / TRUST_DIR / CA_FILE) if path.exists()]
    if existing and not args.force:
        raise KlError(EXIT_USAGE, f"{existing[0]} exists: pass --force to replace the files,"
                      " or --dir to write them elsewhere")
    try:
        key, cert, ca = write_dev_cert(directory, names, args.days,
                                       datetime.datetime.now(datetime.UTC))
    except OSError as error:
        raise KlError(EXIT_USAGE, f"cannot write into {directory}: {error}") from None
    absolute = ca.parent.resolve()
    if ctx.out.json_if_asked({"key": str(key), "certificate": str(cert), "ca": str(ca),
                              "names": names, "days": args.days}):
        return EXIT_OK
    listen = (f"ssl:{args.port}:interface=127.0.0.1:privateKey={_endpoint_value(key)}"
              f":certKey={_endpoint_value(cert)}")
    ctx.out.lines([
        f"wrote {cert} and {key} (for {', '.join(names)}; valid {args.days} days),",
        f"signed by a throwaway CA whose key was never written: {ca}",
        "",
        "Serve them (loopback only; add the store and auth options you use):",
        f"  twistd -n kilolock --listen {listen}",
        "",
        "Trust the CA in the shell that runs Terraform (Linux: Go reads every file of",
        "SSL_CERT_DIR as a trusted CA and keeps the system's own bundle):",
        f"  export SSL_CERT_DIR={absolute}",
        "and for kl (and curl --cacert):",
        f"  export KL_URL=https://localhost:{args.port} KL_CA_FILE={ca.resolve()}",
        "",
        "cloud {} blocks then name the server by its host and port:",
        f"  hostname = \"localhost:{args.port}\"",
    ])
    return EXIT_OK
