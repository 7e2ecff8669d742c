"""Benchmark: the server's CPU per request kind of the write cycle, at one
connection.

Each server runs LOCK -> UNLOCK pairs, then whole LOCK -> POST -> UNLOCK
cycles (the write-cycle benchmark's 18.7 KB state), rounds rotating between
the servers; from /proc, the server's CPU (and its PostgreSQL's) per pair
and per cycle.  LOCK and UNLOCK cost about the same, so each is half a
pair, and the POST is a cycle less a pair.  Against the floor (twisted.web
reading the body and answering 200) and the memory store, this splits a
request's cost into the HTTP floor, Kilolock's web layer and what the store
adds.

    python bench/request_kinds.py [--servers floor,memory,postgres] [--rounds 4]
        [--seconds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from http_client import Connection
from servers import cluster_cpu, new_database, postgres_cluster, running
from write_cycle import cpu_seconds, lock_info, state_template


async def requests(port: int, name: str, seconds: float, template: str | None) -> int:
    """LOCK -> (POST of C{template} when given) -> UNLOCK on state C{name}
    for C{seconds}; how many times."""
    connection = await Connection.open(port)
    path = f"/v1/states/{name}"
    done = 0
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            lock_id = str(uuid.uuid4())
            info = lock_info(lock_id)
            steps = [("LOCK", path, info)]
            if template is not None:
                body = template.replace("{serial}", str(done + 1)).encode()
                steps.append(("POST", f"{path}?ID={lock_id}", body))
            steps.append(("UNLOCK", path, info))
            for method, target, payload in steps:
                status, _ = await connection.request(method, target, payload)
                if status != 200:
                    raise RuntimeError(f"{method} answered {status}")
            done += 1
    finally:
        await connection.close()
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--servers", default="floor,memory,postgres")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    servers = args.servers.split(",")
    template = state_template()
    # (server, with POST) -> [(server CPU us, database CPU us)] per round
    found: dict[tuple[str, bool], list[tuple[float, float]]] = {
        (server, post): [] for server in servers for post in (False, True)}
    with postgres_cluster() as cluster, contextlib.ExitStack() as stack:
        up = {}
        for server in servers:
            extra = (["--database", new_database(cluster, f"kinds_{server.replace('-', '_')}")]
                     if server.startswith("postgres") else [])
            up[server] = stack.enter_context(running(server, extra))
        for round_index in range(args.rounds):
            shift = round_index % len(servers)
            for server in servers[shift:] + servers[:shift]:
                port, pid = up[server]
                for post in (False, True):
                    name = f"kinds-{round_index}-{int(post)}-{uuid.uuid4().hex[:6]}"
                    body = template if post else None
                    asyncio.run(requests(port, name, 0.5, body))
                    before = (cpu_seconds([pid]), cluster_cpu(cluster))
                    count = max(asyncio.run(requests(port, name, args.seconds, body)), 1)
                    found[(server, post)].append(
                        (1e6 * (cpu_seconds([pid]) - before[0]) / count,
                         1e6 * (cluster_cpu(cluster) - before[1]) / count))
    print(f"server CPU per request, us (medians of {args.rounds} rounds); PostgreSQL's in"
          " brackets")
    print("| server | LOCK | POST | UNLOCK | cycle |")
    print("|---|---|---|---|---|")
    for server in servers:
        pair = statistics.median(cpu for cpu, _ in found[(server, False)])
        cycle = statistics.median(cpu for cpu, _ in found[(server, True)])
        pair_db = statistics.median(db for _, db in found[(server, False)])
        cycle_db = statistics.median(db for _, db in found[(server, True)])
        print(f"| {server} | {pair / 2:.0f} ({pair_db / 2:.0f}) | {cycle - pair:.0f}"
              f" ({cycle_db - pair_db:.0f}) | {pair / 2:.0f} ({pair_db / 2:.0f}) |"
              f" {cycle:.0f} ({cycle_db:.0f}) |", flush=True)


if __name__ == "__main__":
    main()
