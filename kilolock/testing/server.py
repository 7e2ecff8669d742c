"""The Kilolock process behind the pytest plugin (L{kilolock.testing.pytest_plugin}).

    python -m kilolock.testing.server

Serves the real state lane (the same resource tree and Site as C{twistd
kilolock}, open auth) from a L{MemoryStateStore} on an ephemeral port of
127.0.0.1, on its own Twisted reactor in its own process, and answers the
plugin's inspection calls over its standard input and output, never over HTTP:

  - it writes one line C{{"ready": {"port": N, "pid": P}}} when it listens;
  - then every line it reads is a call C{{"id": N, "op": NAME, "args": {...}}}
    and it answers each with one line, C{{"id": N, "ok": VALUE}} or
    C{{"id": N, "error": MESSAGE}}.  Every call runs on the reactor thread, between HTTP requests,
    so what it sees is always a committed store;
  - when its standard input closes (the test session ended, or died) it stops.

The protocol uses a private copy of the original standard output; file
descriptor 1 itself is pointed at standard error, so a stray C{print} can
only reach the log, never corrupt an answer.  The parent sends standard
error to a log file.

This module imports Twisted; the plugin never imports it (only this process
does), so a test session's own reactor (pytest-twisted, or anything else)
is never touched.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from kilolock.core.model import DEFAULT_TENANT, StateKey, rfc3339
from kilolock.tfstate.parse import REDACTED

#: The longest call line accepted (calls are small: an operation and a name).
MAX_CALL_BYTES = 1024 * 1024


class Inspector:
    """The calls the plugin can make: read-only views of the store, by state path."""

    def __init__(self, store: Any, port: int) -> None:
        self.store = store
        self.port = port

    def operations(self) -> dict[str, Callable[..., Coroutine[Any, Any, Any]]]:
        return {
            "ping": self.ping,
            "state": self.state,
            "lock": self.lock,
            "versions": self.versions,
            "resources": self.resources,
            "outputs": self.outputs,
            "state_paths": self.state_paths,
        }

    @staticmethod
    def _key(path: str) -> StateKey:
        return StateKey(DEFAULT_TENANT, path)

    async def ping(self) -> dict[str, int]:
        return {"port": self.port, "pid": os.getpid()}

    async def state(self, path: str, version: int | None = None) -> str | None:
        """The text of the current version (or of version number C{version})."""
        if version is None:
            raw = await self.store.read_current(self._key(path))
        else:
            raw = await self.store.read_version(self._key(path), int(version))
        return None if raw is None else bytes(raw).decode("utf-8")

    async def lock(self, path: str) -> str | None:
        """The LockInfo body of the lock holder, as its client sent it."""
        held = await self.store.get_lock(self._key(path))
        return None if held is None else held.info.raw.decode("utf-8")

    async def versions(self, path: str) -> list[dict[str, Any]]:
        return [
            {
                "number": version.number,
                "serial": version.serial,
                "lineage": version.lineage,
                "sha256": version.sha256,
                "size": version.size,
                "created_at": rfc3339(version.created_at),
                "principal": version.principal,
            }
            for version in await self.store.list_versions(self._key(path))
        ]

    async def _projection(self, path: str) -> Any:
        key = self._key(path)
        projection = await self.store.get_projection(key)
        if projection is None and await self.store.read_current(key) is not None:
            raise ValueError(f"state {path!r} is an encrypted envelope (OpenTofu"
                             " client-side encryption): its resources and outputs"
                             " cannot be read")
        return projection

    async def resources(self, path: str) -> list[dict[str, Any]]:
        projection = await self._projection(path)
        return [
            {
                "address": row.address,
                "module": row.module,
                "mode": row.mode,
                "type": row.type,
                "name": row.name,
                "index_key": None if row.index_key is None else json.loads(row.index_key),
                "deposed": row.deposed,
                "provider": row.provider,
                "attributes": json.loads(row.attributes),
            }
            for row in (projection.resources if projection is not None else ())
        ]

    async def outputs(self, path: str) -> dict[str, Any]:
        projection = await self._projection(path)
        return {
            row.name: REDACTED if row.sensitive or row.value is None else json.loads(row.value)
            for row in (projection.outputs if projection is not None else ())
        }

    async def state_paths(self, prefix: str = "") -> list[str]:
        summaries = await self.store.list_states(DEFAULT_TENANT)
        return [summary.key.path for summary in summaries
                if summary.key.path.startswith(prefix)]


def main() -> int:
    protocol_fd = os.dup(1)
    os.dup2(2, 1)

    from twisted.internet import reactor as global_reactor
    from twisted.internet import stdio
    from twisted.internet.defer import ensureDeferred
    from twisted.logger import Logger, globalLogBeginner, textFileLogObserver
    from twisted.protocols.basic import LineReceiver

    from kilolock.auth.portal import OpenChecker, build_portal
    from kilolock.store.memory.store import MemoryStateStore
    from kilolock.web.site import KilolockSite, build_root

    globalLogBeginner.beginLoggingTo([textFileLogObserver(sys.stderr)],
                                     redirectStandardIO=False)
    log = Logger(namespace="kilolock.testing.server")
    reactor: Any = global_reactor

    store = MemoryStateStore()
    site = KilolockSite(build_root(store, build_portal(OpenChecker()), reactor))
    port = reactor.listenTCP(0, site, interface="127.0.0.1")
    inspector = Inspector(store, port.getHost().port)
    operations = inspector.operations()

    class CallChannel(LineReceiver):
        delimiter = b"\n"
        MAX_LENGTH = MAX_CALL_BYTES

        def connectionMade(self) -> None:
            self.answer({"ready": {"port": inspector.port, "pid": os.getpid()}})

        def answer(self, message: dict[str, Any]) -> None:
            assert self.transport is not None
            self.transport.write(json.dumps(message).encode("utf-8") + b"\n")

        def lineReceived(self, line: bytes) -> None:
            call_id = None
            try:
                call = json.loads(line)
                call_id = call.get("id")
                operation = operations[call["op"]]
                done: Any = ensureDeferred(operation(**call.get("args", {})))
            except Exception as error:
                self.answer({"id": call_id, "error": f"{type(error).__name__}: {error}"})
                return
            done.addCallbacks(
                lambda value: self.answer({"id": call_id, "ok": value}),
                lambda failure: self.answer({
                    "id": call_id,
                    "error": f"{failure.type.__name__}: {failure.getErrorMessage()}",
                }),
            )

        def lineLengthExceeded(self, line: bytes) -> None:
            self.answer({"error": "ValueError: call too long"})

        def connectionLost(self, reason: Any = None) -> None:
            log.info("the test session closed the call channel; stopping")
            if reactor.running:
                reactor.stop()

    log.info("kilolock test server on http://127.0.0.1:{port}", port=inspector.port)
    standard_io: Any = stdio.StandardIO  # POSIX: takes the two descriptors
    standard_io(CallChannel(), stdin=0, stdout=protocol_fd)
    reactor.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
