"""The listen backlog of Kilolock's listeners.

The kernel queues this many connections that the server has not accepted
yet; past it, new connections stall (their SYNs are dropped and retried
after a second or more).  Twisted's endpoints default to 50, which a burst
of clients (a CI fleet starting at once) overruns.  Linux caps the value at
C{net.core.somaxconn} (4096 on current kernels).
"""

from __future__ import annotations

from kilolock.auth.tls import split_endpoint

#: The endpoint kinds whose strings take a C{backlog=} key.
BACKLOG_KINDS = ("tcp", "tcp6", "ssl", "unix")


def with_backlog(description: str, backlog: int) -> str:
    """The endpoint string C{description} with C{backlog=} set to
    C{backlog}, unless it sets one itself (that one wins) or its kind takes
    none (e.g. C{systemd:}, whose socket is systemd's)."""
    kind, *fields = split_endpoint(description)
    if kind not in BACKLOG_KINDS or any(field.startswith("backlog=") for field in fields):
        return description
    return f"{description}:backlog={backlog}"
