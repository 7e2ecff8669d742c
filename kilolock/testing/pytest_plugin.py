"""pytest plugin: an in-memory Kilolock for integration tests of Terraform modules.

Installed with Kilolock (the C{pytest11} entry point C{kilolock}); a test asks
for the fixture and gets a server::

    def test_network(kilolock_server, tmp_path):
        kilolock_server.backend_block("network", tmp_path)   # writes kilolock_backend.tf
        ...  # terraform init / apply in tmp_path
        assert kilolock_server.outputs("network")["cidr"] == "10.0.0.0/16"

Fixtures:

  - C{kilolock_server}: for one test.  Its own namespace: the state names a
    test uses (C{"network"}) live on the server under a prefix no other test
    shares (C{t3-test_network.network}), so every test starts with no state,
    lock or version, whatever ran before or runs beside it.  Nothing is reset,
    so a module- or session-scoped fixture on the same server is never wiped.
  - C{kilolock_session_server}: the same server for the whole session (or
    one xdist worker), names used as given.  For module- or session-scoped
    fixtures; C{kilolock_session_server.fresh_namespace("label")} gives such
    a fixture a namespace of its own.

Both are a L{KilolockTestServer}: C{url}, C{state_url(name)},
C{backend_block(name, module_dir)}, and accessors that read the store
directly, not over HTTP: C{state}, C{lock}, C{versions}, C{resources},
C{outputs}, C{state_names}.

Why a subprocess: the server runs on Twisted, and a test session may already
own the global Twisted reactor (pytest-twisted runs it in the main thread;
Kilolock's own suite does).  A reactor cannot run twice in one process and a
second reactor in a thread is not supported by Twisted, so the server lives in
a process of its own (L{kilolock.testing.server}): its own reactor, the memory
store, an ephemeral port on 127.0.0.1.  The accessors are calls over that
process's standard input and output (a private pipe, JSON lines), answered on
its reactor thread between HTTP requests.  The same code therefore works in
plain pytest sessions, pytest-twisted sessions and anything else, and this
process never imports Twisted at all.

One server per process: the session fixture is started once per session, so
under pytest-xdist every worker starts its own, on its own port.

Cost when unused: importing this module imports only the standard library and
pytest; the server starts the first time a test asks for a fixture, and stops
(its input closes) when the session ends or when this process dies.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import select
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

try:
    import pytest
except ImportError as error:  # pragma: no cover - only outside a pytest run
    raise ImportError("kilolock.testing.pytest_plugin is a pytest plugin: install pytest"
                      " (pip install 'pytest>=8') to use it") from error

__all__ = [
    "BACKEND_FILE_NAME",
    "SENSITIVE",
    "KilolockServerError",
    "KilolockTestServer",
    "ServerProcess",
]

#: The file L{KilolockTestServer.backend_block} writes into a module directory.
BACKEND_FILE_NAME = "kilolock_backend.tf"

#: What a sensitive output's value (or a sensitive attribute) reads as.
SENSITIVE = "(sensitive)"

#: Seconds the server process may take to start listening.
START_TIMEOUT = 60.0
#: Seconds one accessor call may take (a large state is one JSON line).
CALL_TIMEOUT = 60.0
#: Seconds the server gets to stop after its input closes.
STOP_TIMEOUT = 10.0

_LABEL_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")
_MAX_LABEL = 48


class KilolockServerError(RuntimeError):
    """The test server failed to start, died, or refused a call."""


class ServerProcess:
    """One C{python -m kilolock.testing.server} child and its call pipe."""

    def __init__(self, process: subprocess.Popen[bytes], log_path: Path) -> None:
        self.process = process
        self.log_path = log_path
        self.port: int = 0
        self._buffer = bytearray()
        self._mutex = threading.Lock()
        self._namespaces = itertools.count(1)
        self._call_ids = itertools.count(1)

    @classmethod
    def start(cls, directory: Path, timeout: float = START_TIMEOUT) -> ServerProcess:
        """Start a server whose log is C{directory/server.log}; return once it listens."""
        directory.mkdir(parents=True, exist_ok=True)
        log_path = directory / "server.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "kilolock.testing.server"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                cwd=directory, env=_child_environment(), bufsize=0,
                start_new_session=True,
            )
        server = cls(process, log_path)
        try:
            ready = server._read_message(timeout, "the test server to start")
            if "ready" not in ready:
                raise KilolockServerError(f"unexpected first message {ready!r}")
            server.port = int(ready["ready"]["port"])
        except BaseException:
            server.stop()
            raise
        return server

    @property
    def pid(self) -> int:
        return self.process.pid

    def call(self, op: str, timeout: float = CALL_TIMEOUT, **args: Any) -> Any:
        """Run C{op} in the server and return its answer (thread-safe)."""
        with self._mutex:
            call_id = next(self._call_ids)
            line = json.dumps({"id": call_id, "op": op, "args": args}).encode("utf-8") + b"\n"
            if self.process.poll() is not None:
                raise self._died(f"calling {op}")
            assert self.process.stdin is not None
            try:
                self.process.stdin.write(line)
            except BrokenPipeError:
                raise self._died(f"calling {op}") from None
            deadline = time.monotonic() + timeout
            while True:  # an answer to an earlier call that timed out is skipped
                answer = self._read_message(max(0.0, deadline - time.monotonic()),
                                            f"the answer to {op}")
                if answer.get("id") == call_id:
                    break
        if "error" in answer:
            raise KilolockServerError(f"{op}: {answer['error']}")
        return answer["ok"]

    def stop(self) -> int | None:
        """Close the call pipe (the server then stops); kill it if it lingers."""
        process = self.process
        if process.stdin is not None and not process.stdin.closed:
            with contextlib.suppress(OSError):
                process.stdin.close()
        try:
            process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()
        return process.returncode

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no log)"

    def new_namespace(self, label: str) -> str:
        """A namespace no other caller of this process gets: C{t<n>-<label>}."""
        safe = _LABEL_UNSAFE.sub("_", label).strip("_")[:_MAX_LABEL] or "test"
        return f"t{next(self._namespaces)}-{safe}"

    def _read_message(self, timeout: float, what: str) -> dict[str, Any]:
        assert self.process.stdout is not None
        fd = self.process.stdout.fileno()
        deadline = time.monotonic() + timeout
        searched = 0
        while (end := self._buffer.find(b"\n", searched)) < 0:
            searched = len(self._buffer)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KilolockServerError(
                    f"timed out after {timeout:g}s waiting for {what}\n"
                    f"--- server log ({self.log_path}) ---\n{self.log_text()}")
            readable, _, _ = select.select([fd], [], [], remaining)
            if readable:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    self.process.wait(STOP_TIMEOUT)
                    raise self._died(f"waiting for {what}")
                self._buffer += chunk
        message: dict[str, Any] = json.loads(bytes(self._buffer[:end]))
        del self._buffer[:end + 1]
        return message

    def _died(self, doing: str) -> KilolockServerError:
        return KilolockServerError(
            f"the test server exited (status {self.process.poll()}) while {doing}\n"
            f"--- server log ({self.log_path}) ---\n{self.log_text()}")


def _child_environment() -> dict[str, str]:
    """This environment, with the directory this C{kilolock} was imported from
    (a source checkout, e.g. when pytest runs from one) first on the child's
    path, so the child runs the same code as this process.  An installed
    C{kilolock} needs nothing: the child finds it where this process did."""
    env = dict(os.environ)
    source_root = Path(__file__).resolve().parent.parent
    installed = {Path(sysconfig.get_path(name)).resolve() for name in ("purelib", "platlib")}
    if source_root not in installed:
        env["PYTHONPATH"] = os.pathsep.join(
            part for part in (str(source_root), env.get("PYTHONPATH")) if part)
    env["PYTHONUNBUFFERED"] = "1"
    return env


class KilolockTestServer:
    """A view of the test server: every state name is taken relative to
    C{namespace} (the empty string: names as given)."""

    def __init__(self, process: ServerProcess, namespace: str = "") -> None:
        self.process = process
        self.namespace = namespace

    def __repr__(self) -> str:
        return (f"<KilolockTestServer {self.url} namespace={self.namespace!r}"
                f" log={self.process.log_path}>")

    # -- addresses ----------------------------------------------------------

    @property
    def url(self) -> str:
        """The server's base URL, C{http://127.0.0.1:PORT}."""
        return f"http://127.0.0.1:{self.process.port}"

    @property
    def log_path(self) -> Path:
        """The server's log (one line per HTTP request)."""
        return self.process.log_path

    def state_path(self, name: str) -> str:
        """The path of state C{name} on the server (namespace included)."""
        path = f"{self.namespace}.{name}" if self.namespace else name
        _check_segment(name, path)
        return path

    def state_url(self, name: str) -> str:
        """The URL Terraform reads, writes, locks and unlocks state C{name} at."""
        return f"{self.url}/v1/states/{quote(self.state_path(name), safe='')}"

    def backend_block(self, name: str, module_dir: str | os.PathLike[str] | None = None) -> str:
        """A C{terraform { backend "http" {...} }} block for state C{name}, with
        the lock and unlock addresses and methods.  With C{module_dir}, also
        write it there as L{BACKEND_FILE_NAME} (replacing any).  Returns the text."""
        url = json.dumps(self.state_url(name))
        text = (
            f"# Written by the kilolock pytest plugin: state {json.dumps(name)}"
            " on the test server.\n"
            "terraform {\n"
            '  backend "http" {\n'
            f"    address        = {url}\n"
            f"    lock_address   = {url}\n"
            f"    unlock_address = {url}\n"
            '    lock_method    = "LOCK"\n'
            '    unlock_method  = "UNLOCK"\n'
            "  }\n"
            "}\n"
        )
        if module_dir is not None:
            Path(module_dir, BACKEND_FILE_NAME).write_text(text)
        return text

    def fresh_namespace(self, label: str = "test") -> KilolockTestServer:
        """The same server seen through a new namespace no one else uses."""
        return KilolockTestServer(self.process, self.process.new_namespace(label))

    # -- what the store holds (read directly, not over HTTP) ----------------

    def state(self, name: str, version: int | None = None) -> Any:
        """The parsed JSON of the current state (or of version number
        C{version}, from 1), or None when there is none."""
        args: dict[str, Any] = {"path": self.state_path(name)}
        if version is not None:
            args["version"] = int(version)
        text = self.process.call("state", **args)
        return None if text is None else json.loads(text)

    def lock(self, name: str) -> dict[str, Any] | None:
        """The holder's LockInfo as its client sent it (C{ID}, C{Operation},
        C{Who}, C{Version}, C{Created}, ...), or None when unlocked."""
        text = self.process.call("lock", path=self.state_path(name))
        return None if text is None else dict(json.loads(text))

    def versions(self, name: str) -> list[dict[str, Any]]:
        """Every stored version, oldest first: C{number}, C{serial}, C{lineage},
        C{sha256}, C{size}, C{created_at}, C{principal}.  Empty when none."""
        versions: list[dict[str, Any]] = self.process.call(
            "versions", path=self.state_path(name))
        return versions

    def resources(self, name: str) -> list[dict[str, Any]]:
        """The resource instances of the current state, in state order: C{address},
        C{module}, C{mode}, C{type}, C{name}, C{index_key}, C{deposed},
        C{provider} and C{attributes} (parsed; sensitive ones read L{SENSITIVE}).
        Empty when there is no state."""
        resources: list[dict[str, Any]] = self.process.call(
            "resources", path=self.state_path(name))
        return resources

    def outputs(self, name: str) -> dict[str, Any]:
        """The root outputs of the current state, name to value; a sensitive
        output's value is withheld and reads L{SENSITIVE}.  Empty when none."""
        outputs: dict[str, Any] = self.process.call("outputs", path=self.state_path(name))
        return outputs

    def state_names(self) -> list[str]:
        """The names of the states in this namespace (a lock alone creates
        one), sorted."""
        prefix = f"{self.namespace}." if self.namespace else ""
        paths: list[str] = self.process.call("state_paths", prefix=prefix)
        return sorted(path[len(prefix):] for path in paths)


def _check_segment(name: str, path: str) -> None:
    if not isinstance(name, str) or not name:
        raise ValueError(f"a state name must be a non-empty string, not {name!r}")
    from kilolock.core.errors import InvalidPath
    from kilolock.rules.paths import validate_segment

    try:
        # The name alone (valid in every namespace), then with its namespace.
        validate_segment(name.encode("utf-8"))
        validate_segment(path.encode("utf-8"))
    except InvalidPath as error:
        raise ValueError(f"state name {name!r}: {error.message}") from None


@pytest.fixture(scope="session")
def kilolock_session_server(
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[KilolockTestServer]:
    """The Kilolock test server of this session (of this xdist worker), state
    names used as given; shared by every test and fixture that uses it."""
    process = ServerProcess.start(tmp_path_factory.mktemp("kilolock-server"))
    try:
        yield KilolockTestServer(process)
    finally:
        process.stop()


@pytest.fixture
def kilolock_server(kilolock_session_server: KilolockTestServer,
                    request: pytest.FixtureRequest) -> KilolockTestServer:
    """The Kilolock test server, seen through a namespace of this test's own:
    it starts with no state, and no other test sees what it writes."""
    return kilolock_session_server.fresh_namespace(request.node.name)
