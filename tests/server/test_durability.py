"""Durability and multi-process behaviour of Kilolock servers on PostgreSQL,
over real sockets:

  - a Kilolock process killed with -9 during a stream of large writes loses
    no acknowledged write and leaves no partial version;
  - PostgreSQL restarted under traffic: 503 with Retry-After while it is
    down, service resumes by itself, Kilolock is never restarted;
  - two Kilolock processes on one database share their locks.

Every wait is bounded; servers are subprocesses (see fixtures_server).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import psycopg2
import pytest
from attrs import define, field

from kilolock.atrest.compression import Base, Codec, decompress_version
from tests.support.fixtures_server import (
    DEFAULT_LISTEN,
    KilolockServer,
    clean_environment,
    poll_until,
    server_command,
)
from tests.support.stub_client import Reply, content_md5, lock_body, terraform_headers
from tests.support.tcp_table import unread_bytes

pytestmark = pytest.mark.postgres

PROVIDER = 'provider["registry.terraform.io/hashicorp/aws"]'


def large_state(serial: int, megabytes: float, lineage: str) -> bytes:
    """A v4 state of about C{megabytes} MB (2 KB resources), Terraform-shaped."""
    count = max(1, int(megabytes * 1e6 / 2000))
    filler = "y" * 1500
    doc = {
        "version": 4, "terraform_version": "1.15.5", "serial": serial, "lineage": lineage,
        "outputs": {"count": {"value": count, "type": "number"}},
        "resources": [{
            "module": f"module.shard_{index % 20}", "mode": "managed", "type": "aws_instance",
            "name": f"node_{index}", "provider": PROVIDER,
            "instances": [{
                "schema_version": 1,
                "attributes": {"id": f"i-{serial:04d}{index:08x}", "user_data": filler,
                               "tags": {"Name": f"node-{index}", "serial": str(serial)}},
                "sensitive_attributes": [],
            }],
        } for index in range(count)],
        "check_results": None,
    }
    return json.dumps(doc, indent=2).encode() + b"\n"


def small_state(serial: int, lineage: str) -> bytes:
    return json.dumps({"version": 4, "terraform_version": "1.15.5", "serial": serial,
                       "lineage": lineage, "outputs": {}, "resources": [],
                       "check_results": None}, indent=2).encode() + b"\n"


def start_server(request: pytest.FixtureRequest, tmp_path: Path, name: str,
                 database: str) -> KilolockServer:
    """A Kilolock on the PostgreSQL store at C{database}; stopped after the
    test, its log attached to a failure report."""
    directory = tmp_path / name
    server = KilolockServer(
        server_command("--listen", DEFAULT_LISTEN, "--store", "postgres",
                       "--database", database),
        clean_environment(), cwd=directory, log_path=directory / "server.log")
    request.node.__dict__.setdefault("kilolock_servers", []).append(server)
    request.addfinalizer(server.stop)
    return server.start()


def kill_9(server: KilolockServer) -> None:
    """SIGKILL the server's process group and reap it."""
    assert server.process is not None
    os.killpg(server.process.pid, signal.SIGKILL)
    server.process.wait(10)
    assert server.process.returncode == -signal.SIGKILL


def assert_clean_log(server: KilolockServer) -> None:
    """No traceback, no unhandled error, no 500 in a server's log."""
    text = server.log_text()
    for needle in ("Traceback", "Unhandled", '" 500 ', "status=500"):
        assert needle not in text, f"{needle!r} in the server log:\n{text[-4000:]}"


# -- a. kill -9 during a stream of large writes ------------------------------


@define
class Sent:
    """One POST of the stream."""

    serial: int
    body: bytes
    status: int | None = None  # None: no answer (the server died)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.body).hexdigest()


