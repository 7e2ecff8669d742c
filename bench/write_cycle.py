"""Benchmark (a): Terraform's write cycle LOCK -> POST ?ID= -> UNLOCK.

Each client owns one state and repeats the cycle with an increasing serial
and a 50-resource (~18 KB) state.  Cycles per second at 1, 8 and 32
concurrent clients, next to what is measured in the same run:

  - floor: a twisted.web server that reads the body and answers 200;
  - memory, postgres: Kilolock on its memory store, and on PostgreSQL (an
    embedded cluster of the benchmark's own, default configuration; with
    --processes N, N Kilolock processes on that one database, the clients
    spread over them);
  - durable: the durable floor (bench/durable_floor.py), the database's own
    cost of the cycle's three transactions, from a minimal psycopg 3 client;
  - stack, stack-pg3: the stack floor (bench/stack_floor.py), a minimal
    twisted.web server doing per request only Kilolock's statement of the
    step, with parameters made in advance, on txpostgres (Kilolock's
    driver) or psycopg 3's libpq connection: the upper bound of any server
    on this stack (one client only; the database's rows checked after);
  - tss: terraform-state-server (Node + PostgreSQL, one JSONB row, one state:
    one client only), when KL_BENCH_TSS_DIR names a checkout of it with its
    node_modules.

Medians of several rounds; ratios against the floor, the durable floor and
tss; server CPU per cycle (the server processes, and PostgreSQL's) from
/proc; the 99th percentile of a cycle's latency, the worst round's.

    python bench/write_cycle.py [--seconds 5] [--rounds 3] [--clients 1,8,32]
        [--servers floor,memory,postgres,durable,tss] [--processes 1,2]

C{--servers floor,stack,postgres,durable,tss --clients 1 --interleave}
prints every server's ratio to C{floor}, C{tss} and C{postgres} measured in
the same rounds.

C{--servers postgres,postgres-encrypted} compares encryption at rest off and
on in the same run; with C{--interleave} the servers run at once, their
rounds in rotating order (ratios to the first server, and to C{floor} when
it is one of them), which is what to quote on a machine that other work
disturbs.
C{--servers postgres-baseline,postgres --interleave} compares the code of
another tree (C{KL_BENCH_BASELINE_TREE}, see C{servers.py}) with this one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import durable_floor
import stack_floor
from durable_floor import prepare_database
from http_client import Connection
from servers import (
    BASELINE,
    ENCRYPTED,
    STACK_FLOORS,
    TSS_DIRECTORY,
    cluster_cpu,
    cluster_pids,
    new_database,
    postgres_cluster,
    running,
    running_many,
    running_tss,
)

from kilolock.store.postgres.embedded import EmbeddedPostgres

PROVIDER = 'provider["terraform.io/builtin/terraform"]'


def state_template(resources: int = 50) -> str:
    """A v4 state with a C{{serial}} placeholder, pretty-printed like Terraform."""
    doc = {
        "version": 4, "terraform_version": "1.15.5", "serial": 999_999_999,
        "lineage": str(uuid.uuid4()), "outputs": {"count": {"value": resources,
                                                             "type": "number"}},
        "resources": [{
            "mode": "managed", "type": "terraform_data", "name": f"item_{index}",
            "provider": PROVIDER,
            "instances": [{
                "schema_version": 0,
                "attributes": {"id": uuid.uuid4().hex[:12], "input": None, "output": None,
                               "triggers_replace": None},
                "sensitive_attributes": [],
            }],
        } for index in range(resources)],
        "check_results": None,
    }
    # Terraform pretty-prints with two spaces; compact separators keep the
    # 50-resource state near the 15 KB the benchmark is specified with.
    return json.dumps(doc, indent=1).replace("999999999", "{serial}") + "\n"


def lock_info(lock_id: str) -> bytes:
    return json.dumps({"ID": lock_id, "Operation": "OperationTypeApply", "Info": "",
                       "Who": "bench@host", "Version": "1.15.5",
                       "Created": "2026-11-29T23:05:20.206526015Z", "Path": ""}).encode()


async def client_loop(port: int, name: str, template: str, deadline: float,
                      latencies: list[float], single_state: bool = False) -> int:
    connection = await Connection.open(port)
    path = "/state" if single_state else f"/v1/states/{name}"
    serial = 1
    cycles = 0
    try:
        while time.monotonic() < deadline:
            lock_id = str(uuid.uuid4())
            info = lock_info(lock_id)
            body = template.replace("{serial}", str(serial)).encode()
            started = time.monotonic()
            for method, target, payload in (("LOCK", path, info),
                                            ("POST", f"{path}?ID={lock_id}", body),
                                            ("UNLOCK", path, info)):
                if single_state:
                    # terraform-state-server closes the connection after each
                    # answer (express's final handler runs after the route).
                    await connection.close()
                    connection = await Connection.open(port)
                status, _ = await connection.request(method, target, payload)
                if status != 200:
                    raise RuntimeError(f"{method} answered {status}")
            latencies.append(time.monotonic() - started)
            serial += 1
            cycles += 1
    finally:
        await connection.close()
    return cycles


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU time of the processes (those still alive)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


async def measure(ports: list[int], clients: int, seconds: float, template: str, tag: str,
                  latencies: list[float], single_state: bool = False) -> float:
    """Cycles per second of C{clients} clients spread over C{ports}."""
    deadline = time.monotonic() + seconds
    started = time.monotonic()
    counts = await asyncio.gather(*(
        client_loop(ports[index % len(ports)], f"bench-{tag}-{index}", template, deadline,
                    latencies, single_state)
        for index in range(clients)))
    return sum(counts) / (time.monotonic() - started)


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] if ordered else 0.0


#: Servers that serve one client only (one state, or one connection).
ONE_CLIENT = ("tss", *STACK_FLOORS)


def stack_cycles(args: argparse.Namespace) -> int:
    """Cycles a stack floor prepares: enough for every round at 800 cycles/s."""
    return int(args.rounds * (args.seconds + 1) * 800) + 2_000


@contextlib.contextmanager
def started(server: str, processes: int, cluster: EmbeddedPostgres | None, cycles: int = 0,
            ) -> Iterator[tuple[list[int], list[int], list[int], str | None]]:
    """Start C{server}: (its ports, its own pids, its database's pids, the
    durable floor's DSN).  A stack floor prepares C{cycles} cycles, and
    what its database holds is checked when it is done."""
    if server in ("floor", "memory"):
        with running(server) as (port, pid):
            yield [port], [pid], [], None
        return
    assert cluster is not None
    dsn = new_database(cluster, f"bench_{server}_{processes}_{uuid.uuid4().hex[:6]}")
    if server == "durable":
        prepare_database(dsn)
        yield [], [], cluster_pids(cluster), dsn
    elif server == "tss":
        with running_tss(dsn) as (port, pid):
            yield [port], [pid], cluster_pids(cluster), None
    elif server in STACK_FLOORS:
        with running(server, [dsn, "--cycles", str(cycles)]) as (port, pid):
            yield [port], [pid], cluster_pids(cluster), None
            print(f"{server}: {stack_floor.check(port, dsn)}", flush=True)
    else:
        with running_many(server, processes, ["--database", dsn]) as servers:
            yield ([port for port, _ in servers], [pid for _, pid in servers],
                   cluster_pids(cluster), None)


def run_server(server: str, processes: int, clients: int, args: argparse.Namespace,
               template: str, cluster: EmbeddedPostgres | None) -> dict[str, float] | None:
    """Rounds of one server at one client count: the medians (rate, CPU ms
    per cycle of the server and of PostgreSQL) and the worst round's p99."""
    if server in ONE_CLIENT and clients != 1:
        return None  # one state, or one connection, only
    with started(server, processes, cluster, stack_cycles(args)) as (ports, own, database,
                                                                      dsn):
        rates, own_ms, database_ms, p99s = [], [], [], []
        for round_index in range(args.rounds):
            tag = f"{clients}-{round_index}-{uuid.uuid4().hex[:6]}"
            run(server, ports, dsn, clients, 1.0, template, "warm" + tag, [])
            latencies: list[float] = []
            before = (cpu_seconds(own), cluster_cpu(cluster) if database and cluster else 0.0)
            began = time.monotonic()
            rate = run(server, ports, dsn, clients, args.seconds, template, tag, latencies)
            cycles = max(rate * (time.monotonic() - began), 1)
            if dsn is not None:
                latencies = [sum(latencies[i:i + 3]) for i in range(0, len(latencies), 3)]
            own_ms.append(1000 * (cpu_seconds(own) - before[0]) / cycles)
            database_ms.append(1000 * ((cluster_cpu(cluster) if database and cluster else 0.0)
                                       - before[1]) / cycles)
            rates.append(rate)
            p99s.append(1000 * p99(latencies))
    result = {"rate": statistics.median(rates), "own": statistics.median(own_ms),
              "database": statistics.median(database_ms), "p99": max(p99s)}
    print(f"{label(server, processes):12s} clients={clients:3d} cycles/s"
          f" median={result['rate']:8.1f}  rounds={', '.join(f'{r:.1f}' for r in rates)}"
          f"  CPU ms/cycle server={result['own']:.3f} database={result['database']:.3f}"
          f"  p99 ms/cycle={', '.join(f'{v:.1f}' for v in p99s)}", flush=True)
    return result


def interleaved(servers: list[str], clients: int, args: argparse.Namespace,
                template: str, cluster: EmbeddedPostgres) -> None:
    """The servers running at once (each on a database of its own), their
    rounds in rotating order, so that the load of the machine falls on all
    alike; prints, for each server after the first, each round's ratio to
    the first (cycles/s and server CPU per cycle) and the medians, and with
    C{floor}, C{tss} or C{postgres} among them every server's ratio to
    each; then each server's medians."""
    servers = [server for server in servers if clients == 1 or server not in ONE_CLIENT]
    load = os.getloadavg()
    rates: dict[str, list[float]] = {server: [] for server in servers}
    cpu: dict[str, list[float]] = {server: [] for server in servers}
    database: dict[str, list[float]] = {server: [] for server in servers}
    with contextlib.ExitStack() as stack:
        up = {server: stack.enter_context(started(server, 1, cluster, stack_cycles(args)))
              for server in servers}
        for round_index in range(args.rounds):
            shift = round_index % len(servers)
            for server in servers[shift:] + servers[:shift]:
                ports, own, _, dsn = up[server]
                tag = f"{server}-{clients}-{round_index}-{uuid.uuid4().hex[:6]}"
                run(server, ports, dsn, clients, 1.0, template, "warm" + tag, [])
                before, began = (cpu_seconds(own), cluster_cpu(cluster)), time.monotonic()
                rate = run(server, ports, dsn, clients, args.seconds, template, tag, [])
                cycles = max(rate * (time.monotonic() - began), 1)
                rates[server].append(rate)
                cpu[server].append(1000 * (cpu_seconds(own) - before[0]) / cycles)
                database[server].append(1000 * (cluster_cpu(cluster) - before[1]) / cycles)
    first = servers[0]
    for second in servers[1:]:
        ratios = [b / a for a, b in zip(rates[first], rates[second], strict=True)]
        cpu_ratios = [b / a for a, b in zip(cpu[first], cpu[second], strict=True)]
        print(f"interleaved, {clients} clients: {second}/{first} cycles/s median"
              f" {statistics.median(ratios):.2f} (rounds {', '.join(f'{r:.2f}' for r in ratios)});"
              f" server CPU ms per cycle median {statistics.median(cpu[first]):.3f} vs"
              f" {statistics.median(cpu[second]):.3f}, ratio {statistics.median(cpu_ratios):.2f};"
              f" database CPU ms per cycle {statistics.median(database[first]):.3f} vs"
              f" {statistics.median(database[second]):.3f};"
              f" cycles/s medians {statistics.median(rates[first]):.1f} vs"
              f" {statistics.median(rates[second]):.1f}", flush=True)
    for reference in ("floor", "tss", "postgres"):
        if reference not in servers:
            continue
        for server in servers:
            if server != reference:
                ratios = [b / a for a, b in zip(rates[reference], rates[server], strict=True)]
                print(f"interleaved, {clients} clients: {server}/{reference} cycles/s median"
                      f" {statistics.median(ratios):.3f}"
                      f" (rounds {', '.join(f'{r:.3f}' for r in ratios)})", flush=True)
    print(f"interleaved, {clients} clients, {args.rounds} rounds of {args.seconds:g} s,"
          f" load average {load[0]:.2f} before, {os.getloadavg()[0]:.2f} after:")
    for server in servers:
        rate = statistics.median(rates[server])
        print(f"  {server:18s} cycles/s median {rate:8.1f} ({1000 / rate:.2f} ms a cycle;"
              f" rounds {', '.join(f'{r:.1f}' for r in rates[server])});"
              f" CPU ms per cycle: server {statistics.median(cpu[server]):.3f},"
              f" database {statistics.median(database[server]):.3f}", flush=True)


def run(server: str, ports: list[int], dsn: str | None, clients: int, seconds: float,
        template: str, tag: str, latencies: list[float]) -> float:
    """One measurement: the durable floor's clients when C{dsn} is set, else
    HTTP clients on C{ports}."""
    if dsn is not None:
        return asyncio.run(durable_floor.measure(dsn, clients, seconds, template, tag,
                                                 latencies))
    return asyncio.run(measure(ports, clients, seconds, template, tag, latencies,
                               single_state=server == "tss"))


def label(server: str, processes: int) -> str:
    return f"postgres-x{processes}" if server == "postgres" and processes > 1 else server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", default="1,8,32")
    parser.add_argument("--servers", default="floor,memory,postgres,durable,tss")
    parser.add_argument("--processes", default="1",
                        help="Kilolock processes on the one PostgreSQL (e.g. 1,2)")
    parser.add_argument("--interleave", action="store_true",
                        help="the servers (e.g. postgres,postgres-encrypted) at once, rounds"
                             " rotating: their ratios to the first, less disturbed by load")
    parser.add_argument("--synchronous-commit", choices=("on", "off"), default="on",
                        help="the cluster's synchronous_commit (off: commits do not wait"
                             " for the disk, so the servers' CPU decides the rate)")
    args = parser.parse_args()
    client_counts = [int(n) for n in args.clients.split(",")]
    servers = args.servers.split(",")
    process_counts = [int(n) for n in args.processes.split(",")]
    if "tss" in servers and not TSS_DIRECTORY:
        print("tss skipped: KL_BENCH_TSS_DIR is not set")
        servers.remove("tss")
    template = state_template()
    print(f"state size: {len(template.replace('{serial}', '1').encode())} bytes, 50 resources")
    if args.interleave:
        with postgres_cluster() as cluster:
            if args.synchronous_commit == "off":
                import psycopg

                with psycopg.connect(cluster.dsn("postgres"), autocommit=True) as connection:
                    connection.execute("ALTER SYSTEM SET synchronous_commit = off")
                    connection.execute("SELECT pg_reload_conf()")
                print("synchronous_commit = off")
            for clients in client_counts:
                interleaved(servers, clients, args, template, cluster)
        return
    columns = [(server, count) for server in servers
               for count in (process_counts if server in ("postgres", ENCRYPTED, BASELINE)
                             else [1])]
    results: dict[tuple[str, int, int], dict[str, float]] = {}
    with postgres_cluster() as cluster:
        for server, processes in columns:
            for clients in client_counts:
                found = run_server(server, processes, clients, args, template, cluster)
                if found is not None:
                    results[(server, processes, clients)] = found
    print()
    print_tables(columns, client_counts, results)


def print_tables(columns: list[tuple[str, int]], client_counts: list[int],
                 results: dict[tuple[str, int, int], dict[str, float]]) -> None:
    """Markdown tables: cycles per second and the ratios, then CPU and p99."""
    names = [label(server, processes) for server, processes in columns]
    references = [name for name in ("floor", "durable", "tss") if name in names]
    kilolocks = [column for column in columns
                 if column[0] in ("memory", "postgres", ENCRYPTED, BASELINE)]
    ratio_names = [f"{label(*k)}/{r}" for k in kilolocks for r in references]
    print("| clients | " + " | ".join(names) + " | " + " | ".join(ratio_names) + " |")
    print("|---" * (1 + len(names) + len(ratio_names)) + "|")
    for clients in client_counts:
        cells = [f"{results[(s, p, clients)]['rate']:.1f}" if (s, p, clients) in results
                 else "-" for s, p in columns]
        ratios = []
        for server, processes in kilolocks:
            for reference in references:
                mine = results.get((server, processes, clients))
                theirs = results.get((reference, 1, clients))
                ratios.append(f"{mine['rate'] / theirs['rate']:.2f}" if mine and theirs else "-")
        print(f"| {clients} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")
    print()
    print("CPU ms per cycle (server + database) and the worst round's p99 of a cycle (ms):")
    print()
    print("| clients | " + " | ".join(names) + " |")
    print("|---" * (1 + len(names)) + "|")
    for clients in client_counts:
        cells = []
        for server, processes in columns:
            found = results.get((server, processes, clients))
            cells.append("-" if found is None else
                         f"{found['own']:.3f} + {found['database']:.3f}; p99 {found['p99']:.1f}")
        print(f"| {clients} | " + " | ".join(cells) + " |")
    for clients in client_counts:
        plain, encrypted = (results.get((name, 1, clients)) for name in ("postgres", ENCRYPTED))
        if plain and encrypted:
            print(f"encryption at rest, {clients} clients: {ENCRYPTED}/postgres cycles/s"
                  f" {encrypted['rate'] / plain['rate']:.2f}, server CPU per cycle"
                  f" {encrypted['own'] / plain['own']:.2f}")
    scaled = sorted(p for s, p in columns if s == "postgres")
    if len(scaled) > 1:
        print()
        for clients in client_counts:
            one = results.get(("postgres", scaled[0], clients))
            for processes in scaled[1:]:
                many = results.get(("postgres", processes, clients))
                if one and many:
                    print(f"scaling, {clients} clients: {processes} processes /"
                          f" {scaled[0]} = {many['rate'] / one['rate']:.2f}")


if __name__ == "__main__":
    main()
