"""Benchmark: what one statement costs Kilolock's process on each driver path.

The same statement is run N times, one after the other, on Twisted's reactor,
through:

  - kilolock: Kilolock's own path, L{TransactionRunner.run_interaction} on a
    pool of one session (the runner's deadline and retries, the pool's
    semaphore, the connection's lock and dead-connection detector,
    txpostgres's cursor over an asynchronous psycopg2 connection);
  - pool: Kilolock's pool of one session without the runner (the
    semaphore, the connection's lock and detector, BEGIN/COMMIT travelling
    with the statement);
  - txpostgres: a bare txpostgres connection's cursor (what the pool adds
    is the difference to the line above);
  - psycopg2: a minimal asynchronous psycopg2 connection polled by a
    reader of its own that stays registered (no reader added and removed
    per statement, the result handed over at once instead of one reactor
    turn later);
  - psycopg3: psycopg 3's libpq connection (C{psycopg.pq.PGconn}, its
    non-blocking API: send, flush, consume, results) driven by a reader of
    its own, parameters sent apart from the query (extended protocol).

The last two have no deadline, retry, pool, reconnection or cancellation:
they are the floor a leaner driver path could approach, not a design.

Statements: C{SELECT 1} (a round trip), and a one-row C{INSERT} that is its
own transaction (a round trip and a commit; C{synchronous_commit} off in
the benchmark's database, so that the disk does not decide the figure).  Rounds
alternate between the paths; printed: medians of the rounds of the wall
time and of this process's CPU time per statement, in microseconds, and the
ratios to Kilolock's path in the same run.

    python bench/driver_path.py [--statements 2000] [--rounds 5]
        [--paths kilolock,pool,txpostgres,psycopg2,psycopg3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import psycopg2
import psycopg2.extensions
from psycopg.pq import ConnStatus, ExecStatus, PGconn
from twisted.internet import defer, task
from twisted.internet.defer import Deferred, ensureDeferred
from twisted.internet.interfaces import IReadDescriptor, IWriteDescriptor
from twisted.python.failure import Failure
from txpostgres import txpostgres
from zope.interface import implementer

sys.path.insert(0, str(Path(__file__).resolve().parent))

from servers import new_database, postgres_cluster

from kilolock.store.postgres.dsn import connection_string
from kilolock.store.postgres.pool import ResilientPool, Ticket
from kilolock.store.postgres.runner import RunnerSettings, TransactionRunner

SELECT = "SELECT 1"
INSERT = "INSERT INTO bench_rows (v) VALUES (%s)"
INSERT_NAMED = "INSERT INTO bench_rows (v) VALUES (%(v)s)"
INSERT_NUMBERED = "INSERT INTO bench_rows (v) VALUES ($1)"
VALUE = "a small value of a few dozen bytes, like a lock ID: 0123456789"

#: Runs one statement: (statement kind) -> a Deferred firing when it is done.
Run = Callable[[str], Awaitable[Any]]


@implementer(IReadDescriptor, IWriteDescriptor)
class Psycopg2Session:
    """An asynchronous psycopg2 connection and its cursor, polled by this
    descriptor, which stays registered as a reader once connected."""

    def __init__(self, reactor: Any) -> None:
        self.reactor = reactor
        self.connection: Any = None
        self.cursor: Any = None
        self.waiting: Deferred[Any] | None = None

    def connect(self, dsn: str) -> Deferred[Any]:
        self.connection = psycopg2.connect(dsn, async_=True)
        waiting = self.waiting = Deferred()
        self._poll()
        return waiting.addCallback(self._connected)

    def _connected(self, _: object) -> None:
        self.cursor = self.connection.cursor()
        self.reactor.addReader(self)

    def execute(self, sql: str, params: Any = None) -> Deferred[Any]:
        self.cursor.execute(sql, params)
        waiting = self.waiting = Deferred()
        self._poll()
        return waiting

    def _poll(self) -> None:
        try:
            state = self.connection.poll()
        except psycopg2.Error:
            waiting, self.waiting = self.waiting, None
            if waiting is not None:
                waiting.errback(Failure())
            return
        if state == psycopg2.extensions.POLL_OK:
            waiting, self.waiting = self.waiting, None
            if waiting is not None:
                waiting.callback(self.cursor)
        elif state == psycopg2.extensions.POLL_WRITE:
            self.reactor.addWriter(self)
        elif state == psycopg2.extensions.POLL_READ and self.cursor is None:
            self.reactor.addReader(self)  # connecting

    def fileno(self) -> int:
        return int(self.connection.fileno())

    def doRead(self) -> None:
        if self.cursor is None:
            self.reactor.removeReader(self)
        self._poll()

    def doWrite(self) -> None:
        self.reactor.removeWriter(self)
        self._poll()

    def connectionLost(self, reason: Failure) -> None:
        pass

    def logPrefix(self) -> str:
        return "psycopg2-session"

    def close(self) -> None:
        self.reactor.removeReader(self)
        self.reactor.removeWriter(self)
        self.connection.close()


@implementer(IReadDescriptor, IWriteDescriptor)
class Psycopg3Session:
    """psycopg 3's libpq connection in non-blocking mode, driven by this
    descriptor (a reader for as long as it is open)."""

    def __init__(self, reactor: Any, dsn: str) -> None:
        self.reactor = reactor
        self.pgconn = PGconn.connect(dsn.encode())
        if self.pgconn.status != ConnStatus.OK:
            raise RuntimeError(self.pgconn.get_error_message())
        self.pgconn.nonblocking = 1
        self.waiting: Deferred[Any] | None = None
        self.last: Any = None
        reactor.addReader(self)

    def execute(self, sql: bytes, params: list[bytes | None] | None = None) -> Deferred[Any]:
        if params is None:
            self.pgconn.send_query(sql)
        else:
            self.pgconn.send_query_params(sql, params)
        waiting = self.waiting = Deferred()
        if self.pgconn.flush():
            self.reactor.addWriter(self)
        return waiting

    def fileno(self) -> int:
        return int(self.pgconn.socket)

    def doRead(self) -> None:
        self.pgconn.consume_input()
        while not self.pgconn.is_busy():
            result = self.pgconn.get_result()
            if result is None:
                waiting, self.waiting, last, self.last = self.waiting, None, self.last, None
                if waiting is not None:
                    if last.status in (ExecStatus.FATAL_ERROR, ExecStatus.BAD_RESPONSE):
                        waiting.errback(RuntimeError(last.get_error_field(b"M"[0])))
                    else:
                        waiting.callback(last)
                return
            self.last = result

    def doWrite(self) -> None:
        if not self.pgconn.flush():
            self.reactor.removeWriter(self)

    def connectionLost(self, reason: Failure) -> None:
        pass

    def logPrefix(self) -> str:
        return "psycopg3-session"

    def close(self) -> None:
        self.reactor.removeReader(self)
        self.reactor.removeWriter(self)
        self.pgconn.finish()


async def kilolock_path(reactor: Any, dsn: str) -> tuple[Run, Callable[[], Any]]:
    runner = TransactionRunner(dsn, reactor, RunnerSettings(pool_size=1))
    await runner.start()

    async def select(cursor: Any) -> Any:
        await cursor.execute(SELECT, None, commit=True)
        return cursor.fetchone()

    async def insert(cursor: Any) -> None:
        await cursor.execute(INSERT_NAMED, {"v": VALUE}, commit=True)

    def run(kind: str) -> Deferred[Any]:
        return runner.run_interaction(select if kind == "select" else insert)

    return run, runner.stop


async def pool_path(reactor: Any, dsn: str) -> tuple[Run, Callable[[], Any]]:
    pool = ResilientPool(reactor, dsn, 1, 5.0)
    await pool.start()

    async def select(cursor: Any) -> Any:
        await cursor.execute(SELECT, None, commit=True)
        return cursor.fetchone()

    async def insert(cursor: Any) -> None:
        await cursor.execute(INSERT_NAMED, {"v": VALUE}, commit=True)

    def run(kind: str) -> Deferred[Any]:
        txn = select if kind == "select" else insert
        return pool.run_transaction(lambda cursor: ensureDeferred(txn(cursor)), Ticket())

    return run, pool.retire


async def txpostgres_path(reactor: Any, dsn: str) -> tuple[Run, Callable[[], Any]]:
    connection = txpostgres.Connection(reactor)
    await connection.connect(dsn)

    async def run(kind: str) -> Any:
        cursor = connection.cursor()
        if kind == "select":
            await cursor.execute(SELECT)
            return cursor.fetchone()
        return await cursor.execute(INSERT, (VALUE,))

    return run, connection.close


async def psycopg2_path(reactor: Any, dsn: str) -> tuple[Run, Callable[[], Any]]:
    session = Psycopg2Session(reactor)
    await session.connect(dsn)

    async def run(kind: str) -> Any:
        if kind == "select":
            cursor = await session.execute(SELECT)
            return cursor.fetchone()
        return await session.execute(INSERT, (VALUE,))

    return run, session.close


async def psycopg3_path(reactor: Any, dsn: str) -> tuple[Run, Callable[[], Any]]:
    session = Psycopg3Session(reactor, dsn)
    select, insert, value = SELECT.encode(), INSERT_NUMBERED.encode(), VALUE.encode()

    async def run(kind: str) -> Any:
        if kind == "select":
            result = await session.execute(select)
            return result.get_value(0, 0)
        return await session.execute(insert, [value])

    return run, session.close


PATHS = {"kilolock": kilolock_path, "pool": pool_path, "txpostgres": txpostgres_path,
         "psycopg2": psycopg2_path, "psycopg3": psycopg3_path}


async def measure(run: Run, kind: str, count: int) -> tuple[float, float]:
    """(wall, CPU of this process) per statement, in microseconds."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(count):
        await run(kind)
    return ((time.perf_counter() - wall) * 1e6 / count,
            (time.process_time() - cpu) * 1e6 / count)