@define
class WriteStream:
    """A client thread POSTing large states with increasing serials to one
    server until it has no answer; C{in_flight} is set once a request's body
    is fully sent (the server is then working on it)."""

    server: KilolockServer
    path: str
    bodies: Iterator[Sent]
    sent: list[Sent] = field(factory=list)
    in_flight: threading.Event = field(factory=threading.Event)
    finished: threading.Event = field(factory=threading.Event)
    client_port: int | None = None  # of the connection in flight

    @property
    def acknowledged(self) -> int:
        return sum(item.status == 200 for item in self.sent)

    def upload_read(self) -> bool:
        """Whether a request is in flight and the server has read its whole
        body: nothing of it waits in either end's socket queue."""
        port = self.client_port
        return (self.in_flight.is_set() and port is not None
                and unread_bytes(self.server.port, port) == 0)

    def run(self) -> None:
        import http.client

        try:
            for item in self.bodies:
                self.sent.append(item)
                connection = http.client.HTTPConnection("127.0.0.1", self.server.port,
                                                        timeout=60)
                try:
                    connection.request("POST", self.path, body=item.body, headers={
                        "Content-Type": "application/json",
                        "Content-MD5": content_md5(item.body)})
                    assert connection.sock is not None
                    self.client_port = connection.sock.getsockname()[1]
                    self.in_flight.set()
                    response = connection.getresponse()
                    response.read()
                    item.status = response.status
                except OSError:
                    return  # the server is gone
                finally:
                    self.in_flight.clear()
                    connection.close()
                if item.status != 200:
                    return
        finally:
            self.finished.set()


def stored_versions(dsn: str, path: str) -> list[dict[str, Any]]:
    """Every stored version of C{path} read straight from PostgreSQL, with
    its projection row count and its audit event count."""
    connection = psycopg2.connect(dsn, connect_timeout=10)
    try:
        with connection, connection.cursor() as cursor:
            cursor.execute(
                "SELECT v.id, v.number, v.serial, v.sha256, v.size, v.codec, v.payload,"
                " v.base_number, v.resource_count,"
                " (SELECT count(*) FROM events e WHERE e.tenant_id = s.tenant_id"
                "  AND e.state_path = s.path AND e.kind = 'state_write'"
                "  AND coalesce(e.sha256, encode(e.sha256_bytes, 'hex')) = v.sha256)"
                " FROM state_versions v JOIN states s ON s.id = v.state_id"
                " WHERE s.tenant_id = 'default' AND s.path = %s ORDER BY v.number", (path,))
            rows = cursor.fetchall()
            # A state's projection rows are its current version's (a row's
            # version_id may name an older version with identical rows).
            cursor.execute("SELECT count(*) FROM resources r JOIN states s ON s.id = r.state_id"
                           " WHERE s.tenant_id = 'default' AND s.path = %s", (path,))
            (state_rows,) = cursor.fetchone()
    finally:
        connection.close()
    # Oldest first: a delta's base (an earlier version) is decoded before it.
    decoded: dict[int, Base] = {}
    versions = []
    for index, (id_, number, serial, sha256, size, codec, payload, base_number,
                resource_count, events) in enumerate(rows):
        base = None if base_number is None else decoded[base_number]
        raw = decompress_version(Codec(codec), bytes(payload), size, sha256, base)
        decoded[number] = Base(raw, sha256)
        versions.append({"id": id_, "number": number, "serial": serial, "sha256": sha256,
                         "size": size, "raw": raw, "resource_count": resource_count,
                         "events": events,
                         "projected_rows": state_rows if index == len(rows) - 1 else None})
    return versions


#: What a Kilolock session runs in the middle of a write: on the pool (states
#: under 8 MB) the statement that inserts the version and its projection (a
#: prepared statement, or its text when preparing is off); on
#: the blocking path (larger states) the COPY of the version or its rows.
POOL_WRITE = ("%kl_write_state(%", "%EXECUTE kl_write_state_sql%")
COPY_WRITE = ("COPY state_versions%", "COPY resources%")


def wait_for_backend_in_write(dsn: str, timeout: float, patterns: tuple[str, ...]) -> bool:
    """Until a Kilolock session runs a statement matching one of
    C{patterns} (so a kill now lands inside the transaction)."""
    connection = psycopg2.connect(dsn, connect_timeout=10)
    connection.autocommit = True
    try:
        with connection.cursor() as cursor:
            def busy() -> bool:
                cursor.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'kilolock'"
                    " AND datname = current_database() AND state = 'active'"
                    " AND query LIKE ANY (%s)", (list(patterns),))
                (count,) = cursor.fetchone()
                return bool(count)

            try:
                poll_until(busy, timeout, "a write inside PostgreSQL", interval=0.005)
            except AssertionError:
                return False
            return True
    finally:
        connection.close()


