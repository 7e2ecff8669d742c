"""Values carried out of tests.server.test_nginx_proxy."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

from attrs import frozen

from tests.support.fixtures_server import http_request, poll_until
from tests.support.paths import REPO
from tests.support.stub_client import Reply

NGINX_CONF = REPO / "docs" / "nginx.conf"


#: Seconds nginx may take to start answering.
NGINX_START_TIMEOUT = 20.0


#: Seconds one request of the large-state test may take.
LARGE_REQUEST_TIMEOUT = 120.0


def find_nginx() -> str | None:
    """The nginx binary (Debian installs it in /usr/sbin, not always on PATH)."""
    found = shutil.which("nginx")
    if found:
        return found
    for candidate in ("/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/local/nginx/sbin/nginx"):
        if os.access(candidate, os.X_OK):
            return candidate
    return None


NGINX = find_nginx()


NO_NGINX = ("nginx is not installed (Debian: apt-get install nginx-light; .ci/run installs it):"
            " the reverse-proxy tests need a real nginx")


@frozen
class NginxTls:
    """Turn on the commented-out TLS lines of docs/nginx.conf: this port,
    certificate and key."""

    port: int
    certificate: Path
    key: Path


def derive_config(source: str, upstream_port: int, listen_port: int, directory: Path,
                  tls: NginxTls | None = None) -> str:
    """docs/nginx.conf with the upstream and listening ports, the access log
    and the temporary-file paths moved into C{directory}, and with C{tls} its
    commented-out TLS lines turned on; nothing else changes."""
    temp_paths = "".join(f"\n    {kind}_temp_path {directory / kind};"
                         for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    replacements = [
        # One worker: fewer processes, and the order Nginx.accessed relies on.
        ("worker_processes auto;", "worker_processes 1;"),
        ("server 127.0.0.1:8080;", f"server 127.0.0.1:{upstream_port};"),
        ("listen 80;", f"listen 127.0.0.1:{listen_port};"),
        ("access_log /var/log/nginx/kilolock.access.log kilolock;",
         f"access_log {directory / 'access.log'} kilolock;{temp_paths}"),
    ]
    if tls is not None:
        replacements += [
            ("#     listen 443 ssl;", f"listen 127.0.0.1:{tls.port} ssl;"),
            ("#     ssl_certificate     /etc/ssl/kilolock/fullchain.pem;",
             f"ssl_certificate {tls.certificate};"),
            ("#     ssl_certificate_key /etc/ssl/kilolock/privkey.pem;",
             f"ssl_certificate_key {tls.key};"),
        ]
    for old, new in replacements:
        count = source.count(old)
        assert count == 1, (f"docs/nginx.conf must contain {old!r} exactly once (found {count}):"
                            " the test derives its configuration from those lines")
        source = source.replace(old, new)
    if os.geteuid() == 0:
        # A root master runs its workers as `nobody`, who cannot enter the
        # test's private temporary directory (where large responses spool).
        source = "user root;\n" + source
    return source


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


#: Makes an nginx configuration: (upstream port, listening port, directory, TLS).
ConfigMaker = Callable[[int, int, Path, "NginxTls | None"], str]


_ACCESS_LINE = re.compile(r'"(?P<method>[A-Z_-]+) (?P<target>\S+) HTTP/[\d.]+" (?P<status>\d{3}) ')


class Nginx:
    """One nginx process running the derived docs/nginx.conf in C{directory}."""

    def __init__(self, binary: str, upstream_port: int, directory: Path,
                 tls_files: tuple[Path, Path] | None = None,
                 body_limit: str | None = None,
                 config: ConfigMaker | None = None) -> None:
        """C{tls_files}: (certificate, key) to serve HTTPS too, on L{tls_port};
        C{body_limit}: another client_max_body_size than the shipped one
        (an edge with a small limit, e.g. C{10m}); C{config}: makes the
        configuration instead of L{derive_config} (same arguments, without
        the source)."""
        self.binary = binary
        self.body_limit = body_limit
        self.upstream_port = upstream_port
        self.directory = directory
        self.tls_files = tls_files
        self.config = config
        self.tls_port: int | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.port: int | None = None
        self._barriers = 0

    @property
    def error_log(self) -> Path:
        return self.directory / "error.log"

    @property
    def access_log(self) -> Path:
        return self.directory / "access.log"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def logs(self, lines: int = 40) -> str:
        """The last C{lines} lines of nginx's output and error log."""
        parts = []
        for path in (self.directory / "nginx.out", self.error_log):
            if path.exists():
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"--- {path.name} (last {lines} lines) ---\n" + "\n".join(tail))
        return "\n".join(parts)

    def start(self) -> Nginx:
        self.directory.mkdir(parents=True, exist_ok=True)
        # nginx cannot report an ephemeral port: pick a free one, and pick
        # again if someone else took it in between.
        for _attempt in range(5):
            self.port = free_port()
            tls = None
            if self.tls_files is not None:
                self.tls_port = free_port()
                tls = NginxTls(self.tls_port, *self.tls_files)
            config = self.directory / "nginx.conf"
            if self.config is not None:
                text = self.config(self.upstream_port, self.port, self.directory, tls)
            else:
                text = derive_config(NGINX_CONF.read_text(), self.upstream_port, self.port,
                                     self.directory, tls)
            if self.body_limit is not None:
                assert text.count("client_max_body_size 256m;") == 1
                text = text.replace("client_max_body_size 256m;",
                                    f"client_max_body_size {self.body_limit};")
            config.write_text(text)
            globals_ = (f"daemon off; pid {self.directory / 'nginx.pid'};"
                        f" error_log {self.error_log} info;")
            with (self.directory / "nginx.out").open("wb") as out:
                self.process = subprocess.Popen(
                    [self.binary, "-p", str(self.directory), "-c", str(config), "-g", globals_],
                    stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                    start_new_session=True)
            try:
                poll_until(self._answering, NGINX_START_TIMEOUT, "nginx to answer /healthz")
                return self
            except _PortTaken:
                continue
            except AssertionError as error:
                self.stop()
                raise AssertionError(f"{error}\n{self.logs()}") from None
        raise AssertionError(f"nginx found no free port\n{self.logs()}")

    def _answering(self) -> bool:
        assert self.process is not None and self.port is not None
        if self.process.poll() is not None:
            if "Address already in use" in self.logs(lines=1000):
                raise _PortTaken()
            raise AssertionError(f"nginx exited with {self.process.returncode}")
        try:
            reply = http_request(self.port, "GET", "/healthz", timeout=2.0)
        except OSError:
            return False
        return reply.status == 200 and (reply.header(b"server") or b"").startswith(b"nginx")

    def stop(self) -> None:
        process = self.process
        if process is None or process.poll() is not None:
            return
        for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                return
            try:
                process.wait(grace)
                return
            except subprocess.TimeoutExpired:
                continue

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: Mapping[str, str] | None = None, timeout: float = 30.0) -> Reply:
        assert self.port is not None
        return http_request(self.port, method, path, body, headers, timeout)

    def _logged(self) -> list[tuple[str, str, int]]:
        entries = []
        for line in self.access_log.read_text(errors="replace").splitlines():
            match = _ACCESS_LINE.search(line)
            assert match, f"unexpected access log line: {line!r}"
            entries.append((match["method"], match["target"], int(match["status"])))
        return entries

    def accessed(self, path: str | None = None) -> list[tuple[str, str, int]]:
        """(method, target, status) of every request nginx logged, of C{path}
        (without its query string) only when given.

        nginx writes a request's log line just after its answer, so a client
        can read the answer before the line exists.  A barrier request
        settles that: the one worker (the derived configuration has one)
        handles it only after it has finished, and logged, every earlier
        answer."""
        self._barriers += 1
        barrier = f"/healthz?log-barrier={self._barriers}"
        assert self.request("GET", barrier, timeout=10).status == 200
        poll_until(lambda: ("GET", barrier, 200) in self._logged(), 10.0,
                   "nginx to log the barrier request")
        return [entry for entry in self._logged()
                if "log-barrier=" not in entry[1]
                and (path is None or entry[1].split("?", 1)[0] == path)]


