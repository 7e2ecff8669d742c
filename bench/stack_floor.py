"""The stack floor: the fastest write cycle any server on Kilolock's stack
(twisted.web and a PostgreSQL driver on the reactor) can answer.

A minimal twisted.web server, in the style of the framework floor
(C{floor_server.py}), that per request reads the body and then does only
the database round trip Kilolock's design needs, the statement Kilolock's
PostgreSQL store sends, with the parameters Kilolock's own code makes:

  - LOCK: C{EXECUTE kl_lock_sql(...)} (the lock row and its audit event);
  - POST: C{EXECUTE kl_write_state_sql(...)} (the state row locked, the
    version's zstd delta, the projection left alone where its digests are
    unchanged, the event);
  - UNLOCK: C{EXECUTE kl_unlock_sql(...)} (the lock row gone, its event).

Everything else Kilolock does per request is left out: no routing (the
method decides), no authentication, no access log, no parsing or hashing
of the body, no compression, no event hash templates.  The parameters of
every cycle are made before the server listens, by Kilolock's own
transaction code (L{PostgresStates}) talking to a recording cursor: one
state (the request's path is ignored), a lock ID of the server's own per
cycle, serials 1, 2, 3 ...  The database therefore does exactly Kilolock's
work, and its rows are Kilolock's (the audit chain verifies).

Two drivers, one connection each, no pool and no transaction runner:

  - C{txpostgres}: Kilolock's own (txpostgres over an asynchronous
    psycopg2 connection, the statements prepared with SQL C{PREPARE} and
    run as C{EXECUTE} with psycopg2's interpolation, as Kilolock runs them);
  - C{pg3}: psycopg 3's libpq connection in non-blocking mode driven by a
    reader of its own (L{driver_path.Psycopg3Session}), the statements
    prepared by the protocol and their parameters sent already encoded.

Whatever Kilolock adds to this only costs more, so this server's rate is
an upper bound for Kilolock on twisted.web and that driver.  One client at
a time (one connection; the cycle's requests in order).  A GET answers the
number of cycles completed (C{{"cycles": N}}).

    python bench/stack_floor.py PORT DSN [--driver txpostgres|pg3] [--cycles N]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import uuid
from collections.abc import Coroutine, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from attrs import evolve
from psycopg.pq import ExecStatus
from psycopg2.extensions import register_type
from twisted.internet import reactor as global_reactor
from twisted.internet.defer import Deferred
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Site
from txpostgres import txpostgres

sys.path.insert(0, str(Path(__file__).resolve().parent))

from driver_path import Psycopg3Session

from kilolock.atrest.envelope import VersionIdentity
from kilolock.atrest.stored import StoredPayload, encode_version
from kilolock.core.events import LOCK_RELEASE, STATE_WRITE
from kilolock.core.model import LockInfo, ParsedState, Principal, StateKey, StateUpload
from kilolock.store.postgres import statements
from kilolock.store.postgres.codecs import SQLLiteral, WriteParameters
from kilolock.store.postgres.connection import BYTEA_AS_HEX
from kilolock.store.postgres.dsn import connection_string
from kilolock.store.postgres.prepared import PreparedSQL, prepare_statements_sql
from kilolock.store.postgres.states import PostgresStates
from kilolock.store.schema.upgrade import ensure_schema_blocking
from kilolock.tfstate.parse import parse_state

STATEMENTS = (statements.LOCK, statements.WRITE_STATE, statements.UNLOCK)
#: What each statement's first column must say for the step to have happened.
DONE = (True, "written", True)
KEY = StateKey("default", "stack")
PRINCIPAL = Principal(tenant="default", name="anonymous", address="127.0.0.1")

#: One step: (the prepared statement, its arguments in order).
Step = tuple[PreparedSQL, list[Any]]


class _Recorder:
    """A cursor that records what a transaction sends and answers C{row}."""

    def __init__(self, row: tuple[Any, ...]) -> None:
        self.row = row
        self.sent: list[tuple[Any, Any]] = []

    async def execute(self, query: Any, params: Any = None, *, commit: bool = False) -> None:
        self.sent.append((query, params))

    def fetchone(self) -> tuple[Any, ...]:
        return self.row

    def fetchall(self) -> list[tuple[Any, ...]]:
        return [self.row]


def _recorded(transaction: Coroutine[Any, Any, Any], recorder: _Recorder) -> Step:
    """Run C{transaction} (which awaits nothing but C{recorder}) to its end;
    the one statement it sent, as a prepared statement and its arguments."""
    try:
        transaction.send(None)
    except StopIteration:
        pass
    else:
        raise RuntimeError("the transaction waited on something else")
    [(query, params)] = recorder.sent
    recorder.sent.clear()
    assert isinstance(query, PreparedSQL)
    return query, query.arguments(params)


def plan(template: str, count: int) -> Iterator[tuple[Step, Step, Step]]:
    """The (LOCK, POST, UNLOCK) steps of C{count} cycles on L{KEY}, the
    state C{template} with serials 1, 2, ..., made by Kilolock's own
    transaction code: version 1 a full snapshot, the rest zstd deltas
    against the newest snapshot, as Kilolock stores them."""
    from write_cycle import lock_info

    states = PostgresStates(None, lambda: datetime.now(UTC), None)  # type: ignore[arg-type]
    snapshots = states._snapshots
    recorder = _Recorder(())
    parsed: ParsedState | None = None
    projection: WriteParameters | None = None
    for number in range(1, count + 1):
        lock_id = str(uuid.uuid4())
        info = LockInfo.from_bytes(lock_info(lock_id))
        raw = template.replace("{serial}", str(number)).encode()
        # Only the serial differs between the cycles' states: one parse and
        # one quoted projection serve them all.
        parsed = parse_state(raw) if parsed is None else evolve(parsed, serial=number)
        upload = StateUpload(raw=raw, sha256=hashlib.sha256(raw).hexdigest(), parsed=parsed)
        projection = projection or WriteParameters.of(upload)
        cached = snapshots.get(KEY)
        stored: StoredPayload = encode_version(
            raw, VersionIdentity(KEY.tenant, KEY.path, number, upload.sha256, len(raw)),
            None if cached is None else cached.snapshot)
        recorder.row = (True, None, None)  # what the rows look like, not what they say
        lock = _recorded(states._lock_txn(recorder, KEY, info, PRINCIPAL), recorder)
        write = _recorded(states._write_txn(
            recorder, KEY, upload, lock_id, PRINCIPAL, projection, stored,
            None if cached is None else cached.number, None, datetime.now(UTC), STATE_WRITE,
            {"terraform_version": upload.parsed.terraform_version}), recorder)
        recorder.row = (True, None, None, None, None)
        unlock = _recorded(states._unlock_txn(recorder, KEY, lock_id, info.raw, LOCK_RELEASE,
                                              PRINCIPAL, None), recorder)
        snapshots.written(KEY, number, raw, upload.sha256, stored)
        yield lock, write, unlock


def _text(value: Any) -> bytes | None:
    """A parameter in PostgreSQL's text format (psycopg 3's C{PGconn})."""
    if value is None:
        return None
    if isinstance(value, bool):
        return b"t" if value else b"f"
    if isinstance(value, bytes):
        return b"\\x" + value.hex().encode()
    if isinstance(value, datetime):
        return value.isoformat().encode()
    if isinstance(value, list):
        return ("{" + ",".join(f'"{item}"' for item in value) + "}").encode()
    if isinstance(value, SQLLiteral):  # 'text' quoted for SQL: unquoted again
        quoted: bytes = value.getquoted()
        assert quoted[:1] == b"'" and quoted[-1:] == b"'", quoted[:10]
        return quoted[1:-1].replace(b"''", b"'")
    return str(value).encode()


class TxpostgresDriver:
    """Kilolock's driver: one txpostgres connection, the statements
    prepared with SQL and run as C{EXECUTE} (psycopg2 interpolates)."""

    def __init__(self, reactor: Any) -> None:
        self.connection = txpostgres.Connection(reactor)

    async def start(self, dsn: str) -> None:
        await self.connection.connect(connection_string(dsn))
        register_type(BYTEA_AS_HEX, self.connection._connection)  # as Kilolock's sessions
        await self.connection.runOperation(prepare_statements_sql(STATEMENTS))

    @staticmethod
    def prepare(step: Step) -> Any:
        statement, arguments = step
        return statement.execute_sql, arguments

    def run(self, prepared: Any) -> Deferred[Any]:
        """A Deferred firing with the statement's first column."""
        sql, arguments = prepared
        running: Deferred[Any] = self.connection.runQuery(sql, arguments)
        return running.addCallback(lambda rows: rows[0][0])