def test_kill_9_during_large_writes_loses_no_acknowledged_write(
        request: pytest.FixtureRequest, tmp_path: Path, postgres_dsn: str) -> None:
    """Kilolock killed with -9 three times while writing 5-20 MB states (while
    the body is being processed, inside a pool transaction, inside a COPY on
    the large-state path): after a restart every acknowledged version is
    stored byte-exact, every stored version is complete (sha256, size,
    projection rows, audit event), and the new process serves the latest
    version and accepts the next write."""
    path = "/v1/states/durable"
    lineage = str(uuid.uuid4())
    sizes = [5, 12, 20, 8, 16]
    serials = iter(range(1, 1000))
    bodies = (Sent(serial, large_state(serial, sizes[serial % len(sizes)], lineage))
              for serial in serials)
    all_sent: list[Sent] = []
    kill_points = ("after the upload", POOL_WRITE, COPY_WRITE)

    for round_index, kill_point in enumerate(kill_points):
        server = start_server(request, tmp_path, f"kilolock-{round_index}", postgres_dsn)
        stream = WriteStream(server, path, bodies)
        client = threading.Thread(target=stream.run, name=f"writer-{round_index}", daemon=True)
        client.start()
        # Let a few writes be acknowledged, then kill during the next one.
        poll_until(lambda stream=stream: stream.acknowledged >= 2, 60,
                   "two acknowledged writes")
        poll_until(stream.in_flight.is_set, 30, "a write in flight")
        if isinstance(kill_point, tuple):
            assert wait_for_backend_in_write(postgres_dsn, 30, kill_point), \
                f"no write ran {kill_point} in PostgreSQL"
        else:
            poll_until(stream.upload_read, 30, "the server to read a whole upload",
                       interval=0.005)
        kill_9(server)
        assert stream.finished.wait(30), "the client thread did not notice the kill"
        all_sent.extend(stream.sent)
        assert stream.sent[-1].status is None, "the kill landed between writes"

    survivor = start_server(request, tmp_path, "kilolock-after", postgres_dsn)
    versions = stored_versions(postgres_dsn, "durable")
    by_sha = {item.sha256: item for item in all_sent}

    # No partial version: each stored version is a complete, sent body.
    for version in versions:
        raw = version["raw"]
        assert hashlib.sha256(raw).hexdigest() == version["sha256"]
        assert len(raw) == version["size"]
        assert version["sha256"] in by_sha, f"version {version['number']} was never sent"
        assert raw == by_sha[version["sha256"]].body
        assert version["serial"] == by_sha[version["sha256"]].serial
        assert version["events"] == 1  # the audit event committed with it
    # Only the current version keeps projection rows: all of them are there.
    current = versions[-1]
    assert current["projected_rows"] == current["resource_count"] > 0

    # Every acknowledged write is stored, in order.
    acknowledged = [item.sha256 for item in all_sent if item.status == 200]
    stored = [version["sha256"] for version in versions]
    assert acknowledged, "nothing was acknowledged"
    assert [sha for sha in stored if sha in acknowledged] == acknowledged
    # Unacknowledged writes (the two killed ones) may or may not have committed.
    assert len(stored) - len(acknowledged) <= len(kill_points)
    assert [version["number"] for version in versions] == list(range(1, len(versions) + 1))

    # The new process serves the latest version and takes the next write.
    latest = survivor.request("GET", path)
    assert latest.status == 200
    assert latest.body == current["raw"]
    next_body = small_state(max(item.serial for item in all_sent) + 1, lineage)
    assert survivor.with_body("POST", path, next_body).status == 200
    assert survivor.request("GET", path).body == next_body
    assert_clean_log(survivor)


# -- b. PostgreSQL restarted under traffic ------------------------------------

#: Seconds any one answer may take, outage included.
ANSWER_BOUND = 10.0
#: Seconds after PostgreSQL is back within which every client is served again.
RECOVERY_BOUND = 20.0
#: Seconds PostgreSQL stays down: long enough for the pool's reconnection
#: backoff to grow to its longest pause.
OUTAGE = 4.0


@define
class Answer:
    """One request of the traffic: when it was sent and what came back."""

    client: int
    method: str
    sent_at: float
    answered_at: float
    status: int | None  # None: no answer (an error or a timeout)
    retry_after: bytes | None = None
    error: str | None = None


