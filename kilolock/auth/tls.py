"""Client certificates (mTLS) on Kilolock's own TLS listener.

Twisted's C{ssl:} endpoint string has no option to request or verify client
certificates, so with C{--tls-client-ca} the state lane's endpoint is built
here: the C{ssl:} string's keys (C{port}, C{privateKey}, C{certKey},
C{interface}, C{backlog}, C{extraCertChain}) are parsed with a small explicit
parser, and the L{CertificateOptions} require a client certificate signed by
that CA (the handshake fails without one).

The verified certificate's subject common name is recorded in the audit
trail: see L{with_client_certificate}.
"""

from __future__ import annotations

import re
from typing import Any

from attrs import evolve
from twisted.application.internet import StreamServerEndpointService
from twisted.internet import ssl
from twisted.internet.endpoints import SSL4ServerEndpoint
from twisted.internet.interfaces import IProtocolFactory
from twisted.python.filepath import FilePath

from kilolock.core.model import Principal
from kilolock.core.text import clean_text

#: The name the open auth mode gives every caller (see L{kilolock.auth.portal.OpenChecker}).
ANONYMOUS = "anonymous"
#: The keys of an C{ssl:} endpoint string that C{--tls-client-ca} understands.
SSL_KEYS = ("port", "privateKey", "certKey", "interface", "backlog", "extraCertChain")
_CERTIFICATE = re.compile(
    rb"-----BEGIN CERTIFICATE-----\r?\n.+?\r?\n-----END CERTIFICATE-----", re.DOTALL)


def split_endpoint(description: str) -> list[str]:
    """The fields of a Twisted endpoint string: split on C{:}, with C{\\:}
    and C{\\\\} unescaped inside a field."""
    fields, current, escaped = [], [], False
    for char in description:
        if escaped:
            current.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == ":":
            fields.append("".join(current))
            current = []
        else:
            current.append(char)
    fields.append("".join(current))
    return fields


def parse_ssl_endpoint(description: str) -> dict[str, str]:
    """The keys of an C{ssl:} endpoint string (the port may be positional).

    @raise ValueError: not an C{ssl:} string, no port, or a key not in
        L{SSL_KEYS}."""
    kind, *fields = split_endpoint(description)
    if kind != "ssl":
        raise ValueError("needs an ssl: --listen endpoint")
    keys: dict[str, str] = {}
    for position, field in enumerate(fields):
        name, equals, value = field.partition("=")
        if not equals and position == 0:
            name, value = "port", field
        elif not equals or name not in SSL_KEYS:
            raise ValueError(f"the ssl: key {field!r} is not supported with a client CA"
                             f" (known: {', '.join(SSL_KEYS)})")
        keys[name] = value
    if "port" not in keys or not keys["port"].isdigit():
        raise ValueError("the ssl: endpoint needs a port number")
    keys.setdefault("privateKey", "server.pem")
    keys.setdefault("certKey", keys["privateKey"])
    return keys


def load_ca_certificates(path: str) -> list[Any]:
    """The PEM certificates in C{path}, as pyOpenSSL certificates.

    @raise ValueError: the file is unreadable or holds no PEM certificate."""
    try:
        pem = FilePath(path).getContent()
    except OSError as error:
        raise ValueError(f"cannot read {path}: {error.strerror or error}") from None
    found = _CERTIFICATE.findall(pem)
    if not found:
        raise ValueError(f"{path} holds no PEM certificate")
    try:
        return [ssl.Certificate.loadPEM(block).original for block in found]
    except Exception as error:  # pyOpenSSL raises its own Error for bad PEM
        raise ValueError(f"{path}: not a valid PEM certificate ({error})") from None


def client_verifying_options(keys: dict[str, str], ca_path: str) -> ssl.CertificateOptions:
    """Certificate options serving C{keys}' certificate and requiring a client
    certificate signed by a CA in C{ca_path}."""
    cert_pem = FilePath(keys["certKey"]).getContent()
    key_pem = FilePath(keys["privateKey"]).getContent()
    private = ssl.PrivateCertificate.loadPEM(cert_pem + b"\n" + key_pem)
    chain = None
    if "extraCertChain" in keys:
        chain = load_ca_certificates(keys["extraCertChain"])
    return ssl.CertificateOptions(
        privateKey=private.privateKey.original, certificate=private.original,
        extraCertChain=chain, verify=True, caCerts=load_ca_certificates(ca_path),
        requireCertificate=True)


def check_client_ca(listen: str, ca_path: str) -> None:
    """Everything C{mtls_service} needs, checked without a reactor.

    @raise ValueError: with the problem."""
    client_verifying_options(parse_ssl_endpoint(listen), ca_path)


def mtls_service(reactor: Any, listen: str, ca_path: str,
                 factory: IProtocolFactory) -> StreamServerEndpointService:
    """A service serving C{factory} on the C{ssl:} endpoint C{listen}, for
    clients with a certificate signed by the CA in C{ca_path} only."""
    keys = parse_ssl_endpoint(listen)
    endpoint = SSL4ServerEndpoint(
        reactor, int(keys["port"]), client_verifying_options(keys, ca_path),
        backlog=int(keys.get("backlog", "50")), interface=keys.get("interface", ""))
    return StreamServerEndpointService(endpoint, factory)


def client_certificate_name(request: Any) -> str | None:
    """The subject common name of the client's verified certificate (its
    whole subject when it has no common name), or None without one."""
    transport = getattr(getattr(request, "channel", None), "transport", None)
    get_peer = getattr(transport, "getPeerCertificate", None)
    if get_peer is None:
        return None
    try:
        peer = get_peer()
    except Exception:  # not a TLS connection, or the handshake is not over
        return None
    if peer is None:
        return None
    from cryptography.x509.oid import NameOID

    subject = peer.to_cryptography().subject
    common_names = subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if common_names:
        value = common_names[0].value
        return value if isinstance(value, str) else value.decode("utf-8", "replace")
    return str(subject.rfc4514_string())


def with_client_certificate(principal: Principal, request: Any) -> Principal:
    """C{principal} naming the client certificate, if any, for the audit
    trail: C{cert:CN} in the open auth mode, C{<token name> cert:CN} when a
    token decided the tenant.  What a database cannot hold in the name (NUL,
    an unpaired surrogate) is U+FFFD: a certificate is never refused for it."""
    common_name = client_certificate_name(request)
    if common_name is None:
        return principal
    common_name = clean_text(common_name)
    name = f"cert:{common_name}" if principal.name == ANONYMOUS \
        else f"{principal.name} cert:{common_name}"
    return evolve(principal, name=name)
