"""The kernel's table of IPv4 TCP sockets (C{/proc/net/tcp}), read to wait
for a condition of a connection instead of sleeping: whether a peer has read
what was sent to it, whether a port still listens."""

from __future__ import annotations

from pathlib import Path

_TABLE = Path("/proc/net/tcp")
_LISTEN = "0A"


def _sockets() -> list[tuple[int, int, str, int, int]]:
    """(local port, remote port, state, send queue, receive queue) of each socket."""
    rows = []
    for line in _TABLE.read_text().splitlines()[1:]:
        _, local, remote, state, queues = line.split()[:5]
        send_queue, receive_queue = (int(part, 16) for part in queues.split(":"))
        rows.append((int(local.rpartition(":")[2], 16), int(remote.rpartition(":")[2], 16),
                     state, send_queue, receive_queue))
    return rows


def unread_bytes(server_port: int, client_port: int) -> int | None:
    """The bytes sent from C{client_port} to a local server on C{server_port}
    that the server has not read yet: the client's send queue plus the
    server's receive queue.  None if there is no such connection."""
    queued: dict[str, int] = {}
    for local, remote, _, send_queue, receive_queue in _sockets():
        if (local, remote) == (client_port, server_port):
            queued["client"] = send_queue
        elif (local, remote) == (server_port, client_port):
            queued["server"] = receive_queue
    return sum(queued.values()) if len(queued) == 2 else None


def listening(port: int) -> bool:
    """Whether a socket listens on C{port}."""
    return any(local == port and state == _LISTEN for local, _, state, _, _ in _sockets())