@define
class Traffic:
    """Client threads each cycling LOCK -> POST ?ID= -> GET -> UNLOCK on a
    state of their own, recording every answer; a step is repeated until it
    gets a 200 (its lock ID and body are kept until then, so a retried step
    is an idempotent replay)."""

    server: KilolockServer
    clients: int
    answers: list[Answer] = field(factory=list)
    stop: threading.Event = field(factory=threading.Event)
    mutex: threading.Lock = field(factory=threading.Lock)
    bodies: dict[int, bytes] = field(factory=dict)
    threads: list[threading.Thread] = field(factory=list)

    def start(self) -> Traffic:
        for index in range(self.clients):
            thread = threading.Thread(target=self._run, args=(index,), daemon=True,
                                      name=f"traffic-{index}")
            thread.start()
            self.threads.append(thread)
        return self

    def finish(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(ANSWER_BOUND * 2)
            assert not thread.is_alive(), f"{thread.name} hangs"

    def _call(self, index: int, method: str, path: str, body: bytes | None) -> Reply | None:
        sent_at = time.monotonic()
        reply: Reply | None = None
        error: str | None = None
        headers = {} if body is None else terraform_headers(body)
        try:
            reply = self.server.request(method, path, body, headers, timeout=ANSWER_BOUND)
        except OSError as exc:
            error = f"{type(exc).__name__}: {exc}"
        answer = Answer(index, method, sent_at, time.monotonic(),
                        None if reply is None else reply.status,
                        None if reply is None else reply.header(b"Retry-After"), error)
        with self.mutex:
            self.answers.append(answer)
        return reply

    def _step(self, index: int, method: str, path: str, body: bytes | None) -> bool:
        """Send until a 200 or the end of the traffic.  @return: got a 200."""
        while not self.stop.is_set():
            reply = self._call(index, method, path, body)
            if reply is not None and reply.status == 200:
                return True
            self.stop.wait(0.05)  # a client's pause before it retries
        return False

    def _run(self, index: int) -> None:
        name = f"traffic-{index}"
        lineage = str(uuid.uuid4())
        serial = 1
        while not self.stop.is_set():
            info = lock_body(str(uuid.uuid4()))
            lock_id = json.loads(info)["ID"]
            body = small_state(serial, lineage)
            steps = (("LOCK", f"/v1/states/{name}", info),
                     ("POST", f"/v1/states/{name}?ID={lock_id}", body),
                     ("GET", f"/v1/states/{name}", None),
                     ("UNLOCK", f"/v1/states/{name}", info))
            for method, path, payload in steps:
                if not self._step(index, method, path, payload):
                    return
                if method == "POST":
                    with self.mutex:
                        self.bodies[index] = body
            serial += 1

    def between(self, start: float, end: float) -> list[Answer]:
        """The answers to requests sent and answered within [start, end]."""
        with self.mutex:
            return [a for a in self.answers if a.sent_at >= start and a.answered_at <= end]

    def everyone_served_after(self, moment: float,
                              method: str | None = None) -> dict[int, float] | None:
        """L{first_200_after}, once every client has one."""
        firsts = self.first_200_after(moment, method)
        return firsts if len(firsts) == self.clients else None

    def first_200_after(self, moment: float, method: str | None = None) -> dict[int, float]:
        """For each client, when its first request (of C{method}, if given)
        sent after C{moment} got a 200."""
        firsts: dict[int, float] = {}
        with self.mutex:
            for answer in self.answers:
                if (answer.sent_at >= moment and answer.status == 200
                        and (method is None or answer.method == method)):
                    firsts[answer.client] = min(firsts.get(answer.client, answer.answered_at),
                                                answer.answered_at)
        return firsts


def stop_postmaster(cluster: Any, sig: signal.Signals) -> None:
    """Stop the cluster's server with C{sig} (SIGINT: pg_ctl's fast shutdown;
    SIGQUIT: immediate, crash recovery on the next start) and wait for it."""
    pid = int((cluster.pgdata / "postmaster.pid").read_text().split()[0])
    postmaster = psutil.Process(pid)
    os.kill(pid, sig)
    postmaster.wait(30)


@pytest.mark.parametrize("shutdown", [signal.SIGINT, signal.SIGQUIT], ids=["fast", "immediate"])
def test_postgres_restart_under_traffic_gives_503_then_recovers(
        request: pytest.FixtureRequest, tmp_path: Path, private_cluster: Any,
        shutdown: signal.Signals) -> None:
    """PostgreSQL stopped (fast or immediate shutdown) under LOCK/POST/GET/UNLOCK
    traffic: while it is down every answer is a 503 with Retry-After 5 (none
    waits out the store's deadline); once it is back every client reads and
    writes again within a bound, by the same Kilolock process, whose log has
    no traceback and no 500."""
    dsn = private_cluster.start_blocking()
    server = start_server(request, tmp_path, "kilolock", dsn)
    traffic = Traffic(server, clients=4).start()
    try:
        first = poll_until(lambda: traffic.everyone_served_after(0.0), 30,
                           "every client served before the outage")
        poll_until(lambda: traffic.everyone_served_after(max(first.values())), 30,
                   "every client served a second time before the outage")

        stop_postmaster(private_cluster, shutdown)
        down_at = time.monotonic()
        # The fault lasts OUTAGE seconds and until 20 requests were answered in it.
        poll_until(lambda: time.monotonic() - down_at >= OUTAGE
                   and len(traffic.between(down_at, time.monotonic())) >= 20,
                   OUTAGE + 30, "20 answers during the outage")
        back_at = time.monotonic()
        private_cluster.start_blocking()
        up_at = time.monotonic()

        poll_until(lambda: traffic.everyone_served_after(up_at), RECOVERY_BOUND,
                   "every client to be served after the restart")
        poll_until(lambda: traffic.everyone_served_after(up_at, method="POST"), RECOVERY_BOUND,
                   "every client to write after the restart")
    finally:
        traffic.finish()

    assert server.process is not None and server.process.poll() is None, "Kilolock died"
    answers = list(traffic.answers)
    # Every request was answered before the client's timeout (ANSWER_BOUND),
    # so no answer waited out the store's deadline (60 s).
    assert all(a.status is not None for a in answers), \
        [a for a in answers if a.status is None][:3]
    assert {a.status for a in answers} == {200, 503}

    outage = traffic.between(down_at, back_at)
    assert len(outage) >= 20, f"only {len(outage)} requests during the outage"
    assert {a.status for a in outage} == {503}
    assert {a.retry_after for a in outage} == {b"5"}  # the store's RETRY_AFTER
    assert "the state database stopped answering" in server.log_text()

    for index, body in traffic.bodies.items():
        assert server.request("GET", f"/v1/states/traffic-{index}").body == body
    assert_clean_log(server)


# -- c. two Kilolock processes on one database ---------------------------------


def test_two_processes_share_locks(request: pytest.FixtureRequest, tmp_path: Path,
                                   postgres_dsn: str) -> None:
    """Twenty concurrent LOCKs with different IDs split across two processes:
    exactly one 200, nineteen 423 carrying the winner's LockInfo bytes; the
    lock then holds through the other process too."""
    first = start_server(request, tmp_path, "kilolock-a", postgres_dsn)
    second = start_server(request, tmp_path, "kilolock-b", postgres_dsn)
    servers = (first, second)
    path = "/v1/states/contended"
    infos = [lock_body(str(uuid.uuid4()), who=f"client-{index}@host") for index in range(20)]
    replies: list[Reply | None] = [None] * 20
    barrier = threading.Barrier(20, timeout=30)

    def take(index: int) -> None:
        barrier.wait()
        replies[index] = servers[index % 2].with_body("LOCK", path, infos[index])

    threads = [threading.Thread(target=take, args=(index,), daemon=True) for index in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
        assert not thread.is_alive()

    statuses = [reply.status for reply in replies if reply is not None]
    assert len(statuses) == 20
    assert sorted(statuses) == [200] + [423] * 19
    winner = next(index for index, reply in enumerate(replies)
                  if reply is not None and reply.status == 200)
    for index, reply in enumerate(replies):
        if index != winner:
            assert reply is not None and reply.body == infos[winner]

    # The lock holds through the process that did not take it.
    other = servers[(winner + 1) % 2]
    refused = other.with_body("POST", path, small_state(1, str(uuid.uuid4())))
    assert (refused.status, refused.body) == (423, infos[winner])
    lock_id = json.loads(infos[winner])["ID"]
    body = small_state(1, str(uuid.uuid4()))
    assert other.with_body("POST", f"{path}?ID={lock_id}", body).status == 200
    assert servers[winner % 2].request("GET", path).body == body
    assert other.with_body("UNLOCK", path, infos[winner]).status == 200
    assert servers[winner % 2].with_body("LOCK", path, infos[0]).status == 200
    for server in servers:
        assert_clean_log(server)
