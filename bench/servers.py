"""Start the servers a benchmark compares, as subprocesses on free ports."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

HERE = Path(__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_ready(port: int, path: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2):
                return
        except OSError as error:
            if getattr(error, "code", None) is not None:  # an HTTP answer: up
                return
            time.sleep(0.1)
    raise RuntimeError(f"server on port {port} did not come up")


@contextlib.contextmanager
def running(kind: str, extra: list[str] | None = None) -> Iterator[tuple[int, int]]:
    """Run one server: C{floor}, C{memory} or C{postgres} (Kilolock on its
    embedded PostgreSQL in a temporary data directory, unless C{extra} names
    a C{--database}).

    @return: (context value) the port and the server's pid.
    """
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="kilolock-bench-") as scratch:
        if kind == "floor":
            command = [sys.executable, str(HERE / "floor_server.py"), str(port)]
            ready_path = "/"
        else:
            twistd = str(Path(sys.executable).parent / "twistd")
            command = [twistd, "--logfile",
                       os.path.join(scratch, "twistd.log"), "-n", "kilolock",
                       "--listen", f"tcp:{port}:interface=127.0.0.1", "--store", kind]
            if kind == "postgres" and not extra:
                command += ["--data-dir", os.path.join(scratch, "data")]
            command += extra or []
            ready_path = "/healthz"
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, cwd=scratch)
        try:
            wait_ready(port, ready_path)
            if kind == "postgres":
                _wait_store(port)
            yield port, process.pid
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait_store(port: int, timeout: float = 60.0) -> None:
    """Until a GET of a missing state answers 404 (the store serves)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/states/warmup", timeout=5)
            return
        except OSError as error:
            if getattr(error, "code", None) == 404:
                return
            time.sleep(0.2)
    raise RuntimeError("the store did not become ready")


def peak_rss_bytes(pid: int) -> int:
    """The process's peak resident set size (VmHWM)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0
