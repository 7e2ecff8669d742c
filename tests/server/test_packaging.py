"""Packaging: the twistd plugin, `twistd -n kilolock`, `twistd -ny kilolock.tac`.

The servers here are real subprocesses started with this test run's own
interpreter, so the tests hold in any virtualenv the project is installed in.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from twisted.application.service import IServiceMaker
from twisted.plugin import getPlugins

from tests.support.fixtures_server import (
    KilolockServer,
    clean_environment,
    poll_until,
    server_command,
)
from tests.support.paths import REPO
from tests.support.stub_client import content_md5, lock_body, state_body

#: twistd, run by this interpreter (no reliance on a `twistd` script on PATH).
TWISTD = [sys.executable, "-c",
          "import sys; sys.argv[0] = 'twistd'; from twisted.scripts.twistd import run; run()"]


def run_quickly(command: list[str], env: dict[str, str] | None = None,
                cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, env=env or clean_environment(), cwd=cwd, timeout=60,
                          capture_output=True, text=True, stdin=subprocess.DEVNULL)


def roundtrip(server: KilolockServer, name: str) -> None:
    """Write and read a state, then LOCK / conflict / UNLOCK it, over the socket."""
    path = f"/v1/states/{name}"
    body = state_body(1)
    assert server.with_body("POST", path, body).status == 200
    got = server.request("GET", path)
    assert (got.status, got.body) == (200, body)
    mine, theirs = lock_body("lock-one"), lock_body("lock-two")
    assert server.with_body("LOCK", path, mine).status == 200
    conflict = server.with_body("LOCK", path, theirs)
    assert (conflict.status, conflict.body) == (423, mine)
    assert server.with_body("UNLOCK", path, mine).status == 200
    assert server.with_body("LOCK", path, theirs).status == 200


# -- the plugin ---------------------------------------------------------------


def test_plugin_is_found_through_getPlugins() -> None:
    """getPlugins(IServiceMaker) finds the "kilolock" ServiceMaker, which
    points at kilolock.server.tap's Options and makeService."""
    from kilolock.server import tap

    makers = {maker.tapname: maker for maker in getPlugins(IServiceMaker)}
    assert "kilolock" in makers
    maker = makers["kilolock"]
    assert maker.options is tap.Options
    assert maker.makeService is tap.makeService
    assert "http backend" in maker.description


def test_plugin_module_imports_neither_the_reactor_nor_the_server() -> None:
    """Importing the plugin (as every twistd run does for every plugin) loads
    neither the reactor nor kilolock.server.tap: the ServiceMaker is lazy."""
    probe = ("import json, sys; import twisted.plugins.kilolock_plugin; "
             "print(json.dumps(['twisted.internet.reactor' in sys.modules,"
             " 'kilolock.server.tap' in sys.modules]))")
    result = run_quickly([sys.executable, "-c", probe])
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == [False, False]


def test_no_init_module_under_twisted_plugins() -> None:
    """twisted/ and twisted/plugins/ in the source tree have no __init__.py
    (one would shadow Twisted's own package on install)."""
    assert (REPO / "twisted" / "plugins" / "kilolock_plugin.py").is_file()
    assert not (REPO / "twisted" / "__init__.py").exists()
    assert not (REPO / "twisted" / "plugins" / "__init__.py").exists()