class Psycopg3Driver:
    """psycopg 3's non-blocking libpq connection on a reader of its own,
    the statements prepared by the protocol, parameters pre-encoded."""

    def __init__(self, reactor: Any) -> None:
        self.reactor = reactor
        self.session: Psycopg3Session | None = None

    async def start(self, dsn: str) -> None:
        self.session = Psycopg3Session(self.reactor, connection_string(dsn))
        pgconn = self.session.pgconn
        pgconn.nonblocking = 0
        for statement in STATEMENTS:
            sql = statement.prepare.split(" AS ", 1)[1]
            result = pgconn.prepare(statement.name.encode(), sql.encode())
            if result.status != ExecStatus.COMMAND_OK:
                raise RuntimeError(result.error_field(b"M"[0]))
        pgconn.nonblocking = 1

    @staticmethod
    def prepare(step: Step) -> Any:
        statement, arguments = step
        return statement.name.encode(), [_text(value) for value in arguments]

    def run(self, prepared: Any) -> Deferred[Any]:
        assert self.session is not None
        name, arguments = prepared
        pgconn = self.session.pgconn
        pgconn.send_query_prepared(name, arguments)
        waiting = self.session.waiting = Deferred()
        if pgconn.flush():
            self.reactor.addWriter(self.session)
        return waiting.addCallback(_first_value)