async def main(reactor: Any, args: argparse.Namespace) -> None:
    with postgres_cluster() as cluster:
        raw = new_database(cluster, "bench_driver_path")
        dsn = connection_string(raw)
        with psycopg2.connect(dsn) as setup, setup.cursor() as cursor:
            cursor.execute("CREATE TABLE bench_rows (id bigserial PRIMARY KEY, v text)")
            cursor.execute("ALTER DATABASE bench_driver_path SET synchronous_commit = off")
        paths: dict[str, tuple[Run, Callable[[], Any]]] = {}
        for name in args.paths.split(","):
            paths[name] = await PATHS[name](reactor, dsn)
        names = list(paths)
        for kind in ("select", "insert"):
            walls: dict[str, list[float]] = {name: [] for name in names}
            cpus: dict[str, list[float]] = {name: [] for name in names}
            for name in names:  # warm up
                await measure(paths[name][0], kind, 200)
            for round_index in range(args.rounds):
                order = names[round_index % len(names):] + names[:round_index % len(names)]
                for name in order:
                    wall, cpu = await measure(paths[name][0], kind, args.statements)
                    walls[name].append(wall)
                    cpus[name].append(cpu)
            print(f"\n{kind}: {args.statements} statements x {args.rounds} rounds, medians"
                  " (us per statement; ratio to kilolock in the same run)")
            print("| path | wall | CPU of this process | wall / kilolock | CPU / kilolock |")
            print("|---|---|---|---|---|")
            base_wall = statistics.median(walls["kilolock"])
            base_cpu = statistics.median(cpus["kilolock"])
            for name in names:
                wall, cpu = statistics.median(walls[name]), statistics.median(cpus[name])
                print(f"| {name} | {wall:.1f} | {cpu:.1f} | {wall / base_wall:.2f} |"
                      f" {cpu / base_cpu:.2f} |", flush=True)
        for _, close in paths.values():
            result = close()
            if isinstance(result, Deferred):
                await result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--statements", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--paths", default=",".join(PATHS),
                        help="which paths (kilolock first: the ratios are to it)")
    arguments = parser.parse_args()
    task.react(lambda reactor: defer.ensureDeferred(main(reactor, arguments)))