def test_makeService_builds_the_store_service_then_the_listener(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """makeService(options) returns a MultiService: the store service first
    (started first, stopped last), then the HTTP endpoint service."""
    from twisted.application.internet import StreamServerEndpointService

    from kilolock.server.services import StoreService
    from kilolock.server.tap import Options, makeService
    from kilolock.store.memory.store import MemoryStateStore

    for name in [name for name in os.environ if name.startswith("KL_")]:
        monkeypatch.delenv(name)
    options = Options()
    options.parseOptions(["--store", "memory", "--listen", "tcp:0:interface=127.0.0.1"])
    service = makeService(options)
    children = list(service)
    assert [type(child) for child in children] == [StoreService, StreamServerEndpointService]
    assert isinstance(children[0].store, MemoryStateStore)


# -- twistd -n kilolock -------------------------------------------------------


def _unwrapped(text: str) -> str:
    """C{text} as one line: --help wraps its lines, at spaces and after hyphens."""
    return re.sub(r"-\s+", "-", " ".join(text.split()))


def test_twistd_kilolock_help_lists_the_options() -> None:
    """`twistd -n kilolock --help` exits 0 and lists every option of the
    table once, with its line (its KL_* variable and its default); the
    secrets read from the environment only are named; no test hook is."""
    from kilolock.server.settings import OPTIONS

    result = run_quickly([*TWISTD, "-n", "kilolock", "--help"])
    assert result.returncode == 0, result.stderr
    shown = _unwrapped(result.stdout)
    for option in OPTIONS:
        if option.long is None:
            assert f"{option.env} ({option.help})" in shown
            continue
        assert len(re.findall(rf"--{option.long}=", result.stdout)) == 1, option.long
        assert _unwrapped(option.help_line()) in shown, option.long
        assert f"[{option.env}" in option.help_line() and "default" in option.help_line()
    assert "-l, --listen=" in result.stdout
    assert "token-clock-file" not in shown and "operation-pause-file" not in shown


@pytest.mark.parametrize(("args", "message"), [
    (["--store", "bogus"], "--store must be one of memory, postgres"),
    (["--store", "memory", "--listen", "nonsense:1"], "Unknown endpoint type: 'nonsense'"),
    (["--store", "memory", "--listen", "tcp:8080:bogus=1"], "--listen"),
])
def test_twistd_kilolock_refuses_a_bad_option_with_a_usage_error(
        tmp_path: Path, args: list[str], message: str) -> None:
    """A bad --store or --listen value ends twistd with a usage error that
    names the problem, exit status 1, and no traceback."""
    result = run_quickly([*TWISTD, "--pidfile", str(tmp_path / "twistd.pid"), "-n",
                          "kilolock", *args], cwd=tmp_path)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert message in output
    assert "Traceback" not in output


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A short directory for UNIX socket paths (they are limited to ~100 bytes)."""
    with tempfile.TemporaryDirectory(prefix="kl-") as directory:
        yield Path(directory)


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: Path) -> None:
        super().__init__("localhost", timeout=30)
        self.socket_path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(str(self.socket_path))


def unix_request(path: Path, method: str, target: str,
                 body: bytes | None = None) -> tuple[int, bytes]:
    connection = UnixHTTPConnection(path)
    try:
        headers = {"Content-Type": "application/json", "Content-MD5": content_md5(body)} \
            if body is not None else {}
        connection.request(method, target, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_listen_takes_a_twisted_endpoint_string(tmp_path: Path, short_tmp: Path) -> None:
    """--listen takes any Twisted endpoint string: with unix:PATH the lane is
    served on a UNIX socket, and the option wins over KL_LISTEN."""
    chosen, ignored = short_tmp / "kl.sock", short_tmp / "env.sock"
    log_path = tmp_path / "server.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            server_command("--store", "memory", "--listen", f"unix:{chosen}"),
            env=clean_environment({"KL_LISTEN": f"unix:{ignored}"}), cwd=tmp_path,
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)
    try:
        def healthy() -> bool:
            if process.poll() is not None:
                raise AssertionError(f"the server exited:\n{log_path.read_text()}")
            try:
                return unix_request(chosen, "GET", "/healthz")[0] == 200
            except OSError:
                return False

        poll_until(healthy, 30, f"/healthz on {chosen}")
        body = state_body(7)
        assert unix_request(chosen, "POST", "/v1/states/over-unix", body) == (200, b"")
        assert unix_request(chosen, "GET", "/v1/states/over-unix") == (200, body)
        assert not ignored.exists()
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(15)


# -- twistd -ny kilolock.tac --------------------------------------------------


@pytest.fixture
def tac_server(tmp_path: Path) -> Iterator[KilolockServer]:
    """`twistd -ny kilolock.tac` from the repository root, configured by
    KL_STORE=memory and KL_LISTEN=tcp:0 on loopback (port read from its log)."""
    server = KilolockServer(
        [*TWISTD, "--pidfile", str(tmp_path / "twistd.pid"), "--logfile", "-",
         "-ny", "kilolock.tac"],
        clean_environment({"KL_STORE": "memory",
                           "KL_LISTEN": "tcp:0:interface=127.0.0.1"}),
        cwd=REPO, log_path=tmp_path / "tac.log")
    try:
        yield server.start()
    finally:
        server.stop()


def test_twistd_tac_serves_the_lane_over_a_socket(tac_server: KilolockServer) -> None:
    """The .tac application serves the HTTP lane: a state written over a
    socket reads back byte-for-byte; LOCK, a conflicting LOCK and UNLOCK behave."""
    assert tac_server.request("GET", "/healthz").status == 200
    roundtrip(tac_server, "from-tac")


def test_twistd_tac_stops_cleanly_on_sigterm(tac_server: KilolockServer) -> None:
    """SIGTERM shuts the .tac server down cleanly: the listener closes, the
    reactor stops, and twistd exits by the same signal (as Twisted >= 21.2
    does, so supervisors see why it ended)."""
    assert tac_server.stop() == -signal.SIGTERM
    log = tac_server.log_text()
    assert "Received SIGTERM, shutting down." in log
    assert "Main loop terminated." in log
    assert "Traceback" not in log


def test_twist_kilolock_serves_the_lane_over_a_socket(
        kilolock_server: KilolockServer) -> None:
    """`python -m twisted kilolock --store memory --listen tcp:0:...` (the
    fixture every wire test uses) serves the same lane."""
    roundtrip(kilolock_server, "from-plugin")


def test_every_package_of_the_tree_is_listed_for_installation() -> None:
    """setup.cfg names its packages one by one (``twisted.plugins`` is not a
    package ``find:`` could see); a package directory missing from the list
    would work from a checkout and be absent from a normal install."""
    import configparser

    config = configparser.ConfigParser()
    config.read(REPO / "setup.cfg")
    listed = set(config["options"]["packages"].split())
    present = {".".join(init.parent.relative_to(REPO).parts)
               for init in (REPO / "kilolock").rglob("__init__.py")}
    assert present - listed == set()
    assert listed - present == {"twisted.plugins"}