class _PortTaken(Exception):
    """nginx could not bind the port picked for it."""


NginxFactory = Callable[..., Nginx]


def big_state(target_bytes: int, serial: int = 1) -> bytes:
    """A valid, pretty-printed v4 state of at least C{target_bytes} bytes
    (terraform_data resources with 1.5 kB attributes), built as text."""
    head = json.dumps({"version": 4, "terraform_version": "1.15.5", "serial": serial,
                       "lineage": "5f0c6a8e-1d2b-4c3d-9e8f-100000000000", "outputs": {}},
                      indent=2)
    filler = "x" * 1500
    template = "    " + json.dumps({
        "mode": "managed", "type": "terraform_data", "name": "NAME",
        "provider": 'provider["terraform.io/builtin/terraform"]',
        "instances": [{"schema_version": 0, "sensitive_attributes": [],
                       "attributes": {"id": "NAME", "input": filler, "output": filler,
                                      "triggers_replace": None}}],
    }, indent=2).replace("\n", "\n    ")
    resources, size = [], len(head)
    while size < target_bytes:
        resource = template.replace("NAME", f"r{len(resources):06d}")
        resources.append(resource)
        size += len(resource) + 2
    text = (head[:-2] + ',\n  "resources": [\n' + ",\n".join(resources)
            + '\n  ],\n  "check_results": null\n}\n')
    return text.encode()