def _first_value(result: Any) -> Any:
    value = result.get_value(0, 0)
    return {b"t": True, b"f": False}.get(value, value.decode() if value else value)


class StackFloor(Resource):
    """Reads the body; LOCK, POST and UNLOCK each run their statement of
    the current cycle; a GET answers the number of cycles completed."""

    isLeaf = True

    def __init__(self, driver: Any, cycles: list[tuple[Any, Any, Any]]) -> None:
        super().__init__()
        self.driver = driver
        self.cycles = cycles
        self.done = 0

    def render(self, request: Any) -> Any:
        request.content.read()
        request.setHeader(b"Content-Type", b"application/json")
        step = {b"LOCK": 0, b"POST": 1, b"UNLOCK": 2}.get(request.method)
        if step is None:
            return json.dumps({"cycles": self.done}).encode()
        if self.done >= len(self.cycles):
            request.setResponseCode(503)
            return b'{"error":"no cycles left: start with a larger --cycles"}'

        def answer(value: Any) -> None:
            if value != DONE[step]:
                request.setResponseCode(409)
            elif step == 2:
                self.done += 1
            request.setHeader(b"Content-Length", b"0")  # else chunked, as the floor is not
            request.finish()

        def failed(failure: Any) -> None:
            message = failure.getErrorMessage().encode()[:200]
            request.setResponseCode(500)
            request.setHeader(b"Content-Length", b"%d" % len(message))
            request.write(message)
            request.finish()

        self.driver.run(self.cycles[self.done][step]).addCallbacks(answer, failed)
        return NOT_DONE_YET


def prepare_database(dsn: str) -> None:
    """Kilolock's schema in the database (when it is not there yet)."""
    with psycopg.connect(dsn) as connection, connection.cursor() as cursor:
        ensure_schema_blocking(cursor)


def check(port: int, dsn: str) -> str:
    """What the database holds after the cycles the server on C{port}
    answered: one version and three events per cycle, the audit chain
    intact; a line saying so, or L{AssertionError}."""
    from urllib.request import urlopen

    from kilolock.core.audit import verify_chain
    from kilolock.store.postgres import rows

    with urlopen(f"http://127.0.0.1:{port}/", timeout=10) as answer:
        cycles = json.load(answer)["cycles"]
    with psycopg.connect(dsn) as connection:
        versions = connection.execute(
            "SELECT count(*), count(DISTINCT serial), max(number) FROM state_versions v"
            " JOIN states s ON s.id = v.state_id WHERE s.tenant_id = %s AND s.path = %s",
            (KEY.tenant, KEY.path)).fetchone()
        codecs: dict[str, int] = dict(connection.execute(
            "SELECT codec, count(*) FROM state_versions GROUP BY codec").fetchall())
        resources = connection.execute("SELECT count(*) FROM resources").fetchone()
        events = [rows.event(row) for row in connection.execute(
            statements.select_events(None, None, None, None), {"tenant": KEY.tenant})]
    assert versions == (cycles, cycles, cycles), (versions, cycles)
    assert len(events) == 3 * cycles, (len(events), cycles)
    broken = verify_chain(events)
    assert broken is None, broken
    return (f"{cycles} cycles answered: {versions[0]} versions (serials 1-{cycles};"
            f" codecs {codecs}), {resources[0] if resources else 0} resource rows,"
            f" {len(events)} events, the audit chain verifies")


async def start(reactor: Any, args: argparse.Namespace) -> None:
    from write_cycle import state_template

    prepare_database(args.dsn)
    driver = (Psycopg3Driver if args.driver == "pg3" else TxpostgresDriver)(reactor)
    cycles = [tuple(driver.prepare(step) for step in steps)
              for steps in plan(state_template(), args.cycles)]
    await driver.start(args.dsn)
    resource = StackFloor(driver, cycles)
    reactor.listenTCP(args.port, Site(resource), interface="127.0.0.1")
    print(f"stack floor ({args.driver}) on port {args.port}: {len(cycles)} cycles",
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("port", type=int)
    parser.add_argument("dsn")
    parser.add_argument("--driver", choices=("txpostgres", "pg3"), default="txpostgres")
    parser.add_argument("--cycles", type=int, default=30_000)
    args = parser.parse_args()
    reactor: Any = global_reactor
    starting = Deferred.fromCoroutine(start(reactor, args))

    def stop(failure: Any) -> None:
        failure.printTraceback()
        reactor.stop()

    starting.addErrback(stop)
    reactor.run()


if __name__ == "__main__":
    main()
