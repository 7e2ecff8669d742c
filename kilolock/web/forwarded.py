"""Who the client really is behind reverse proxies.

C{X-Forwarded-For} and C{X-Forwarded-Proto} are honoured only when the
connection comes from a configured trusted proxy (C{--trusted-proxy CIDR}).
The client is then the right-most address of C{X-Forwarded-For} that is not
itself a trusted proxy: everything left of it could have been written by the
client.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence

from attrs import frozen

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_networks(cidrs: Iterable[str]) -> tuple[Network, ...]:
    """Parse C{--trusted-proxy} values; raise ValueError naming a bad one."""
    networks = []
    for cidr in cidrs:
        try:
            networks.append(ipaddress.ip_network(cidr.strip(), strict=False))
        except ValueError:
            raise ValueError(f"not an IP network: {cidr!r}") from None
    return tuple(networks)


def is_trusted(address: str, networks: Sequence[Network]) -> bool:
    """Whether C{address} (an IP address as text) is in one of C{networks}."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in networks)


@frozen
class ClientOrigin:
    address: str
    scheme: str


def client_origin(peer: str, forwarded_for: Sequence[bytes], forwarded_proto: bytes | None,
                  secure: bool, networks: Sequence[Network]) -> ClientOrigin:
    """The client's address and scheme, from the peer and forwarded headers."""
    scheme = "https" if secure else "http"
    if not networks or not is_trusted(peer, networks):
        return ClientOrigin(peer, scheme)
    hops = [hop.strip() for header in forwarded_for
            for hop in header.decode("latin-1").split(",") if hop.strip()]
    address = peer
    for hop in reversed(hops):
        address = hop
        if not is_trusted(hop, networks):
            break
    if forwarded_proto:
        proto = forwarded_proto.decode("latin-1").split(",")[0].strip().lower()
        if proto in ("http", "https"):
            scheme = proto
    return ClientOrigin(address, scheme)
