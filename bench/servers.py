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

from kilolock.store.postgres.embedded import EmbeddedPostgres

HERE = Path(__file__).resolve().parent

#: Kilolock on PostgreSQL with encryption at rest (a key file of its own).
ENCRYPTED = "postgres-encrypted"
#: Kilolock on PostgreSQL run from another source tree (KL_BENCH_BASELINE_TREE,
#: e.g. C{git archive main | tar -x -C DIR}; put first on PYTHONPATH): the code
#: before a change, measured in the same run as the change.
BASELINE = "postgres-baseline"
BASELINE_TREE = os.environ.get("KL_BENCH_BASELINE_TREE", "")
_KEY_FILES: list[str] = []
#: The stack floors (bench/stack_floor.py), by their driver.
STACK_FLOORS = {"stack": "txpostgres", "stack-pg3": "pg3"}


def encryption_args() -> list[str]:
    """C{--encryption-keys FILE}: a key file with one random key, made once
    per benchmark run (removed when it ends)."""
    if not _KEY_FILES:
        import atexit
        import base64

        handle, path = tempfile.mkstemp(prefix="kilolock-bench-keys-", suffix=".toml")
        with os.fdopen(handle, "w") as keys:
            keys.write(f'active = "bench"\n[[keys]]\nid = "bench"\n'
                       f'secret = "{base64.b64encode(os.urandom(32)).decode()}"\n')
        atexit.register(os.unlink, path)
        _KEY_FILES.append(path)
    return ["--encryption-keys", _KEY_FILES[0]]


def store_and_args(kind: str, extra: list[str] | None) -> tuple[str, list[str]]:
    """The --store of a server kind, and its extra arguments."""
    if kind == ENCRYPTED:
        return "postgres", [*(extra or []), *encryption_args()]
    if kind == BASELINE:
        if not BASELINE_TREE:
            raise SystemExit(f"{BASELINE} needs KL_BENCH_BASELINE_TREE (a source tree)")
        return "postgres", list(extra or [])
    return kind, list(extra or [])


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
def postgres_cluster() -> Iterator[EmbeddedPostgres]:
    """An embedded PostgreSQL of its own (default configuration: fsync and
    synchronous_commit on), in a temporary directory; stopped afterwards."""
    with tempfile.TemporaryDirectory(prefix="kilolock-bench-pg-") as scratch:
        cluster = EmbeddedPostgres(os.path.join(scratch, "data"))
        cluster.start_blocking()
        try:
            yield cluster
        finally:
            cluster.stop_blocking()


def new_database(cluster: EmbeddedPostgres, name: str) -> str:
    """A new empty database C{name} in C{cluster}; its DSN."""
    import psycopg

    with psycopg.connect(cluster.dsn("postgres"), autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        connection.execute(f'CREATE DATABASE "{name}"')
    return cluster.dsn(name)


def cluster_pids(cluster: EmbeddedPostgres) -> list[int]:
    """The postmaster of C{cluster} and its children (backends included)."""
    postmaster = int((cluster.pgdata / "postmaster.pid").read_text().split()[0])
    children = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        if parent == postmaster:
            children.append(int(entry.name))
    return [postmaster, *children]


def cluster_cpu(cluster: EmbeddedPostgres) -> float:
    """CPU seconds (user + system) that C{cluster} has spent so far: its
    postmaster's own and its waited-for children's, and its live children's
    (so backends that ended in between are counted too)."""
    pids = cluster_pids(cluster)
    total = 0
    for index, pid in enumerate(pids):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
        if index == 0:
            total += int(fields[13]) + int(fields[14])
    return total / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def running_many(kind: str, count: int, extra: list[str]) -> Iterator[list[tuple[int, int]]]:
    """C{count} servers of C{kind} at once (e.g. Kilolock processes on one
    PostgreSQL: C{extra} names the C{--database}); their (port, pid) pairs."""
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(running(kind, extra)) for _ in range(count)]


#: Where terraform-state-server (a Node peer: one JSONB row, one state) is
#: checked out with its node_modules, for the write-cycle benchmark.
TSS_DIRECTORY = os.environ.get("KL_BENCH_TSS_DIR", "")


@contextlib.contextmanager
def running_tss(dsn: str) -> Iterator[tuple[int, int]]:
    """terraform-state-server on C{dsn} (a libpq keyword DSN of a unix
    socket), logging to a file like Kilolock; (port, pid)."""
    from psycopg2.extensions import parse_dsn

    if not TSS_DIRECTORY:
        raise RuntimeError("set KL_BENCH_TSS_DIR to a terraform-state-server checkout")
    params = parse_dsn(dsn)
    url = (f"postgresql://{params['user']}@/{params['dbname']}?host={params['host']}"
           f"&port={params.get('port', 5432)}")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="kilolock-bench-tss-") as scratch, \
            open(os.path.join(scratch, "tss.log"), "wb") as log:
        process = subprocess.Popen(["node", "-r", "babel-register", "."], cwd=TSS_DIRECTORY,
                                   env={**os.environ, "DATABASE_URL": url, "PORT": str(port)},
                                   stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_ready(port, "/ping")
            yield port, process.pid
        finally:
            process.terminate()
            process.wait(timeout=30)


@contextlib.contextmanager
def running(kind: str, extra: list[str] | None = None) -> Iterator[tuple[int, int]]:
    """Run one server: C{floor}, a stack floor (L{STACK_FLOORS}: C{extra}
    names the DSN first), C{memory}, C{postgres} (Kilolock on its
    embedded PostgreSQL in a temporary data directory, unless C{extra} names
    a C{--database}) or L{ENCRYPTED} (the same, encrypting versions).

    @return: (context value) the port and the server's pid.
    """
    port = free_port()
    environment = ({**os.environ, "PYTHONPATH": BASELINE_TREE} if kind == BASELINE
                   else None)
    kind, extra = store_and_args(kind, extra)
    with tempfile.TemporaryDirectory(prefix="kilolock-bench-") as scratch:
        if kind == "floor":
            command = [sys.executable, str(HERE / "floor_server.py"), str(port)]
            ready_path = "/"
        elif kind in STACK_FLOORS:
            # extra: the database's DSN, then the stack floor's own options.
            command = [sys.executable, str(HERE / "stack_floor.py"), str(port), *extra,
                       "--driver", STACK_FLOORS[kind]]
            ready_path = "/"
        else:
            twistd = str(Path(sys.executable).parent / "twistd")
            command = [twistd, "--logfile",
                       os.path.join(scratch, "twistd.log"), "-n", "kilolock",
                       "--listen", f"tcp:{port}:interface=127.0.0.1", "--store", kind]
            if kind == "postgres" and "--database" not in extra:
                command += ["--data-dir", os.path.join(scratch, "data")]
            command += extra or []
            ready_path = "/healthz"
        # A stack floor's errors (it has no log file) go to the benchmark's.
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL,
                                   stderr=None if kind in STACK_FLOORS else subprocess.DEVNULL,
                                   cwd=scratch, env=environment)
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
